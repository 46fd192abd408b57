"""The `decontaminate` step (bessemer/data/decont/): benchmark items from task files found in documents, whole or
as spans, in any casing and punctuation, Chinese by characters; drop or cut; the exclusion sink; the stats, the
report and the command."""

import json
import pickle
import re

import pytest

from bessemer.cli import main
from bessemer.data.decont.step import DecontaminateStep
from bessemer.data.document import Document
from bessemer.data.phases import run_pipeline
from bessemer.data.pipeline_toml import Pipeline
from bessemer.data.steps import build_step
from bessemer.errors import ConfigError
from bessemer.report.data_report import build_data_report
from tests.unit.data.test_pipeline import read_jsonl_zst

QA = [
    {"id": "qa-1", "context": "A student rolls four objects down the same ramp and wants to see which one rolls "
                              "farthest. What should she do so that she can repeat her investigation?",
     "choices": ["Paint the ramp a brighter color.", "Record the details of the investigation in a notebook."],
     "gold": 1},
    {"id": "qa-2", "context": "Which gas do plants take from the air?",
     "choices": ["oxygen", "carbon dioxide, which the leaves absorb through small pores called stomata during the day"],
     "gold": 1},
    {"id": "qa-short", "context": "Which is a mammal?", "choices": ["whale", "shark"], "gold": 0},
]
ZH = [{"id": "zh-1", "context": "该物品用气泡包装纸包着 因为", "choices": ["它很易碎。", "它很小。"], "gold": 0},
      {"id": "zh-2", "context": "我掏空了口袋 所以", "choices": ["我找到了一张票根。", "我找到了一件武器。"], "gold": 0}]
PASSAGE = ("A student rolls four objects down the same ramp and wants to see which one rolls farthest. What should she "
           "do so that she can repeat her investigation? Record the details of the investigation in a notebook.")
ZH_PASSAGE = "该物品用气泡包装纸包着，因为它很易碎。"
WORDS = len(re.findall(r"\w+", PASSAGE))
CLEAN = [
    "Python's garbage collector reclaims objects whose reference count drops to zero; cycles need the collector.",
    "A student rolls four objects down the same ramp and wants to eat lunch.",  # 12 words of it: no hit
    "今天天气很好，我们去公园散步，然后回家吃饭。",
    "her repeat can she that so do she should what farthest rolls one which",  # its words, in another order
]


def write_task(root, name, items, **keys):
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{name}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in items),
                                        encoding="utf-8")
    extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items())
    (root / f"{name}.toml").write_text(f'data = "{name}.jsonl"\n{extra}', encoding="utf-8")
    return root / f"{name}.toml"


@pytest.fixture
def tasks(tmp_path):
    return [str(write_task(tmp_path / "bench", "qa", QA, template="Question: {context}\nAnswer:")),
            str(write_task(tmp_path / "bench", "zh", ZH))]


def run(step, texts):
    docs = [Document(f"d{i}", t, {"domain": "x"}) for i, t in enumerate(texts)]
    kept = list(step.run(docs))
    return kept, step.rejected


def test_whole_passage_and_span_inside_a_longer_document_are_dropped(tasks):
    step = DecontaminateStep(tasks)
    texts = [PASSAGE, "Notes from class.\n" + PASSAGE + "\nThe next lab is on Friday, bring goggles.", *CLEAN]
    kept, rejected = run(step, texts)
    assert [d.id for d in rejected] == ["d0", "d1"]
    for d in rejected:
        assert d.metadata["reason"] == "decontaminate.qa"
        hit = d.metadata["decontaminate"]
        assert hit["benchmark"] == "qa" and hit["item"] == "qa-1"
        assert len(hit["ngram"].split()) == 13 and hit["ngram"] in "a student rolls four objects down the same ramp "\
            "and wants to see which one rolls farthest what should she do"
        s, e = hit["span"]
        assert d.text[s:e].lower().startswith("a student rolls")
    assert [d.text for d in kept] == CLEAN  # clean documents untouched
    assert all(d.metadata == {"domain": "x"} for d in kept)
    st = step.stats()
    assert st["rejected"] == {"decontaminate.qa": 2} and st["docs_in"] == 6 and st["docs_out"] == 4
    assert st["benchmarks"]["qa"]["docs"] == 2 and st["benchmarks"]["zh"] == {"docs": 0, "ngrams": 0}
    assert st["benchmarks"]["qa"]["ngrams"] == 2 * (WORDS - 12)  # every window of the passage, twice


@pytest.mark.parametrize("variant", [
    PASSAGE.upper(),
    PASSAGE.replace(" ", "\n  ").replace(".", "!!"),
    "".join(c for c in PASSAGE if c.isalnum() or c == " "),
    PASSAGE.replace("student", "stúdent").replace("ramp", "RÁMP"),
    "Q: " + PASSAGE.replace("?", " -- ").replace("objects", "objects,"),
])
def test_casing_punctuation_and_accent_variants_are_found(tasks, variant):
    step = DecontaminateStep(tasks)
    _, rejected = run(step, [f"Some text before. {variant} And after."])
    assert len(rejected) == 1 and rejected[0].metadata["decontaminate"]["item"] == "qa-1"


def test_chinese_is_found_by_characters(tasks):
    step = DecontaminateStep(tasks)
    texts = ["课堂笔记：" + ZH_PASSAGE + "下课后我们讨论了别的话题。",
             "该物品用气泡包装纸 包着，因为 它很易碎！",  # spaces and other punctuation
             "我掏空了口袋，所以我找到了一张票根。", *CLEAN]
    kept, rejected = run(step, texts)
    assert [(d.id, d.metadata["reason"], d.metadata["decontaminate"]["item"]) for d in rejected] == [
        ("d0", "decontaminate.zh", "zh-1"), ("d1", "decontaminate.zh", "zh-1"), ("d2", "decontaminate.zh", "zh-2")]
    assert len(rejected[0].metadata["decontaminate"]["ngram"]) == 13  # 13 characters, no spaces
    assert [d.text for d in kept] == CLEAN
    # zh-1 has 17 characters, zh-2 16: with cjk_n = 17, zh-2 is too short to look for
    longer = DecontaminateStep(tasks, cjk_n=17)
    _, rejected = run(longer, texts)
    assert [d.id for d in rejected] == ["d0", "d1"]
    assert longer.stats()["index"]["zh"] == "2 items, 1 long enough, 1 n-grams"


def test_cut_removes_the_spans_and_sinks_each_with_its_ngram(tasks):
    step = DecontaminateStep(tasks, action="cut")
    before, after = "Notes from class.\n", "\nThe next lab is on Friday, bring goggles."
    zh_before, zh_after = "课堂笔记：", "下课后我们讨论了别的话题。"
    kept, rejected = run(step, [before + PASSAGE + after, PASSAGE, zh_before + ZH_PASSAGE + zh_after, *CLEAN])
    assert [d.text for d in kept] == [before + "." + after, zh_before + "。" + zh_after, *CLEAN]
    assert kept[0].metadata["decontaminate"] == {"spans_cut": 1, "hits": {"qa": WORDS - 12}}
    parts = {d.metadata.get("cut_from"): d for d in rejected}
    # the whole-passage document has nothing left: rejected as under drop
    assert parts[None].id == "d1" and parts[None].metadata["reason"] == "decontaminate.qa"
    cut = parts["d0"]
    assert cut.text == PASSAGE[:-1] and cut.metadata["span"] == [len(before), len(before) + len(PASSAGE) - 1]
    assert cut.metadata["reason"] == "decontaminate.qa" and cut.metadata["item"] == "qa-1"
    assert cut.metadata["ngram"].startswith("a student rolls four")
    assert parts["d2"].text == ZH_PASSAGE[:-1] and parts["d2"].metadata["benchmark"] == "zh"
    st = step.stats()
    assert st["docs_in"] == 7 and st["docs_out"] == 6 and st["rejected"] == {"decontaminate.qa": 1}
    assert st["cut"] == {"decontaminate.qa": 1, "decontaminate.zh": 1}
    assert st["chars_cut"] == len(PASSAGE) - 1 + len(ZH_PASSAGE) - 1


def test_cut_keeps_words_apart_and_merges_overlapping_hits(tasks):
    step = DecontaminateStep(tasks, action="cut")
    copy = PASSAGE.rstrip(".")
    kept, rejected = run(step, [f"Intro words {copy} {copy} outro", f"Intro words {copy}, {copy}outro"])
    assert kept[0].text == "Intro words outro"
    assert kept[1].text == "Intro words notebookoutro"  # the last word is "notebookoutro": not the passage's
    assert [d.metadata["cut_from"] for d in rejected] == ["d0", "d1"]  # two copies side by side: one span each


def test_choices_decide_which_answers_are_indexed(tmp_path):
    items = [{"id": "c", "context": "Plants take in a gas:",
              "choices": ["oxygen that animals breathe out into the warm air of the greenhouse",
                          "carbon dioxide, which the leaves absorb through small pores during the day"], "gold": 1}]
    task = [str(write_task(tmp_path, "t", items))]
    wrong = "Plants take in a gas: oxygen that animals breathe out into the warm air of the greenhouse"
    right = "Plants take in a gas: carbon dioxide, which the leaves absorb through small pores during the day"
    for choices, found in (("gold", ["d1"]), ("all", ["d0", "d1"]), ("none", [])):
        _, rejected = run(DecontaminateStep(task, choices=choices), [wrong, right])
        assert [d.id for d in rejected] == found, choices


def test_perplexity_tasks_are_indexed_by_their_text(tmp_path):
    text = ("It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
            "foolishness")
    (tmp_path / "held.jsonl").write_text(json.dumps({"id": "h1", "text": text}) + "\n", encoding="utf-8")
    (tmp_path / "held.toml").write_text('kind = "perplexity"\ndata = "held.jsonl"\n', encoding="utf-8")
    _, rejected = run(DecontaminateStep([str(tmp_path / "held.toml")]),
                      ["Dickens wrote: it was the best of times, it was the worst of times, it was the age of wisdom."])
    assert rejected[0].metadata["decontaminate"]["item"] == "h1"


def test_bad_arguments_and_task_files_fail_with_the_place(tmp_path, tasks):
    with pytest.raises(ConfigError, match=r"steps\[2\] \(decontaminate\): tasks: task file .*nope.toml not found"):
        build_step({"name": "decontaminate", "tasks": [str(tmp_path / "nope.toml")]}, "steps[2]")
    with pytest.raises(ConfigError, match="tasks: task files or directories"):
        build_step({"name": "decontaminate", "tasks": []})
    with pytest.raises(ConfigError, match="action: 'remove' is not one of drop, cut"):
        build_step({"name": "decontaminate", "tasks": tasks, "action": "remove"})
    with pytest.raises(ConfigError, match="n: a whole number >= 1"):
        build_step({"name": "decontaminate", "tasks": tasks, "n": 0})
    (tmp_path / "bench" / "shards.toml").write_text('kind = "perplexity"\nshards = "."\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="perplexity task over token shards has no text"):
        build_step({"name": "decontaminate", "tasks": [str(tmp_path / "bench" / "shards.toml")]})
    write_task(tmp_path / "bad", "b", [{"id": "x", "context": "c", "choices": ["a"], "gold": 4}])
    with pytest.raises(ConfigError, match=r"b.jsonl:1: gold 'gold' is 4"):
        build_step({"name": "decontaminate", "tasks": [str(tmp_path / "bad")]})


def test_the_step_pickles_without_its_index(tasks):
    step = DecontaminateStep(tasks)
    copy = pickle.loads(pickle.dumps(step))
    assert copy._index is None
    _, rejected = run(copy, [PASSAGE])
    assert len(rejected) == 1


def test_pipeline_sink_stats_and_report(tmp_path, tasks):
    """Through the executor: dropped documents and cut parts reach the exclusion sink with their n-gram; the cut
    parts are not counted as documents (conservation holds); hits per benchmark reach stats.json and the report."""
    (tmp_path / "in").mkdir()
    docs = [{"id": "whole", "text": PASSAGE}, {"id": "span", "text": "Intro.\n" + PASSAGE + "\nOutro line here."},
            {"id": "zh", "text": "课堂笔记：" + ZH_PASSAGE + "下课了。"}] + [{"id": f"c{i}", "text": t}
                                                                          for i, t in enumerate(CLEAN)]
    (tmp_path / "in" / "a.jsonl").write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs))
    for action in ("drop", "cut"):
        out = tmp_path / action
        stats = run_pipeline(Pipeline.from_dict({
            "input": {"paths": [str(tmp_path / "in")]},
            "steps": [{"name": "decontaminate", "tasks": tasks, "action": action}],
            "output": {"dir": str(out), "format": "jsonl.zst"}}), progress=False)
        assert stats["conserved"]
        sunk = {d["id"]: d for d in read_jsonl_zst(out / "rejected" / "part-00000.jsonl.zst")}
        step = stats["steps"][1]
        zh_windows = len(re.sub(r"\W", "", ZH_PASSAGE)) - 12
        assert step["extra"]["benchmarks"] == {"qa": {"docs": 2, "ngrams": 2 * (WORDS - 12)},
                                               "zh": {"docs": 1, "ngrams": zh_windows}}
        if action == "drop":
            assert set(sunk) == {"whole", "span", "zh"} and stats["docs_out"] == len(CLEAN)
            assert sunk["span"]["metadata"]["decontaminate"]["ngram"].startswith("a student rolls")
            assert step["rejected"] == {"decontaminate.qa": 2, "decontaminate.zh": 1}
        else:
            assert stats["docs_out"] == len(CLEAN) + 2 and step["rejected"] == {"decontaminate.qa": 1}
            parts = [d for d in sunk.values() if d["metadata"].get("cut_from")]
            assert sorted(d["metadata"]["cut_from"] for d in parts) == ["span", "zh"]
            assert all(d["metadata"]["ngram"] and d["metadata"]["reason"].startswith("decontaminate.") for d in parts)
            assert step["extra"]["cut"] == {"decontaminate.qa": 1, "decontaminate.zh": 1}
        html = build_data_report(out).read_text()
        assert "Benchmark overlap (decontaminate)" in html
        assert f"<td>qa</td><td>2</td><td>{2 * (WORDS - 12)}</td>" in html


def test_the_command(tmp_path, tasks, capsys):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text(json.dumps({"text": PASSAGE}) + "\n" + json.dumps({"text": CLEAN[0]})
                                             + "\n")
    assert main(["data", "decontaminate", "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"),
                 "--tasks", *tasks, "--option", "action=cut", "--no-report"]) == 0
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["docs_rejected"] == 1 and stats["steps"][1]["extra"]["settings"].endswith("action = cut")
    assert "decontaminate.qa: 1" in capsys.readouterr().out
    assert main(["data", "decontaminate", "--input", str(tmp_path / "in"), "--output", str(tmp_path / "o2"),
                 "--tasks", str(tmp_path / "missing.toml")]) == 2
    assert "missing.toml not found" in capsys.readouterr().err
