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
    # Running it again replaces the demo's own directory (here in one process).
    again = demo("--run-dir", str(run), "--model.name=debug", "--train.steps=2", "--parallel.pp=1",
                 "--parallel.tp=1", "--parallel.dp_shard=1", "--fault.kill_rank=-1")
    assert again.returncode == 0, again.stderr


def test_demo_refuses_a_directory_it_did_not_make(tmp_path):
    (tmp_path / "precious.txt").write_text("keep me")
    proc = demo("--run-dir", str(tmp_path))
    assert proc.returncode == 2 and "was not made by the demo" in proc.stderr
    assert (tmp_path / "precious.txt").read_text() == "keep me"


def test_tokenizer_loads_in_transformers_format(tmp_path):
    """tokenizer.json is the HF format: tokenizers loads it and round-trips mixed text byte-exactly."""
    from bessemer.tokenizer.bpe import EOS, load_tokenizer, train_bpe

    text = ["def f(x):\n    return x + 1\n", "民法典第一千一百七十九条", "plain English prose."] * 20
    path = train_bpe(text, 300, tmp_path)
    tok = load_tokenizer(path)
    for t in text[:3]:
        assert tok.decode(tok.encode(t).ids) == t
    assert tok.token_to_id(EOS) is not None


def test_demo_refuses_overrides_of_its_own_paths(tmp_path):
    proc = demo("--run-dir", str(tmp_path / "d"), "--data.path=/elsewhere")
    assert proc.returncode == 2 and "use --run-dir instead of --data.path=/elsewhere" in proc.stderr
