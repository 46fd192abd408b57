"""PII redaction measured on text no one on the team wrote: leak rate per type and language, over-masking on
ordinary sentences, address tag sequences, and a full statute that must pass untouched.

Data: under shared/eval/ (or `--data DIR`), built locally from public repositories and never committed;
bench/data/pii_eval/README.md says where each part comes from, how it was assembled and how to rebuild it.
Without the data the bench says so and exits 0.
- pii_eval/pii.jsonl: 4,700 sentences with planted values from Faker (en_US, zh_CN) — phones in every en_US format
  (extensions too), cards of every brand Faker knows, resident IDs with check digits, US SSNs, emails, IPv4/IPv6,
  passports, names — in written frames, in frames taken from real text (court cases, a biography, Python docs)
  and between real sentences; and 550 Chinese addresses built from the national division table (county-level
  cities, autonomous prefectures, 盟/旗, province-administered counties, municipalities, cities without
  counties) with their accepted tag sequences.
- pii_eval/non_pii.jsonl: 615 sentences from Chinese and English statutes, Wikipedia and Python documentation holding
  numbers, amounts, dates, section numbers, codes, titles and surname-initial words but no personal data.
- real_text/zh_statute_criminal_law.md (the Criminal Law of the PRC) and en_us_constitution.md,
  which must pass with no span; the other statutes there are shown too.

Definitions:
- a planted value *leaks* when any non-space character of it (for a phone with an extension: of the number
  before the extension; for an address: of its street and house-number part) is left outside every span the
  redactor returns — masking it under another type still counts as caught (reported as `wrong type`);
- a name leaks when any of its name tokens is left visible; titles and suffixes (Mr., Mrs., Ms., Miss, Mx.,
  Dr., Jr., MD, PhD …; 先生, 女士, 小姐 after a Chinese name) are not personal data, so one left outside the span
  is no leak (`Mrs. [PERSON]` is a full catch, `[PERSON] Smith` a leak);
- *hard PII* = EMAIL, PHONE, ID_NUMBER, BANK_CARD, IP, PASSPORT (US SSNs reported apart: no detector claims them);
- an address's *tag sequence* is right when the spans over it lie inside it, cover all of it, and their types
  (repeats merged) equal the accepted tags of its components (repeats merged): a municipality may be PROVINCE
  or CITY, a county-level unit directly under a province CITY or DISTRICT, a 街道 DISTRICT or STREET;
- a non-PII sentence is *over-masked* when the redactor returns any span in it.

    python bench/pii_eval.py [--show N] [--data shared/eval]

Ends with one `pii_eval <metric> <value>` line per headline number (rates are fractions; lower is better
except address_tags_zh).
"""

import argparse
import itertools
import json
import re
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HARD = ("EMAIL", "PHONE", "ID_NUMBER", "BANK_CARD", "IP", "PASSPORT")
LEVELS = ("PROVINCE", "CITY", "DISTRICT", "STREET", "NUMBER")


def load_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f]


# Titles and suffixes around a name (Faker's en_US prefixes and suffixes among them): not personal data.
TITLES = {"mr", "mrs", "ms", "miss", "mx", "ind", "dr", "prof", "jr", "sr", "ii", "iii", "iv", "v", "md", "dds",
          "phd", "dvm"}
ZH_TITLES = ("先生", "女士", "小姐")
_TOKEN = re.compile(r"[^\s,]+")


def name_tokens(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """The (start, end) of each name token of the name text[start:end]: its words less titles and suffixes
    (Mrs., Dr., Jr., MD); a Chinese name less a title after it (先生, 女士, 小姐)."""
    value = text[start:end]
    if not value.isascii():
        for title in ZH_TITLES:
            if value.endswith(title) and len(value) > len(title):
                return [(start, end - len(title))]
        return [(start, end)]
    return [(start + m.start(), start + m.end()) for m in _TOKEN.finditer(value)
            if m.group().rstrip(".").lower() not in TITLES]


def planted(item: dict) -> list[dict]:
    """The planted values of an item: type, start, end, core (the (start, end) ranges that must be masked:
    a phone before its extension, an address's road and number, a name's name tokens) and, for an address,
    its parts."""
    out = []
    for row in item["pii"]:
        vtype, start, end = row[:3]
        if len(row) > 3:
            core = [tuple(row[3])]
        elif vtype == "PERSON":
            core = name_tokens(item["text"], start, end) or [(start, end)]
        else:
            core = [(start, end)]
        parts = [(a, b, tuple(tags)) for a, b, tags in row[4]] if len(row) > 4 else None
        out.append({"type": vtype, "start": start, "end": end, "core": core, "parts": parts})
    return out


def covered(text: str, spans: Iterable, start: int, end: int) -> bool:
    """Every non-space character of text[start:end] lies inside some span."""
    hit = set()
    for s in spans:
        hit.update(range(max(s.start, start), min(s.end, end)))
    return all(i in hit for i in range(start, end) if not text[i].isspace())


def _merge(tags: Iterable[str]) -> tuple[str, ...]:
    return tuple(t for t, _ in itertools.groupby(tags))


def accepted_sequences(parts: list[tuple[int, int, tuple[str, ...]]]) -> set[tuple[str, ...]]:
    return {_merge(choice) for choice in itertools.product(*(tags for _, _, tags in parts))}


def tags_right(text: str, spans: list, start: int, end: int, parts) -> bool:
    inside = sorted((s for s in spans if s.end > start and s.start < end), key=lambda s: s.start)
    if not inside or any(s.start < start or s.end > end for s in inside) or not covered(text, inside, start, end):
        return False
    return _merge(s.type for s in inside) in accepted_sequences(parts)


def _rate(a: int, b: int) -> float:
    return a / b if b else 0.0


def score_pii(items: list[dict], find: Callable[[str], list]) -> dict:
    """Counts per (lang, type), per (lang, type, kind or cue), and address tag results per kind."""
    by_type = defaultdict(lambda: {"n": 0, "leaked": 0, "untouched": 0, "wrong_type": 0, "examples": []})
    by_kind = defaultdict(lambda: {"n": 0, "leaked": 0})
    tags = defaultdict(lambda: {"n": 0, "right": 0, "examples": []})
    for item in items:
        text, spans = item["text"], find(item["text"])
        for p in planted(item):
            key = (item["lang"], p["type"])
            row = by_type[key]
            row["n"] += 1
            leaked = not all(covered(text, spans, a, b) for a, b in p["core"])
            over = [s for s in spans if s.end > p["start"] and s.start < p["end"]]
            if leaked:
                row["leaked"] += 1
                row["examples"].append(text)
            if not over:
                row["untouched"] += 1
            want = LEVELS if p["type"] == "ADDRESS" else (p["type"],)
            if not leaked and not any(s.type in want for s in over):
                row["wrong_type"] += 1
            detail = item["cue"] if p["type"] == "PERSON" else item["kind"]
            for k in {detail, f"frame:{item['frame'].split(':')[0].split('/')[0]}"}:
                by_kind[(*key, k)]["n"] += 1
                by_kind[(*key, k)]["leaked"] += leaked
            if p["parts"]:
                kind = item["kind"].split("/")[0]
                for k in (kind, "all"):
                    tags[k]["n"] += 1
                    ok = tags_right(text, spans, p["start"], p["end"], p["parts"])
                    tags[k]["right"] += ok
                    if not ok and k != "all":
                        got = "".join(f"[{s.type}]" if s.end > p["start"] and s.start < p["end"] else "" for s in spans)
                        tags[k]["examples"].append(f"{text[p['start']:p['end']]} -> {got or 'nothing'}")
    return {"by_type": by_type, "by_kind": by_kind, "tags": tags}


def score_non_pii(items: list[dict], find: Callable[[str], list]) -> dict:
    out = defaultdict(lambda: {"n": 0, "masked": 0, "examples": []})
    for item in items:
        spans = find(item["text"])
        for cat in ("all", *item["categories"]):
            row = out[(item["lang"], cat)]
            row["n"] += 1
            if spans:
                row["masked"] += 1
                if cat == "all":
                    shown = item["text"]
                    for s in sorted(spans, key=lambda s: -s.start):
                        shown = f"{shown[:s.start]}[{s.type}:{shown[s.start:s.end]}]{shown[s.end:]}"
                    row["examples"].append(shown)
    return out


def statute_spans(path: Path, find: Callable[[str], list]) -> tuple[int, list[str]]:
    text = path.read_text(encoding="utf-8")
    spans = find(text)
    return len(spans), [f"{s.type}: …{text[max(0, s.start - 12):s.end + 12]}…".replace("\n", " ") for s in spans]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--show", type=int, default=3, help="examples of each failure to print (default 3)")
    sys.path.insert(0, str(REPO))
    from bench.data.eval_data import add_data_argument, find_data

    add_data_argument(ap)
    args = ap.parse_args()
    needs = ["pii_eval/pii.jsonl", "pii_eval/non_pii.jsonl", "real_text/zh_statute_criminal_law.md",
             "real_text/en_us_constitution.md"]
    if (root := find_data(args.data, needs, "pii_eval")) is None:
        return
    data, real = root / "pii_eval", root / "real_text"
    from bessemer.data.pii.redact import redact

    def find(text: str) -> list:
        return redact(text)[1]

    t0 = time.perf_counter()
    pii = score_pii(load_jsonl(data / "pii.jsonl"), find)
    non = score_non_pii(load_jsonl(data / "non_pii.jsonl"), find)
    statutes = {lang: statute_spans(real / name, find)
                for lang, name in (("zh", "zh_statute_criminal_law.md"), ("en", "en_us_constitution.md"))}
    # other statutes kept beside them (held out for the quality evaluation): shown, not in the summary
    others = {f.name: statute_spans(f, find) for f in sorted(real.glob("*_statute_*.md"))
              if f.name != "zh_statute_criminal_law.md"}
    elapsed = time.perf_counter() - t0

    print("leak rate per type (a value leaks when part of it is left unmasked)")
    print(f"{'lang':4} {'type':10} {'values':>6} {'leaked':>6} {'rate':>7} {'untouched':>9} {'wrong type':>10}")
    for (lang, vtype), r in sorted(pii["by_type"].items()):
        print(f"{lang:4} {vtype:10} {r['n']:>6} {r['leaked']:>6} {_rate(r['leaked'], r['n']):>7.1%} {r['untouched']:>9} "
              f"{r['wrong_type']:>10}")
    print("\nleak rate by kind of value / cue / frame source (kinds with a leak, and every frame source)")
    for (lang, vtype, kind), r in sorted(pii["by_kind"].items()):
        if r["leaked"] or kind.startswith("frame:"):
            print(f"  {lang} {vtype:10} {kind:34} {r['leaked']:>4}/{r['n']:<4} {_rate(r['leaked'], r['n']):>6.1%}")
    if args.show:
        print("\nleaked examples")
        for (lang, vtype), r in sorted(pii["by_type"].items()):
            for ex in r["examples"][: args.show]:
                print(f"  {lang} {vtype:10} {ex[:160]}")
    print("\naddress tag sequences (zh)")
    for kind, r in sorted(pii["tags"].items(), key=lambda kv: kv[0] == "all"):
        print(f"  {kind:24} {r['right']:>4}/{r['n']:<4} {_rate(r['right'], r['n']):>6.1%}")
        for ex in r["examples"][: args.show]:
            print(f"      {ex}")
    print("\nover-masking on non-PII sentences (any span inserted)")
    for (lang, cat), r in sorted(non.items()):
        print(f"  {lang} {cat:14} {r['masked']:>4}/{r['n']:<4} {_rate(r['masked'], r['n']):>6.1%}")
    for lang in ("en", "zh"):
        for ex in non[(lang, "all")]["examples"][: args.show * 3]:
            print(f"      {lang} {ex[:200]}")
    print("\nfull statute texts")
    names = {"zh": "zh_statute_criminal_law.md", "en": "en_us_constitution.md"}
    for name, (n, shown) in [(names[lang], v) for lang, v in statutes.items()] + list(others.items()):
        print(f"  {name}: {n} spans inserted")
        for ex in shown[: args.show * 3]:
            print(f"      {ex}")
    print(f"\n(scored in {elapsed:.1f} s)")

    def leak(lang: str, types: Iterable[str]) -> float:
        rows = [pii["by_type"][(lang, t)] for t in types if (lang, t) in pii["by_type"]]
        return _rate(sum(r["leaked"] for r in rows), sum(r["n"] for r in rows))

    summary = {
        "hard_leak_en": leak("en", HARD), "hard_leak_zh": leak("zh", HARD),
        "name_leak_en": leak("en", ["PERSON"]), "name_leak_zh": leak("zh", ["PERSON"]),
        "address_leak_zh": leak("zh", ["ADDRESS"]), "address_tags_zh": _rate(pii["tags"]["all"]["right"], pii["tags"]["all"]["n"]),
        "overmask_en": _rate(non[("en", "all")]["masked"], non[("en", "all")]["n"]),
        "overmask_zh": _rate(non[("zh", "all")]["masked"], non[("zh", "all")]["n"]),
        "statute_masks_zh": statutes["zh"][0], "statute_masks_en": statutes["en"][0],
        "ssn_leak_en": leak("en", ["SSN"]), "address_leak_en": leak("en", ["ADDRESS"]),
    }
    print("rates are fractions of planted values (leaks) or of sentences (over-masking), lower is better; "
          "address_tags_zh is the fraction right, higher is better; statute_masks_* count spans")
    for k, v in summary.items():
        print(f"pii_eval {k} {v if isinstance(v, int) else round(v, 4)}")


if __name__ == "__main__":
    main()
