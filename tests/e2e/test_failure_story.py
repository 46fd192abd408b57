"""A failure reads as one story: a rank killed on 2 gloo ranks under `bessemer train --nproc 2 --max-restarts 1`
shows on the console as one line between rank 0's step lines, while each rank's log holds its own end."""

import os
import re
import subprocess
import sys

import pytest

from bessemer.report.run_report import build_report, read_metrics

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
RUN = ["configs/debug.toml", "--nproc=2", "--parallel.dp_shard=2", "--train.steps=16", "--metrics.log_interval=2",
       "--metrics.tensorboard=false", "--metrics.peak_tflops=1", "--checkpoint.micro.interval=4"]
STEP = re.compile(r"^step (\d+)/16 ")


def train(run_dir, *extra):
    return subprocess.run([sys.executable, "-m", "bessemer.cli", "train", *RUN, f"--run.dir={run_dir}", *extra],
                          capture_output=True, text=True, env=ENV, timeout=600)


@pytest.mark.distributed
def test_a_killed_rank_is_one_console_line_and_its_story_is_in_the_logs(tmp_path):
    run = tmp_path / "R"
    proc = train(run, "--max-restarts=1", "--fault.kill_rank=1", "--fault.kill_at_step=7")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    summary = (f"rank 1 exited (SIGKILL) after step 7; restarting all 2 ranks from step 4 (micro checkpoint), "
               f"restart 1 of 1: see {run / 'logs' / 'rank1.log'}")
    assert summary in lines, proc.stdout
    # From the last step line before the kill (step 6) to the first after the restart (step 6 again, recomputed
    # from the step-4 checkpoint): the summary, rank 0's start-up line, little else.
    before = max(i for i, line in enumerate(lines) if STEP.match(line) and i < lines.index(summary))
    after = min(i for i, line in enumerate(lines) if STEP.match(line) and i > lines.index(summary))
    assert lines[before].startswith("step 6/16") and lines[after].startswith("step 6/16")
    assert after - before - 1 <= 10, "\n".join(lines[before:after + 1])
    assert "Traceback" not in proc.stdout + proc.stderr and proc.stderr == ""
    assert [int(STEP.match(line).group(1)) for line in lines if STEP.match(line)][-1] == 16
    logs = run / "logs"
    assert sorted(p.name for p in logs.iterdir()) == ["failures.jsonl", "launcher.log", "rank0.log", "rank1.log"]
    rank0 = (logs / "rank0.log").read_text()
    assert "==== rank 0, attempt 0" in rank0 and "==== rank 0, attempt 1" in rank0
    assert "Traceback" in rank0 and "Connection" in rank0  # its collective lost the killed peer
    assert "step 16/16" in rank0  # and its console lines, too
    rank1 = (logs / "rank1.log").read_text()
    assert "==== rank 1 exited (SIGKILL) after step 7 (as torchrun reports it) ====" in rank1
    assert "failed (exitcode: -9) local_rank: 1" in (logs / "launcher.log").read_text()
    _, events = read_metrics(run / "metrics.jsonl")
    assert [e["attempt"] for e in events if e["event"] == "restart"] == [1]
    html = build_report(run).read_text()
    assert '<a href="../logs/rank1.log">rank1.log</a>' in html and "rank 1 exited (SIGKILL) after step 7" in html


@pytest.mark.distributed
def test_a_final_failure_is_one_line_naming_rank_status_and_log(tmp_path):
    run = tmp_path / "R"
    proc = train(run, "--fault.kill_rank=1", "--fault.kill_at_step=5")
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[-1] == (
        f"rank 1 exited (SIGKILL) after step 5; training stopped (--max-restarts 0): see {run / 'logs' / 'rank1.log'} "
        f"(torchrun's output: {run / 'logs' / 'launcher.log'})")
    assert "Traceback" not in proc.stdout + proc.stderr
    # A user error on the ranks (here a changed schedule on resume) is its one line on stderr, and exit status 2.
    proc = train(run, "--resume", "--train.steps=20")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "bessemer train: error: checkpoint step 4 was trained with train.steps=16; this config says train.steps=20: "
        "set train.override_schedule=true to continue on the new schedule from step 4, or restore the old values"]
