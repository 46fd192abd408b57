import json
import os
import subprocess
import sys

from bessemer.report.run_report import read_metrics

ENV = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}


def demo(*args):
    return subprocess.run([sys.executable, "-m", "bessemer.cli", "demo", *args], capture_output=True, text=True,
                          env=ENV, timeout=600)


def test_demo_end_to_end_small(tmp_path):
    """The demo's whole path (corpus, tokenizer, shards, launch, training, report), shortened to 40 steps of
    the debug model on 2 processes (a 2-stage pipeline) instead of 8."""
    run = tmp_path / "demo"
    proc = demo("--run-dir", str(run), "--model.name=debug", "--train.steps=40", "--train.warmup=5",
                "--checkpoint.macro.interval=20", "--checkpoint.micro.interval=10", "--fault.kill_rank=1",
                "--fault.kill_at_step=25", "--parallel.tp=1", "--parallel.dp_shard=1", "--train.micro_batch=4",
                "--train.global_batch=8")
    assert proc.returncode == 0, proc.stderr
    assert f"report: {run / 'report' / 'index.html'}" in proc.stdout
    assert (run / "data" / "tokenizer" / "tokenizer.json").is_file()
    records, events = read_metrics(run / "metrics.jsonl")
    assert len(records) == 40 and records[-1]["loss"] < records[0]["loss"] - 1.0
    assert {e["step"] for e in events if e["event"] == "checkpoint_saved"} == {10, 20, 30, 40}
    restarts = [e for e in events if e["event"] == "restart"]
    assert len(restarts) == 1 and restarts[0]["step"] == 20  # rank 1 died after step 25; resumed from step 20
    html = (run / "report" / "index.html").read_text()
    assert "<h2>Recovery</h2>" in html and "automatic restarts" in html
    assert 'name = "debug"' in html and "loss.png" in html
    assert "world 2 = pp 2 x dp_replicate 1 x dp_shard 1 x tp 1" in html  # the layout is in the report
    # The held-out loss of every domain ([eval] interval 40: the last step), in the pipeline layout.
    validations = [e for e in events if e["event"] == "validation"]
    assert [e["step"] for e in validations] == [40]
    assert sorted(validations[0]["val_loss"]) == ["code", "prose_en", "prose_zh"]
    assert "held-out loss per domain: code" in proc.stdout
    assert "<h2>Held-out evaluation</h2>" in html and (run / "report" / "validation.png").is_file()
    _check_curation(run, proc.stdout, html)
    # Running it again replaces the demo's own directory (here in one process).
    again = demo("--run-dir", str(run), "--model.name=debug", "--train.steps=2", "--parallel.pp=1",
                 "--parallel.tp=1", "--parallel.dp_shard=1", "--fault.kill_rank=-1")
    assert again.returncode == 0, again.stderr


def _check_curation(run, stdout, html):
    """Every planted problem (bessemer/demo/planted.py) was caught, nothing was lost, and the report says so."""
    from bessemer.demo.corpus import read_curated

    assert "[1/4] curate" in stdout and "[4/4] report" in stdout
    stats = json.loads((run / "curated" / "stats.json").read_text())
    assert stats["conserved"] and stats["docs_in"] == stats["docs_out"] + stats["docs_rejected"]
    steps = {s["name"]: s for s in stats["steps"]}
    assert list(steps) == ["input", "url", "extract", "lang", "normalize", "decontaminate", "quality", "pii", "dedup"]
    assert steps["extract"]["rejected"] == {"extract.js_rendered": 6}  # the 6 JavaScript-only pages
    assert steps["dedup"]["rejected"]["dedup.exact_duplicate"] >= 6
    assert steps["dedup"]["rejected"]["dedup.near_duplicate"] >= 6
    assert sum(n for r, n in steps["quality"]["rejected"].items() if r.startswith("quality.gopher")) >= 12
    raw = [json.loads(line) for f in sorted((run / "data" / "raw").glob("*.jsonl")) for line in f.open()]
    kept = {d["id"]: d for d in read_curated(run / "curated")}
    planted = [d for d in raw if "planted" in d["metadata"]]
    by_kind = {k: [d for d in planted if d["metadata"]["planted"] == k] for k in
               ("exact_duplicate", "near_duplicate", "pii", "junk", "js_only", "html_article", "benchmark")}
    assert all(by_kind.values()), {k: len(v) for k, v in by_kind.items()}
    for kind in ("junk", "js_only"):  # every one rejected
        assert not [d["id"] for d in by_kind[kind] if d["id"] in kept], kind
    for d in by_kind["exact_duplicate"] + by_kind["near_duplicate"]:  # at most one of copy and original left
        assert not (d["id"] in kept and d["metadata"]["copy_of"] in kept), d["id"]
    assert all(d["id"] in kept and kept[d["id"]]["metadata"]["format"] == "text" for d in by_kind["html_article"])
    pii_kept = [kept[d["id"]] for d in by_kind["pii"] if d["id"] in kept]
    assert len(pii_kept) >= len(by_kind["pii"]) // 2
    for doc in pii_kept:
        assert all(f"[{t}]" in doc["text"] for t in ("EMAIL", "PHONE", "ID_NUMBER", "BANK_CARD")), doc["id"]
    clean_text = "\n".join(d["text"] for d in kept.values())
    planted_pii = json.loads((run / "data" / "planted_pii.json").read_text())
    assert set(planted_pii) == {d["id"] for d in by_kind["pii"]}
    for doc_id, values in planted_pii.items():  # no planted value survives anywhere in the clean output
        assert not [v for v in values.values() if v in clean_text], doc_id
    assert {d["metadata"]["domain"] for d in kept.values()} == {"code", "prose_en", "prose_zh"}
    for d in by_kind["benchmark"]:  # every planted benchmark item found: dropped alone, cut out of its host
        assert d["metadata"]["passage"] not in clean_text, d["id"]
    hits = steps["decontaminate"]["extra"]["benchmarks"]
    assert sum(h["docs"] for h in hits.values()) == len(by_kind["benchmark"])
    assert "benchmark items found: demo_qa" in stdout
    assert "<h2>Data curation</h2>" in html and "../curated/report/index.html" in html
    assert (run / "curated" / "report" / "index.html").is_file()


def test_demo_refuses_a_directory_it_did_not_make(tmp_path):
    (tmp_path / "precious.txt").write_text("keep me")
    proc = demo("--run-dir", str(tmp_path))
    assert proc.returncode == 2 and "was not made by the demo" in proc.stderr
    assert (tmp_path / "precious.txt").read_text() == "keep me"


def test_tokenizer_loads_in_transformers_format(tmp_path):
    """tokenizer.json is the HF format: tokenizers loads it and round-trips mixed text byte-exactly."""
    from bessemer.tokenizer.common import EOS, load_tokenizer
    from bessemer.tokenizer.train import train_tokenizer

    text = ["def f(x):\n    return x + 1\n", "民法典第一千一百七十九条", "plain English prose."] * 20
    path = train_tokenizer(((t, None) for t in text), 300, tmp_path, kind="bpe")
    tok = load_tokenizer(path)
    for t in text[:3]:
        assert tok.decode(tok.encode(t).ids) == t
    assert tok.token_to_id(EOS) is not None


def test_demo_refuses_overrides_of_its_own_paths(tmp_path):
    proc = demo("--run-dir", str(tmp_path / "d"), "--data.path=/elsewhere")
    assert proc.returncode == 2 and "use --run-dir instead of --data.path=/elsewhere" in proc.stderr
