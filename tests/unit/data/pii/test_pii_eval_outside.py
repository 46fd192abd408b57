"""The scorer and loader of bench/pii_eval.py count right on small hand-made cases. The evaluation data itself
(shared/eval/, built from public repositories and never committed) is not needed here; the bench checks it."""

import importlib.util
import json
from collections import namedtuple
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]
Span = namedtuple("Span", "start end type")


def _bench():
    spec = importlib.util.spec_from_file_location("pii_eval_bench", REPO / "bench" / "pii_eval.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_loader_reads_items_and_planted_values(tmp_path):
    bench = _bench()
    text = "Write to ada@example.org or call 555-123-4567x89."
    email, phone = text.index("ada"), text.index("555")
    rows = [{"id": "en-1", "lang": "en", "type": "EMAIL", "kind": "k", "frame": "written", "cue": "none",
             "text": text, "pii": [["EMAIL", email, email + 15], ["PHONE", phone, phone + 15, [phone, phone + 12]]]}]
    path = tmp_path / "pii.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    items = bench.load_jsonl(path)
    assert items == rows
    got = bench.planted(items[0])
    assert [(p["type"], p["start"], p["end"], p["core"]) for p in got] == [
        ("EMAIL", email, email + 15, [(email, email + 15)]), ("PHONE", phone, phone + 15, [(phone, phone + 12)])]
    assert text[email:email + 15] == "ada@example.org"


def test_name_tokens_leave_out_titles():
    bench = _bench()
    text = "Thanks to Dr. Ada Lovelace Jr. and to 周敏女士 and Ada."
    a, b = text.index("Dr."), text.index(" and")
    assert [text[s:e] for s, e in bench.name_tokens(text, a, b)] == ["Ada", "Lovelace"]
    z = text.index("周")
    assert [text[s:e] for s, e in bench.name_tokens(text, z, z + 4)] == ["周敏"]
    item = {"lang": "en", "type": "PERSON", "kind": "k", "cue": "none", "frame": "written", "text": text,
            "pii": [["PERSON", a, b]]}
    lovelace = text.index("Ada")

    def leaked(*spans):
        return bench.score_pii([item], lambda t: [Span(*s) for s in spans])["by_type"][("en", "PERSON")]["leaked"]

    assert leaked((lovelace, lovelace + 12, "PERSON")) == 0  # the titles left visible: no leak
    assert leaked((a, lovelace + 3, "PERSON")) == 1  # the surname left visible: a leak


def test_leak_counts_core_coverage_wrong_type_and_untouched():
    bench = _bench()
    text = "Call 555-123-4567x89 now. Card 4111 1111 1111 1111 and Mary Smith."
    phone, card, name = text.index("555"), text.index("4111"), text.index("Mary")
    item = {"lang": "en", "type": "PHONE", "kind": "k", "cue": "none", "frame": "written", "text": text,
            "pii": [["PHONE", phone, phone + 15, [phone, phone + 12]], ["BANK_CARD", card, card + 19],
                    ["PERSON", name, name + 10]]}
    # the phone without its extension is enough; the card masked as a phone is caught but of the wrong type;
    # half a name is a leak
    spans = [Span(phone, phone + 12, "PHONE"), Span(card, card + 19, "PHONE"), Span(name, name + 4, "PERSON")]
    r = bench.score_pii([item], lambda t: spans)["by_type"]
    assert (r[("en", "PHONE")]["leaked"], r[("en", "BANK_CARD")]["leaked"], r[("en", "PERSON")]["leaked"]) == (0, 0, 1)
    assert r[("en", "BANK_CARD")]["wrong_type"] == 1 and r[("en", "PERSON")]["untouched"] == 0
    r = bench.score_pii([item], lambda t: [])["by_type"]
    assert all(r[("en", t)]["leaked"] == r[("en", t)]["untouched"] == 1 for t in ("PHONE", "BANK_CARD", "PERSON"))


def test_address_tag_sequences():
    bench = _bench()
    text = "住北京市朝阳区建国路88号。"
    parts = [[1, 4, ["PROVINCE", "CITY"]], [4, 7, ["DISTRICT"]], [7, 10, ["STREET"]], [10, 13, ["NUMBER"]]]
    item = {"lang": "zh", "type": "ADDRESS", "kind": "municipality/full", "cue": "context", "frame": "written",
            "text": text, "pii": [["ADDRESS", 1, 13, [7, 13], parts]]}

    def tags(*spans):
        return bench.score_pii([item], lambda t: [Span(*s) for s in spans])["tags"]["all"]["right"]

    assert tags((1, 4, "CITY"), (4, 7, "DISTRICT"), (7, 10, "STREET"), (10, 13, "NUMBER")) == 1
    assert tags((1, 4, "PROVINCE"), (4, 7, "DISTRICT"), (7, 10, "STREET"), (10, 11, "NUMBER"), (11, 13, "NUMBER")) == 1
    assert tags((1, 4, "CITY"), (4, 7, "CITY"), (7, 10, "STREET"), (10, 13, "NUMBER")) == 0  # wrong level
    assert tags((0, 4, "CITY"), (4, 7, "DISTRICT"), (7, 10, "STREET"), (10, 13, "NUMBER")) == 0  # takes in 住
    assert tags((4, 7, "DISTRICT"), (7, 10, "STREET"), (10, 13, "NUMBER")) == 0  # misses the city
    r = bench.score_pii([item], lambda t: [Span(1, 4, "CITY"), Span(7, 13, "STREET")])["by_type"][("zh", "ADDRESS")]
    assert r["leaked"] == 0  # street and number masked: no leak, though the tags are wrong


def test_over_masking_counts_sentences_with_any_span():
    bench = _bench()
    items = [{"lang": "zh", "text": "第5.2.1.3节", "categories": ["section"]},
             {"lang": "zh", "text": "财政收入达15000000000元", "categories": ["amount", "number"]}]
    r = bench.score_non_pii(items, lambda t: [Span(5, 16, "PHONE")] if "收入" in t else [])
    assert (r[("zh", "all")]["n"], r[("zh", "all")]["masked"]) == (2, 1)
    assert r[("zh", "amount")]["masked"] == 1 and r[("zh", "section")]["masked"] == 0
    assert r[("zh", "all")]["examples"] == ["财政收入达[PHONE:15000000000]元"]
