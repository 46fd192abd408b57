"""Hang detection on 4 real gloo ranks (tp 2 x dp_shard 2, the debug model, fp32, deterministic) under
`bessemer train --nproc 4 --max-restarts 1 --fault.hang_timeout_s=20`:

- a worker stopped from outside (SIGSTOP: a random rank at a random moment mid-run) is found within
  hang_timeout_s + 10 s; one console line names the rank, its host and where it was; the stopped process is
  killed (torchrun never has to wait for it), the job restarts from the last checkpoint and finishes with every
  step's loss bitwise equal to an uninterrupted run's;
- a rank stuck for good inside a checkpoint write (fault.hang_during_save) is found the same way, its line
  naming the save.
Each ends with the `hang` event in metrics.jsonl, the report's Hangs section and `bessemer doctor --run-dir`.
"""

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bessemer.hangs import read_verdicts
from bessemer.report.run_report import build_report, read_metrics
from tests.distributed.runs import ENV, run_train

STEPS = 30
HANG_TIMEOUT_S = 20
ARGS = ["configs/debug.toml", "--parallel.tp=2", "--parallel.dp_shard=2", f"--train.steps={STEPS}",
        "--train.deterministic=true", "--metrics.tensorboard=false", "--metrics.peak_tflops=1",
        "--metrics.log_interval=1", "--checkpoint.micro.interval=5", "--checkpoint.micro.keep=0",
        f"--fault.hang_timeout_s={HANG_TIMEOUT_S}"]
SEED = int(os.environ.get("BESSEMER_HANG_SEED", time.time_ns() % 100_000))  # printed by every failure


def start(run_dir: Path, *extra: str) -> tuple[subprocess.Popen, Path]:
    out = run_dir.parent / f"{run_dir.name}.out"
    cmd = [sys.executable, "-m", "bessemer.cli", "train", "--nproc=4", "--max-restarts=1", *ARGS, *extra,
           f"--run.dir={run_dir}"]
    with open(out, "w") as f:
        return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, text=True, env=ENV), out


def logged_steps(run_dir: Path) -> int:
    try:
        records, _ = read_metrics(run_dir / "metrics.jsonl")
    except (OSError, ValueError):
        return 0
    return max((r["step"] for r in records), default=0)


def first_attempt_pid(run_dir: Path, rank: int) -> int:
    """The rank's process in attempt 0, from its log's header (`==== rank 2, attempt 0, pid 1234, ... ====`)."""
    for line in (run_dir / "logs" / f"rank{rank}.log").read_text().splitlines():
        if line.startswith(f"==== rank {rank}, attempt 0, pid "):
            return int(line.split("pid ")[1].split(",")[0])
    raise AssertionError(f"no attempt-0 header in rank{rank}.log")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The same run, uninterrupted: every step's loss."""
    records, _ = run_train(tmp_path_factory.mktemp("ref") / "R", 4, ARGS)
    return {r["step"]: r["loss"] for r in records}


def finish(proc: subprocess.Popen, out: Path, where: str) -> str:
    """Wait for the run to end, which it must do with status 0; its output. A run still going is killed."""
    try:
        assert proc.wait(timeout=400) == 0, f"{where}\n" + out.read_text()[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    return out.read_text()


def hang_line(output: str, rank: int) -> str:
    lines = [line for line in output.splitlines() if line.startswith("hang: ")]
    assert len(lines) == 1, output[-4000:]
    assert lines[0].startswith(f"hang: rank {rank} (host {socket.gethostname()}, pid "), lines[0]
    return lines[0]


def check_after(run: Path, output: str, reference: dict, rank: int) -> dict:
    """What every hang leaves: the losses of an uninterrupted run, one restart, the `hang` event, the report's
    section and the doctor's summary. Returns the verdict."""
    records, events = read_metrics(run / "metrics.jsonl")
    assert {r["step"]: r["loss"] for r in records} == reference  # every step, bitwise
    assert [e["attempt"] for e in events if e["event"] == "restart"] == [1]
    (hang,) = [e for e in events if e["event"] == "hang"]
    assert hang["ranks"] == [rank] and hang["hosts"] == [socket.gethostname()] and hang["message"] in output
    (verdict,) = read_verdicts(run)
    assert Path(verdict["dir"], f"rank{rank}.txt").exists() or verdict["culprits"][0]["state"] == "stopped"
    live = [r for r in range(4) if r != rank]
    for r in live:  # every live rank dumped its stacks, its flight record and its summary
        assert "Thread" in Path(verdict["dir"], f"rank{r}.txt").read_text()
        assert json.loads(Path(verdict["dir"], f"rank{r}.json").read_text())["rank"] == r
    html = build_report(run).read_text()
    assert "<h2>Hangs</h2>" in html and f"hang: rank {rank} " in html
    doctor = subprocess.run([sys.executable, "-m", "bessemer.cli", "doctor", "--run-dir", str(run)],
                            capture_output=True, text=True, env=ENV, timeout=60, check=False)
    assert doctor.returncode == 1 and f"rank {rank} (hung" in doctor.stdout, doctor.stdout + doctor.stderr
    return verdict


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_a_stopped_rank_is_found_named_killed_and_the_run_finishes_bitwise(reference, tmp_path):
    rng = random.Random(SEED)
    rank, at_step, pause = rng.randrange(4), rng.randint(6, 18), rng.uniform(0.0, 0.5)
    where = f"seed {SEED}: SIGSTOP to rank {rank} after step {at_step} + {pause:.2f} s"
    run = tmp_path / "R"
    proc, out = start(run)
    try:
        while logged_steps(run) < at_step:
            assert proc.poll() is None, f"{where}: the run ended early\n" + out.read_text()[-3000:]
            time.sleep(0.05)
        time.sleep(pause)
        pid = first_attempt_pid(run, rank)
        stopped_at = time.time()
        os.kill(pid, signal.SIGSTOP)
    except BaseException:
        proc.kill()
        raise
    output = finish(proc, out, where)
    line = hang_line(output, rank)
    # Where: the frames of its last heartbeat, and that the job restarted.
    assert re.search(r"hung at step \d+: stopped \(no heartbeat for \d+ s\), last heartbeat( \(step \d+\))? in "
                     r"\S+:\d+ ", line) and "bessemer/" in line, line
    assert "restarting all 4 ranks from step " in line, line
    verdict = check_after(run, output, reference, rank)
    assert verdict["culprits"][0]["pid"] == pid
    detected = verdict["time"] - stopped_at
    print(f"\n{where}: found after {detected:.1f} s: {line}")
    assert detected <= HANG_TIMEOUT_S + 10, f"{where}: found after {detected:.1f} s"
    with pytest.raises(ProcessLookupError):  # killed, and reaped by torchrun ...
        os.kill(pid, 0)
    launcher = (run / "logs" / "launcher.log").read_text()
    assert "forcefully exiting via" not in launcher  # ... without torchrun waiting out its grace period


@pytest.mark.distributed
@pytest.mark.timeout(600)
def test_a_rank_stuck_in_a_checkpoint_write_is_found_and_the_run_finishes_bitwise(reference, tmp_path):
    rank = random.Random(SEED).randrange(4)
    run = tmp_path / "R"
    proc, out = start(run, f"--fault.hang_rank={rank}", "--fault.hang_at_step=10", "--fault.hang_during_save=true")
    output = finish(proc, out, f"seed {SEED}, rank {rank}")
    line = hang_line(output, rank)
    assert f"hung at step 10: no progress for {HANG_TIMEOUT_S}" in line and "not in a collective" in line, line
    assert "during_save" in line and "bessemer/checkpoint/store.py" in line, line  # inside the save
    assert "restarting all 4 ranks from step 5 (micro checkpoint)" in line, line  # step 10's save never committed
    verdict = check_after(run, output, reference, rank)
    assert verdict["culprits"][0]["state"] == "stuck"
    print(f"\nseed {SEED}: {line}")
