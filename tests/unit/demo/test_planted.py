"""The demo's benchmark items (bessemer/demo/bench/, planted by bessemer/demo/planted.py) against its
decontaminate step as configs/demo_pipeline.toml sets it: every planted item found, whole or as a span, and no
other document of the raw demo corpus touched. The step alone, on the raw corpus: fast, unlike the whole demo."""

import json

from bessemer.data.document import Document
from bessemer.demo.corpus import build_raw_corpus, demo_pipeline
from bessemer.demo.planted import benchmark_passages


def test_every_planted_item_is_found_and_no_clean_document_is_touched(tmp_path):
    raw = build_raw_corpus(tmp_path / "raw")
    pipeline = demo_pipeline(raw, tmp_path / "curated")
    names = [s["name"] for s in pipeline.steps]
    assert names.index("normalize") < names.index("decontaminate") < names.index("quality")
    step = pipeline.build_steps()[names.index("decontaminate")]
    docs = [Document(r["id"], r["text"], r["metadata"]) for f in sorted(raw.glob("*.jsonl"))
            for r in map(json.loads, f.read_text(encoding="utf-8").splitlines())]
    original = {d.id: d.text for d in docs}
    kept = {d.id: d for d in step.run(docs)}
    sunk = step.rejected

    planted = [d for d in docs if d.metadata.get("planted") == "benchmark"]
    passages = benchmark_passages()
    assert len(planted) == len(passages) and {d.metadata["item"] for d in planted} == {p[1] for p in passages}
    assert {d.metadata["benchmark"] for d in planted} == {"demo_qa", "demo_zh"}
    alone = [d for d in planted if d.id.startswith("web/benchmark/")]
    quoted = [d for d in planted if d not in alone]
    assert alone and quoted
    dropped = {d.id: d for d in sunk if "cut_from" not in d.metadata}
    parts = {d.metadata["cut_from"]: d for d in sunk if "cut_from" in d.metadata}
    for d in alone:  # nothing but the item: rejected as decontaminate.<benchmark>
        assert d.id not in kept and dropped[d.id].metadata["reason"] == f"decontaminate.{d.metadata['benchmark']}"
        assert dropped[d.id].metadata["decontaminate"]["item"] == d.metadata["item"]
    for d in quoted:  # the item cut out of its host, the rest of the host kept
        passage, part = d.metadata["passage"], parts[d.id]
        assert part.metadata["item"] == d.metadata["item"]
        assert passage.startswith(part.text) and len(part.text) >= len(passage) - 1  # all but a final stop
        assert passage not in kept[d.id].text and kept[d.id].text.replace(" ", "") != ""
        assert len(kept[d.id].text) >= len(original[d.id]) - len(passage) - 1
    assert set(dropped) == {d.id for d in alone} and set(parts) == {d.id for d in quoted}
    clean = [d for d in docs if d.metadata.get("planted") != "benchmark"]
    assert len(kept) == len(docs) - len(alone)
    for d in clean:  # untouched: same text, no mark
        assert kept[d.id].text == original[d.id] and "decontaminate" not in kept[d.id].metadata, d.id
    st = step.stats()
    assert {b: h["docs"] for b, h in st["benchmarks"].items()} == {
        b: sum(d.metadata["benchmark"] == b for d in planted) for b in ("demo_qa", "demo_zh")}
