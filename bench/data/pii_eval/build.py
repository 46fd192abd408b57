"""Regenerate pii.jsonl (planted personal data) and non_pii.jsonl (outside text with none) deterministically.

    pip install "faker==40.63.0"        # the version the reference files were made with (README.md)
    python bench/data/pii_eval/build.py [--data shared/eval]

Inputs: Faker's en_US and zh_CN providers; frames.py; and, under the data directory (default shared/eval/,
never committed: see README.md), pii_eval/divisions.csv, townships.csv and roads.txt (China's national
division table, written by tables.py) and the public texts in real_text/ (written by
bench/data/real_text/extract.py and extract_more.py),
which give real sentence frames (court cases with pseudonymised parties, a biography, documentation
sentences that hold an email or IP address), real sentences around planted values, and every non-PII item.
Each item draws from its own seed (SEED + item number), so one item never depends on another.
"""

import argparse
import hashlib
import ipaddress
import json
import random
import re
from pathlib import Path

# frames and non_pii are siblings: run as a script, this directory is first on sys.path
import faker
import non_pii
from frames import EN, ZH

DATA = Path(__file__).resolve().parents[3] / "shared" / "eval"
HERE = DATA / "pii_eval"  # the division tables in, pii.jsonl and non_pii.jsonl out
REAL = DATA / "real_text"
SEED = 20250517
# Items per (language, type); addresses are counted per kind below.
COUNTS = {
    "en": {"PHONE": 500, "BANK_CARD": 480, "EMAIL": 200, "IP": 200, "PASSPORT": 100, "SSN": 100, "PERSON": 400,
           "ADDRESS": 100},
    "zh": {"PHONE": 300, "ID_NUMBER": 300, "BANK_CARD": 360, "EMAIL": 150, "IP": 150, "PASSPORT": 100, "PERSON": 400},
}
ADDRESS_KINDS = ["district", "county", "county_city", "banner", "autonomous_prefecture", "league", "prefecture",
                 "municipality", "province_administered", "no_county_city", "natural"]
ADDRESSES_PER_KIND = 50
# Faker's card types per locale; Chinese text also gets the other brands, made by the en_US provider.
CARD_TYPES = {
    "en": ["maestro", "mastercard", "visa16", "visa13", "visa19", "amex", "discover", "diners", "jcb15", "jcb16", "visa",
           "jcb"],
    "zh": ["unionpay", "unionpay", "unionpay", "visa", "mastercard", "maestro", "visa13", "visa19", "amex", "discover",
           "diners", "jcb15", "jcb16"],
}
ZH_CN_CARDS = {"unionpay", "visa", "mastercard"}


def zh_sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[。！？；])|\n", text) if s.strip()]


def en_sentences(text: str) -> list[str]:
    return [s.strip() for line in text.splitlines() for s in re.split(r"(?<=[.!?])\s+(?=[A-Z\"'(])", line) if s.strip()]


def load_jsonl(name: str) -> list[dict]:
    return [json.loads(line) for line in (REAL / name).open(encoding="utf-8")]


def stable_order(items: list, key=str) -> list:
    return sorted(items, key=lambda x: hashlib.sha256(f"{SEED}:{key(x)}".encode()).hexdigest())


class Divisions:
    def __init__(self):
        import csv

        rows = list(csv.DictReader((HERE / "divisions.csv").open(encoding="utf-8")))
        self.by_code = {r["code"]: r for r in rows}
        self.counties = [r for r in rows if r["level"] == "3"]
        self.prefectures = [r for r in rows if r["level"] == "2"]
        self.towns: dict[str, list[str]] = {}
        for t in csv.DictReader((HERE / "townships.csv").open(encoding="utf-8")):
            self.towns.setdefault(t["parent"], []).append(t["name"])
        self.roads = (HERE / "roads.txt").read_text(encoding="utf-8").split()

    def pool(self, kind: str) -> list[dict]:
        c = self.counties
        if kind in ("district", "county", "county_city"):
            return [r for r in c if r["kind"] == kind and len(r["parent"]) == 4
                    and self.by_code[r["parent"][:2]]["kind"] != "municipality"]
        if kind == "banner":
            return [r for r in c if r["kind"] in ("banner", "autonomous_banner")]
        if kind in ("autonomous_prefecture", "league", "prefecture"):
            return [r for r in c if len(r["parent"]) == 4 and self.by_code[r["parent"]]["kind"] == kind]
        if kind == "municipality":
            return [r for r in c if self.by_code[r["code"][:2]]["kind"] == "municipality"]
        if kind == "province_administered":
            return [r for r in c if len(r["parent"]) == 2 and self.by_code[r["parent"]]["kind"] != "municipality"]
        if kind == "no_county_city":
            return [p for p in self.prefectures if p["code"] in self.towns]
        return c  # natural: every county-level unit alike


def address(div: Divisions, kind: str, r: random.Random) -> tuple[list[tuple[str, list[str]]], str]:
    """Components [(text, accepted tags)] of one address of `kind`, and its form."""
    unit = r.choice(div.pool(kind))
    prov = div.by_code[unit["code"][:2]]
    prov_tags = ["PROVINCE", "CITY"] if prov["kind"] == "municipality" else ["PROVINCE"]
    parts: list[tuple[str, list[str]]] = []
    if kind == "no_county_city":
        parts = [(prov["name"], prov_tags), (unit["name"], ["CITY"]), (r.choice(div.towns[unit["code"]]), ["DISTRICT"])]
    elif len(unit["parent"]) == 2:  # municipality district/county, or a county-level unit under the province
        tags = ["DISTRICT"] if prov["kind"] == "municipality" else ["CITY", "DISTRICT"]
        parts = [(prov["name"], prov_tags), (unit["name"], tags)]
    else:
        parts = [(prov["name"], prov_tags), (div.by_code[unit["parent"]]["name"], ["CITY"]), (unit["name"], ["DISTRICT"])]
    form = "full"
    if r.random() < 0.25 and len(parts) == 3:
        parts, form = parts[1:], "no_province"
    if kind != "no_county_city" and unit["code"] in div.towns and r.random() < 0.3:
        town = r.choice(div.towns[unit["code"]])
        parts.append((town, ["DISTRICT", "STREET"] if town.endswith("街道") else ["DISTRICT"]))
        form += "+township"
    parts.append((r.choice(div.roads), ["STREET"]))
    n = r.randint(1, 999)
    shapes = [f"{n}号", f"{n}号{r.randint(1, 30)}栋{r.randint(1, 6)}单元{r.randint(1, 30)}0{r.randint(1, 9)}室",
              f"{n}号院{r.randint(1, 20)}号楼{r.randint(1, 25)}0{r.randint(1, 8)}室",
              f"{n}号{r.choice('ABCDE')}座{r.randint(2, 40)}{r.randint(1, 20):02d}室", f"{n}号{r.randint(1, 30)}楼"]
    if prov["code"] == "31":  # lanes (弄) are Shanghai's
        shapes.append(f"{n}弄{r.randint(1, 99)}号")
    parts.append((r.choice(shapes), ["NUMBER"]))
    return parts, form


class Builder:
    def __init__(self):
        self.fakers = {"en": faker.Faker("en_US"), "zh": faker.Faker("zh_CN")}
        self.frames = {"en": EN, "zh": ZH}
        self.div = Divisions()
        self.items: list[dict] = []
        zh_ctx = load_jsonl("zh_wikipedia.jsonl") + load_jsonl("zh_python_docs.jsonl")
        en_ctx = load_jsonl("en_wikipedia.jsonl") + load_jsonl("en_python_docs.jsonl")
        self.context = {
            "zh": [s for d in zh_ctx for s in zh_sentences(d["text"]) if 10 <= len(s) <= 60 and s[-1] in "。！？；"],
            "en": [s for d in en_ctx for s in en_sentences(d["text"]) if 30 <= len(s) <= 160 and s[-1] in ".!?"],
        }

    def faker(self, lang: str, n: int):
        f = self.fakers[lang]
        f.seed_instance(SEED + n)
        return f

    def fill(self, lang: str, frame: str, r: random.Random, f, value: str, vtype: str, core=None) -> tuple[str, list[dict]]:
        """The frame with its slots filled; planted spans for {V} (and {N2}, a second PERSON)."""
        extras = {
            "DATE": (f.date_of_birth(minimum_age=18, maximum_age=80).strftime("%Y年%-m月%-d日") if lang == "zh"
                     else f.date_between("-5y").strftime("%B %-d, %Y")),
            "CITY": r.choice(self.div.prefectures)["name"] if lang == "zh" else f.city(),
            "ORG": f.company(), "BANK": f.bank() if lang == "zh" else f.company(),
        }
        text, spans, pos = "", [], 0
        for m in re.finditer(r"\{(V|N2|DATE|CITY|ORG|BANK)\}", frame):
            text += frame[pos : m.start()]
            if m.group(1) in ("V", "N2"):
                v, t = (value, vtype) if m.group(1) == "V" else (f.name(), "PERSON")
                c = core if (m.group(1) == "V" and core) else (0, len(v))
                spans.append({"type": t, "start": len(text), "end": len(text) + len(v), "value": v,
                              "core": [len(text) + c[0], len(text) + c[1]]})
                text += v
            else:
                text += extras[m.group(1)]
            pos = m.end()
        return text + frame[pos:], spans

    def wrap(self, lang: str, r: random.Random, text: str, spans: list[dict]) -> tuple[str, list[dict]]:
        """Put a real sentence before (35%) and/or after (20%) the framed value."""
        sep = "" if lang == "zh" else " "
        if r.random() < 0.35:
            before = r.choice(self.context[lang]) + sep
            text = before + text
            spans = [{**s, "start": s["start"] + len(before), "end": s["end"] + len(before),
                      "core": [s["core"][0] + len(before), s["core"][1] + len(before)]} for s in spans]
        if r.random() < 0.2:
            if text[-1] not in "。！？；.!?;":  # end the framed sentence first, so the value is not glued to the next
                text += "。" if lang == "zh" else "."
            text = text + sep + r.choice(self.context[lang])
        return text, spans

    def add(self, lang: str, vtype: str, kind: str, frame_src: str, cue: str, text: str, spans: list[dict]):
        """Stored compactly: each planted value as [type, start, end] (+ [core_start, core_end] when only part
        of it must be masked; + the address components as [start, end, accepted tags])."""
        pii = []
        for s in spans:
            assert text[s["start"] : s["end"]] == s["value"], (text, s)
            row = [s["type"], s["start"], s["end"]]
            if s["core"] != [s["start"], s["end"]] or "parts" in s:
                row.append(s["core"])
            if "parts" in s:
                row.append([[p["start"], p["end"], p["tags"]] for p in s["parts"]])
            pii.append(row)
        self.items.append({"id": f"{lang}-{len(self.items):05d}", "lang": lang, "type": vtype, "kind": kind,
                           "frame": frame_src, "cue": cue, "text": text, "pii": pii})

    # --- values ---

    def value(self, lang: str, vtype: str, f, r: random.Random, i: int) -> tuple[str, str, tuple | None]:
        """(value, kind, core) for one planted value; core = the part that must be masked (a phone without
        its extension), None for all of it."""
        if vtype == "PHONE":
            v = f.phone_number()
            if lang == "zh":
                style = r.choice(["plain"] * 6 + ["+86", "dash", "space"])
                v = {"plain": v, "+86": "+86 " + v, "dash": f"{v[:3]}-{v[3:7]}-{v[7:]}", "space": f"{v[:3]} {v[3:7]} {v[7:]}"}[style]
                return v, style, None
            ext = re.search(r"x\d+$", v)
            return v, "extension" if ext else "plain", (0, ext.start()) if ext else None
        if vtype == "BANK_CARD":
            card = CARD_TYPES[lang][i % len(CARD_TYPES[lang])]
            maker = f if lang == "en" or card in ZH_CN_CARDS else self.faker("en", i)
            v = maker.credit_card_number(card)
            if card in ("jcb", "jcb16") and not 3528 <= int(v[:4]) <= 3589:
                card += "_outside_iin"  # Faker's JCB prefix is 35; JCB's own 16-digit range is 3528-3589
            if r.random() < 0.4:  # as printed on the card
                groups = [4, 6, 5] if len(v) == 15 and v[:2] in ("34", "37") else [4] * (len(v) // 4) + ([len(v) % 4] if len(v) % 4 else [])
                sep, out, k = r.choice(" -"), [], 0
                for g in groups:
                    out.append(v[k : k + g])
                    k += g
                return sep.join(out), card + "/grouped", None
            return v, card, None
        if vtype == "ID_NUMBER":
            return f.ssn(), "resident_id", None
        if vtype == "SSN":
            return f.ssn(), "ssn", None
        if vtype == "EMAIL":
            return r.choice([f.email, f.free_email, f.company_email])(), "email", None
        if vtype == "IP":
            k = r.choice(["ipv4_public", "ipv4_public", "ipv4_private", "ipv6", "ipv6"])
            return (f.ipv6() if k == "ipv6" else f.ipv4_private() if k == "ipv4_private" else f.ipv4_public()), k, None
        if vtype == "PASSPORT":
            if lang == "en":
                return f.passport_number(), "us_passport", None
            # ordinary passports of the PRC: E + 8 digits (2012), E + letter + 7 digits (2019)
            return f.bothify(r.choice(["E########", "E?#######"]), letters="ABCDEFGHJKLMNPQRSTUVWXYZ"), "cn_passport", None
        if vtype == "PERSON":
            if lang == "zh":
                return f.name(), "name", None
            k = r.choice(["name", "name", "first_last", "prefix_last"])
            v = {"name": f.name, "first_last": lambda: f"{f.first_name()} {f.last_name()}",
                 "prefix_last": lambda: f"{f.prefix()} {f.last_name()}"}[k]()
            return v, k, None
        if vtype == "ADDRESS":
            return (f.street_address() if r.random() < 0.5 else f.address().replace("\n", ", ")), "us_address", None
        raise ValueError(vtype)

    def framed(self, lang: str, vtype: str, n: int):
        f, r = self.faker(lang, n), random.Random(SEED + n)
        value, kind, core = self.value(lang, vtype, f, r, n)
        frame, cue = r.choice(self.frames[lang][vtype])
        text, spans = self.fill(lang, frame, r, f, value, vtype, core)
        text, spans = self.wrap(lang, r, text, spans)
        self.add(lang, vtype, kind, "written", cue, text, spans)

    # --- frames from real text ---

    def real_name_frames(self, n0: int, limit_zh: int, limit_en: int) -> int:
        """Court-case sentences with pseudonymised parties (张某, 李某某) and biography sentences, the names
        replaced by Faker names; every replaced name is a planted PERSON."""
        from faker.providers.person.zh_CN import Provider

        surnames = "".join(k for k in Provider.last_names if len(k) == 1)
        pseudonym = re.compile(f"[{surnames}]某某?")
        zh = [s for d in load_jsonl("zh_court_cases.jsonl") for s in zh_sentences(d["text"])
              if pseudonym.search(s) and 8 <= len(s) <= 150]
        zh = [(s, pseudonym, "lawrefbook:案例") for s in zh]
        bio = {d["title"]: d["text"] for d in load_jsonl("zh_wikipedia.jsonl")}["邓丽君"]
        zh += [(s, re.compile("邓丽君"), "zhwiki:邓丽君") for s in zh_sentences(bio) if "邓丽君" in s and len(s) <= 150]
        en_docs = {d["id"]: d["text"] for d in load_jsonl("en_wikipedia.jsonl")}
        en = []
        for page, names in (("enwiki/Elizabeth-Gilbert", r"Elizabeth M\. Gilbert|Elizabeth Gilbert|Gilbert"),
                            ("enwiki/Harry-McPherson", r"Harry Cummings McPherson, Jr\.|Harry McPherson|McPherson")):
            pat = re.compile(rf"\b(?:{names})(?!\w)")
            # A biography names its subject in full in its first sentence and by surname after: each sentence
            # is judged after that lead sentence, as a redactor sees it inside the article.
            lead = re.split(r"(?<=[a-z)][.!?])\s+(?=[A-Z])", en_docs[page].split("\n", 1)[0])[0]
            en += [(s, pat, page, lead) for s in en_sentences(en_docs[page]) if pat.search(s) and 20 <= len(s) <= 300]
        zh = [(s, pat, src, "") for s, pat, src in zh]
        n = n0
        for lang, rows, limit in (("zh", zh, limit_zh), ("en", en, limit_en)):
            for sent, pat, src, lead in stable_order(rows, key=lambda x: x[0])[:limit]:
                f = self.faker(lang, n)
                names: dict[str, str] = {}
                surname: dict[str, str] = {}

                def renamed(part: str, offset: int) -> tuple[str, list[dict]]:
                    text, spans, pos = "", [], 0
                    for m in pat.finditer(part):
                        text += part[pos : m.start()]
                        old = m.group(0)
                        if old not in names:  # one person keeps one name (and surname) within the item
                            drawn = f.last_name()
                            last = surname.setdefault("last", drawn)
                            names[old] = (f.name() if lang == "zh" else last if " " not in old
                                          else f"{f.first_name()} {last}")
                        v = names[old]
                        at = offset + len(text)
                        spans.append({"type": "PERSON", "start": at, "end": at + len(v), "value": v,
                                      "core": [at, at + len(v)]})
                        text += v
                        pos = m.end()
                    return text + part[pos:], spans

                if lead and sent not in lead:  # the lead names the person (context, not counted), then the sentence
                    head, _ = renamed(lead, 0)
                    body, spans = renamed(sent, len(head) + 2)
                    text = f"{head}\n\n{body}"
                else:
                    text, spans = renamed(lead or sent, 0)
                self.add(lang, "PERSON", "name", src, "real", text, spans)
                n += 1
        return n

    def real_number_frames(self, n0: int, limit: int) -> int:
        """Documentation sentences holding an email or IP address, the value replaced by a Faker one."""
        n = n0
        email = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
        ipv4 = re.compile(r"(?<![\d.])\d{1,3}(?:\.\d{1,3}){3}(?![\d.])")
        for lang, name in (("en", "en_python_docs.jsonl"), ("zh", "zh_python_docs.jsonl")):
            rows = []
            for d in load_jsonl(name):
                for s in (en_sentences if lang == "en" else zh_sentences)(d["text"]):
                    for pat, vtype in ((email, "EMAIL"), (ipv4, "IP")):
                        m = pat.search(s)
                        if m and len(s) <= 300 and (vtype == "EMAIL" or _is_ipv4(m.group(0))):
                            rows.append((s, m.start(), m.end(), vtype, d["id"]))
            for s, a, b, vtype, src in stable_order(rows, key=lambda x: x[0])[:limit]:
                f = self.faker(lang, n)
                v = f.email() if vtype == "EMAIL" else f.ipv4_public()
                text = s[:a] + v + s[b:]
                self.add(lang, vtype, "email" if vtype == "EMAIL" else "ipv4_public", src, "real", text,
                         [{"type": vtype, "start": a, "end": a + len(v), "value": v, "core": [a, a + len(v)]}])
                n += 1
        return n

    def addresses(self, n0: int) -> int:
        n = n0
        for kind in ADDRESS_KINDS:
            for _ in range(ADDRESSES_PER_KIND):
                f, r = self.faker("zh", n), random.Random(SEED + n)
                parts, form = address(self.div, kind, r)
                value = "".join(p for p, _ in parts)
                frame, cue = r.choice(self.frames["zh"]["ADDRESS"])
                street_at = len(value) - len(parts[-1][0]) - len(parts[-2][0])
                text, spans = self.fill("zh", frame, r, f, value, "ADDRESS", (street_at, len(value)))
                text, spans = self.wrap("zh", r, text, spans)
                start, comps, k = spans[0]["start"], [], 0
                for p, tags in parts:
                    comps.append({"start": start + k, "end": start + k + len(p), "text": p, "tags": tags})
                    k += len(p)
                spans[0]["parts"] = comps
                self.add("zh", "ADDRESS", f"{kind}/{form}", "written", cue, text, spans)
                n += 1
        return n

    def build(self) -> list[dict]:
        n = 0
        for lang, counts in COUNTS.items():
            for vtype, count in counts.items():
                for _ in range(count):
                    self.framed(lang, vtype, n)
                    n += 1
        n = self.addresses(n)
        n = self.real_name_frames(n, limit_zh=250, limit_en=150)
        self.real_number_frames(n, limit=60)
        return self.items


def _is_ipv4(s: str) -> bool:
    try:
        ipaddress.IPv4Address(s)
        return True
    except ValueError:
        return False


def main() -> None:
    global HERE, REAL
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(DATA), help="the evaluation data directory (default shared/eval)")
    args = ap.parse_args()
    HERE, REAL = Path(args.data) / "pii_eval", Path(args.data) / "real_text"
    non_pii.REAL = REAL
    items = Builder().build()
    with (HERE / "pii.jsonl").open("w", encoding="utf-8") as out:
        for it in items:
            out.write(json.dumps(it, ensure_ascii=False) + "\n")
    non_pii_items = non_pii.build_non_pii()
    with (HERE / "non_pii.jsonl").open("w", encoding="utf-8") as out:
        for it in non_pii_items:
            out.write(json.dumps(it, ensure_ascii=False) + "\n")
    print(f"faker {faker.VERSION}: {len(items)} PII items, {len(non_pii_items)} non-PII items")


if __name__ == "__main__":
    main()
