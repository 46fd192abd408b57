"""A domain mixture through `bessemer train` on the bundled debug shards (domains code, prose_en, prose_zh)."""

import os
import subprocess
import sys
from pathlib import Path

from bessemer.report.run_report import build_report, read_metrics

BESSEMER = [sys.executable, "-m", "bessemer.cli"]
ENV = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
QUICK = ["--metrics.tensorboard=false", "--train.global_batch=8", "--train.micro_batch=4"]


def train(*args):
    proc = subprocess.run([*BESSEMER, "train", "configs/debug.toml", *QUICK, *args], capture_output=True, text=True,
                          env=ENV, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr


def records(run: Path) -> dict[int, dict]:
    return {r["step"]: r for r in read_metrics(run / "metrics.jsonl")[0]}


def test_metrics_hold_the_mixture_shares_and_the_report_shows_them(tmp_path):
    train("--data.domains=code:0.5,prose_en:0.25,prose_zh:0.25", "--train.steps=6", f"--run.dir={tmp_path}")
    steps = records(tmp_path)
    assert sorted(steps) == list(range(1, 7))
    for r in steps.values():  # 4, 2 and 2 sequences of 8: exactly the weights, every batch
        assert r["domain_tokens_share"] == {"code": 0.5, "prose_en": 0.25, "prose_zh": 0.25}
        assert r["domain_weights"] == r["domain_tokens_share"]
        assert r["domain_loss"].keys() == {"code", "prose_en", "prose_zh"}
    html = build_report(tmp_path).read_text()
    assert "<h2>Data mixture</h2>" in html and "mixture.png" in html and "domain_loss.png" in html


def test_resume_continues_the_mixture_and_its_reweighting_identically(tmp_path):
    mixture = ["--data.domains=code:0.4,prose_en:0.4,prose_zh:0.2", "--data.reweight=loss",
               "--data.reweight_eta=0.5", "--data.tolerance=0.125"]
    train(*mixture, "--train.steps=8", f"--run.dir={tmp_path / 'ref'}")
    train(*mixture, "--train.steps=4", f"--run.dir={tmp_path / 'R'}")  # saves at its end (step 4)
    train(*mixture, "--train.steps=8", "--train.override_schedule=true", "--resume", f"--run.dir={tmp_path / 'R'}")
    ref, resumed = records(tmp_path / "ref"), records(tmp_path / "R")
    keys = ("loss", "domain_tokens_share", "domain_weights", "domain_loss", "domain_epochs")
    for s in range(5, 9):
        assert {k: resumed[s][k] for k in keys} == {k: ref[s][k] for k in keys}, s
    assert ref[8]["domain_weights"] != ref[1]["domain_weights"]  # the reweighting did move the weights
