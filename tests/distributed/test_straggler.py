"""Straggler detection on 8 real gloo ranks: a rank slowed by fault injection is named in a straggler alert
within the configured window; the same run without the fault raises none. 8 processes share few cores here,
so the injected delay (600 ms) is large against a step (~0.5 s) and the window short."""

import os
import subprocess
import sys

import pytest

from bessemer.report.run_report import read_metrics

WINDOW, WARMUP = 8, 2  # metrics.straggler_window; the detector ignores the first 2 steps
COMMON = ["configs/debug.toml", "--nproc=8", "--parallel.dp_shard=8", "--train.micro_batch=1",
          "--train.global_batch=8", "--train.steps=14", "--metrics.tensorboard=false", "--metrics.peak_tflops=1",
          "--metrics.telemetry_period_s=0", "--checkpoint.at_end=false", f"--metrics.straggler_window={WINDOW}",
          "--metrics.straggler_margin=1.2"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def train(run_dir, *extra):
    cmd = [sys.executable, "-m", "bessemer.cli", "train", *COMMON, f"--run.dir={run_dir}", *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return read_metrics(run_dir / "metrics.jsonl")


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_a_slowed_rank_is_named_in_a_straggler_alert_within_the_window(tmp_path):
    records, events = train(tmp_path / "slow", "--fault.slow_rank=3", "--fault.slow_ms=600")
    alerts = [e for e in events if e["event"] == "alert" and e["kind"] == "straggler"]
    assert len(alerts) == 1, alerts  # once per episode
    a = alerts[0]
    assert a["rank"] == 3 and a["ranks"] == [3] and "rank 3" in a["message"]
    assert a["step"] <= WARMUP + WINDOW
    times = [r["rank_step_time_s"] for r in records]
    assert all(len(t) == 8 for t in times)
    assert all(t[3] == max(t) for t in times)  # every step, rank 3 arrives last
    assert all(r["step_time_s"] == pytest.approx(max(r["rank_step_time_s"]), abs=1e-4) for r in records)
    print(f"\nstraggler: rank 3 named at step {a['step']}: {a['message']}")


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_the_same_run_without_the_fault_raises_no_straggler_alert(tmp_path):
    records, events = train(tmp_path / "clean")
    assert [r["step"] for r in records] == list(range(1, 15))
    assert [e for e in events if e["event"] == "alert"] == []
    spread = max(max(t) / sorted(t)[4] for t in (r["rank_step_time_s"] for r in records[WARMUP:]))
    print(f"\nno fault: largest step time / median over ranks {spread:.2f}")
