"""Rebuild divisions.csv, townships.csv and roads.txt (in shared/eval/pii_eval/, not committed) from the national division table published by China's
National Bureau of Statistics (统计用区划代码, 2023 edition), as kept in
https://github.com/modood/Administrative-divisions-of-China (dist/*.csv) at the commit below.

    git clone https://github.com/modood/Administrative-divisions-of-China /tmp/adc
    python bench/data/pii_eval/tables.py --git-dir /tmp/adc/.git

- divisions.csv: every province-, prefecture- and county-level unit: code, name, level (1-3), kind, parent code.
  The table's placeholders (市辖区 and 县 under a municipality, 省直辖县级行政区划) are not units: their
  children get the province as parent. County-level codes 71-80 (development zones and other units kept
  for statistics only, e.g. 石家庄高新技术产业开发区) are left out, as are island groups (西沙群岛) and
  administrative committees (大柴旦行政委员会).
- townships.csv: up to two township-level units (one 镇/乡, one 街道) per county-level unit, and every
  township of the four prefecture-level cities that have no county level (东莞, 中山, 儋州, 嘉峪关); a
  county or city name the table puts in front of a township name (芒市勐焕街道) is removed, and units for
  statistics only (开发区 ... 街道, 管委会) are left out.
- roads.txt: road names of three characters or more from the subdistricts named after a road
  (解放路街道 -> 解放路; two-character ones such as 大路 are as often a village's name as a road's).
"""

import argparse
import csv
import hashlib
import io
import re
import subprocess
from pathlib import Path

REPO = "modood/Administrative-divisions-of-China"
COMMIT = "57a0aa9cef47169a2eb74cf057b0245052a34e8c"
OUT = Path(__file__).resolve().parents[3] / "shared" / "eval" / "pii_eval"
NO_COUNTY_CITIES = {"4419", "4420", "4604", "6202"}  # 东莞 中山 儋州 嘉峪关: townships directly under the city
PLACEHOLDERS = {"市辖区", "县", "省直辖县级行政区划", "自治区直辖县级行政区划"}


def province_kind(name: str) -> str:
    if name in ("北京市", "天津市", "上海市", "重庆市"):
        return "municipality"
    return "autonomous_region" if name.endswith("自治区") else "province"


# The kind of a unit from the end of its name, longest suffix first.
PREFECTURE_KINDS = (("自治州", "autonomous_prefecture"), ("盟", "league"), ("地区", "prefecture"), ("市", "city"))
COUNTY_KINDS = (("自治旗", "autonomous_banner"), ("旗", "banner"), ("自治县", "autonomous_county"),
                ("林区", "forest_district"), ("特区", "special_district"), ("区", "district"), ("县", "county"),
                ("市", "county_city"))


def kind_of(name: str, kinds: tuple[tuple[str, str], ...]) -> str:
    for suffix, kind in kinds:
        if name.endswith(suffix):
            return kind
    raise ValueError(f"no kind for {name}; known suffixes: {', '.join(s for s, _ in kinds)}")


def _pick(rows: list[dict], n: int, salt: str) -> list[dict]:
    """n rows chosen by a hash of their code: stable, and independent of the order of the input."""
    return sorted(rows, key=lambda r: hashlib.sha256((salt + r["code"]).encode()).hexdigest())[:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--git-dir", required=True)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()

    def table(name: str) -> list[dict]:
        raw = subprocess.run(["git", "--git-dir", args.git_dir, "show", f"{COMMIT}:dist/{name}"],
                             capture_output=True, check=True).stdout.decode("utf-8")
        return list(csv.DictReader(io.StringIO(raw)))

    provinces, cities, areas, streets = table("provinces.csv"), table("cities.csv"), table("areas.csv"), table("streets.csv")
    out = Path(args.out)
    rows = [(p["code"], p["name"], 1, province_kind(p["name"]), "") for p in provinces]
    real_city = {c["code"] for c in cities if c["name"] not in PLACEHOLDERS}
    rows += [(c["code"], c["name"], 2, kind_of(c["name"], PREFECTURE_KINDS), c["provinceCode"]) for c in cities
             if c["code"] in real_city]
    counties = []
    for a in areas:
        if 71 <= int(a["code"][4:6]) <= 80 or a["cityCode"] in NO_COUNTY_CITIES or a["name"].endswith(("群岛", "海域", "委员会", "管委会")):
            continue
        parent = a["cityCode"] if a["cityCode"] in real_city else a["provinceCode"]
        rows.append((a["code"], a["name"], 3, kind_of(a["name"], COUNTY_KINDS), parent))
        counties.append(a["code"])
    with (out / "divisions.csv").open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["code", "name", "level", "kind", "parent"])
        w.writerows(rows)

    names = {r[0]: r[1] for r in rows}
    by_county: dict[str, list[dict]] = {}
    for s in streets:
        # some township names carry their county's (and city's) name in front: 芒市勐焕街道, 高阳县锦华街道
        for prefix in (names.get(s["cityCode"], "") + names.get(s["areaCode"], ""), names.get(s["areaCode"], ""),
                       names.get(s["cityCode"], "")):
            if prefix and s["name"].startswith(prefix) and len(s["name"]) > len(prefix) + 1:
                s["name"] = s["name"][len(prefix):]
                break
        by_county.setdefault(s["areaCode"], []).append(s)
    towns = []
    for county in counties:
        units = [u for u in by_county.get(county, []) if not re.search(r"开发区|管委会|委员会|特殊", u["name"])]
        towns += _pick([u for u in units if u["name"].endswith(("镇", "乡"))], 1, "town")
        towns += _pick([u for u in units if u["name"].endswith("街道")], 1, "subdistrict")
    for city in sorted(NO_COUNTY_CITIES):
        towns += sorted((u for u in streets if u["cityCode"] == city and not re.search(r"开发区|管委会|委员会|特殊", u["name"])),
                        key=lambda u: u["code"])
    with (out / "townships.csv").open("w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["code", "name", "parent"])
        w.writerows(sorted((t["code"], t["name"], t["areaCode"] if t["cityCode"] not in NO_COUNTY_CITIES
                            else t["cityCode"]) for t in towns))

    roads = set()
    for s in streets:
        m = re.fullmatch(r"([\u4e00-\u9fff]{1,6}?(?:路|大街|大道|街))街道", s["name"])
        if m and len(m.group(1)) >= 3 and not re.search(r"[区镇乡村园市县]|开发", m.group(1)):
            roads.add(m.group(1))
    (out / "roads.txt").write_text("\n".join(sorted(roads)) + "\n", encoding="utf-8")
    print(f"{len(rows)} divisions, {len(towns)} townships, {len(roads)} roads")


if __name__ == "__main__":
    main()
