"""The loop around the step: the garbage collector at fixed steps, metrics written off the training thread."""

import gc
import json
import threading

import pytest

from bessemer.config import MetricsConfig, load_config
from bessemer.errors import ConfigError
from bessemer.train.metrics import MetricsLogger
from bessemer.train.trainer import Trainer

SMALL = ["--train.seq_len=32", "--train.global_batch=4", "--train.micro_batch=2", "--metrics.tensorboard=false",
         "--metrics.peak_tflops=1", "--metrics.progress=false", "--metrics.telemetry_period_s=0",
         "--checkpoint.at_end=false"]


def test_the_collector_is_off_while_training_and_collects_every_gc_interval_steps(tmp_path, monkeypatch):
    t = Trainer(load_config("configs/debug.toml", [f"--run.dir={tmp_path}", *SMALL, "--train.steps=7",
                                                   "--train.gc_interval=3"]))
    collected, enabled = [], []
    real_collect, real_step = gc.collect, t.step.__class__.__call__
    monkeypatch.setattr(gc, "collect", lambda *a: collected.append(t.state.step) or real_collect(*a))
    monkeypatch.setattr(t.step.__class__, "__call__", lambda self: enabled.append(gc.isenabled()) or real_step(self))
    assert gc.isenabled()
    t.train()
    assert collected == [0, 3, 6]  # once before the first step, then every 3 steps
    assert enabled == [False] * 7 and gc.isenabled()  # on again after training


def test_gc_interval_is_validated():
    with pytest.raises(ConfigError, match=r"train.gc_interval must be >= 1, got 0"):
        load_config("configs/debug.toml", ["--train.gc_interval=0"])


def test_metrics_are_written_by_a_writer_thread_in_order_and_flushed_at_close(tmp_path, monkeypatch):
    logger = MetricsLogger(MetricsConfig(tensorboard=False), tmp_path, resume=False)
    writers = set()
    real_write = logger._write
    monkeypatch.setattr(logger, "_write", lambda record: writers.add(threading.current_thread()) or real_write(record))
    for step in range(1, 201):
        logger.log({"step": step, "loss": 1.0 / step})
        if step % 50 == 0:
            logger.event("checkpoint_saved", step)
    logger.close()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 204 and [r["step"] for r in lines if "event" not in r] == list(range(1, 201))
    assert [i for i, r in enumerate(lines) if "event" in r] == [50, 101, 152, 203]  # in the order they came
    assert writers and threading.main_thread() not in writers


def test_a_failed_write_raises_in_the_training_thread(tmp_path, monkeypatch):
    logger = MetricsLogger(MetricsConfig(tensorboard=False), tmp_path, resume=False)
    monkeypatch.setattr(logger, "_write", lambda record: 1 / 0)
    logger.log({"step": 1})
    with pytest.raises(ZeroDivisionError):
        logger.close()


def test_tensorboard_gets_each_number_of_a_step_record(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = MetricsLogger(MetricsConfig(), tmp_path, resume=False)
    for step in (1, 2):
        logger.log({"step": step, "loss": 2.5 / step, "lr": 1e-3, "skipped": 0, "domain_loss": {"web": 2.0},
                    "rank_step_time_s": [0.1, 0.2]})
    logger.close()
    tb = EventAccumulator(str(tmp_path / "tb")).Reload()
    assert sorted(tb.Tags()["scalars"]) == ["train/domain_loss/web", "train/loss", "train/lr", "train/skipped"]
    assert [(e.step, e.value) for e in tb.Scalars("train/loss")] == [(1, 2.5), (2, 1.25)]
