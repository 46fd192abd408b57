"""`bessemer train` as the distributed tests start it: in a subprocess (torchrun's gloo ranks through `--nproc`
when nproc > 1), one OpenMP thread per process so that several ranks share the few cores without
oversubscribing them. A run that fails fails the test with the tail of its output."""

import os
import subprocess
import sys
from pathlib import Path

from bessemer.report.run_report import read_metrics

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def run_train(run_dir: Path, nproc: int, args: list[str], timeout: int = 900) -> tuple[list[dict], list[dict]]:
    """Train with `args` (the config file first, then overrides) into `run_dir`; returns metrics.jsonl's step
    records and events."""
    nproc_flag = [f"--nproc={nproc}"] if nproc > 1 else []
    cmd = [sys.executable, "-m", "bessemer.cli", "train", *nproc_flag, *args, f"--run.dir={run_dir}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return read_metrics(Path(run_dir) / "metrics.jsonl")


def train_losses(common: list[str], run_dir: Path, nproc: int, extra: list[str],
                 timeout: int = 900) -> dict[int, float]:
    """The loss of every step of a run with `common` + `extra`, by step."""
    records, _ = run_train(run_dir, nproc, [*common, *extra], timeout)
    return {r["step"]: r["loss"] for r in records}
