"""Validation during training changes nothing of the training (same losses with and without it), runs every
eval.interval steps and at the end, and refuses a run with nothing to evaluate."""

import pytest

from bessemer.config import load_config
from bessemer.errors import BessemerError
from bessemer.report.run_report import read_metrics
from bessemer.train.trainer import Trainer

SMALL = ["--train.seq_len=32", "--train.global_batch=4", "--train.micro_batch=2", "--metrics.tensorboard=false",
         "--metrics.peak_tflops=1", "--metrics.progress=false", "--metrics.telemetry_period_s=0",
         "--checkpoint.at_end=false", "--train.steps=7"]


def _run(run_dir, extra):
    t = Trainer(load_config("configs/debug.toml", [f"--run.dir={run_dir}", *SMALL, *extra]))
    t.train()
    return read_metrics(run_dir / "metrics.jsonl")


def test_validation_leaves_training_unchanged(tmp_path):
    # The training shards themselves as held-out data: what matters here is that evaluating touches nothing.
    plain, _ = _run(tmp_path / "a", [])
    records, events = _run(tmp_path / "b", ["--eval.interval=3", "--eval.paths=data/debug", "--eval.max_tokens=200"])
    assert [r["loss"] for r in records] == [r["loss"] for r in plain]
    validations = [e for e in events if e["event"] == "validation"]
    assert [e["step"] for e in validations] == [3, 6, 7]
    assert sorted(validations[-1]["val_loss"]) == ["code", "prose_en", "prose_zh"]
    assert all(n == 200 for n in validations[-1]["val_tokens"].values())


def test_nothing_to_evaluate_is_an_error(tmp_path):
    with pytest.raises(BessemerError, match="nothing to evaluate: no held-out shards at data/debug/heldout"):
        Trainer(load_config("configs/debug.toml", [f"--run.dir={tmp_path}", *SMALL, "--eval.interval=2"]))
