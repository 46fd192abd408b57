"""Two "nodes" on this machine: two torchrun launchers (c10d rendezvous, 2 ranks each) whose micro tier is
node-local through `{node}`. A rank killed with SIGKILL restarts both nodes (--max-restarts); they resume from
the micro tier — every node holds its part of the newest step — bitwise equal to an uninterrupted run. When one
node's micro directory is lost before the restart (a replaced node), they resume from the macro tier instead."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from bessemer.report.run_report import read_metrics

STEPS = 9
# Micro saves after steps 3, 6, 9 (node-local), macro after 5 (and at the end).
COMMON = ["configs/debug.toml", f"--train.steps={STEPS}", "--train.global_batch=4", "--train.micro_batch=1",
          "--train.seq_len=32", "--train.deterministic=true", "--metrics.tensorboard=false",
          "--metrics.peak_tflops=1", "--checkpoint.micro.interval=3", "--checkpoint.micro.keep=0",
          "--checkpoint.macro.interval=5", "--parallel.timeout_s=120"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def args(run, *extra):
    return ["-m", "bessemer.cli", "train", *COMMON, f"--run.dir={run}",
            f"--checkpoint.micro.dir={run}/local/{{node}}/micro", *extra]


def two_nodes(run, *extra, while_running=None):
    """Both launchers of one job; `while_running(run)` is polled until they end. Returns (records, events)."""
    port = free_port()
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=2",
                "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=two-node",
                "--max-restarts=1", "--monitor-interval=0.1"]
    run.mkdir(parents=True, exist_ok=True)
    procs = [subprocess.Popen([*launcher, *args(run, *extra)], env=ENV, stdout=open(run / f"launcher{i}.log", "w"),
                              stderr=subprocess.STDOUT) for i in range(2)]
    deadline = time.monotonic() + 600
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        if while_running is not None:
            while_running(run)
        time.sleep(0.02)
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    logs = "".join((run / f"launcher{i}.log").read_text()[-3000:] for i in range(2))
    assert all(p.returncode == 0 for p in procs), logs
    return read_metrics(run / "metrics.jsonl")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The same job on one launcher of 4 ranks (one node: the same layout, the same losses)."""
    run = tmp_path_factory.mktemp("ref") / "R"
    cmd = [sys.executable, *args(run, "--nproc=4")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records, _ = read_metrics(run / "metrics.jsonl")
    return {r["step"]: r["loss"] for r in records}


def losses(records):
    return {r["step"]: r["loss"] for r in records}


@pytest.mark.distributed
def test_a_killed_rank_resumes_from_the_node_local_micro_tier_bitwise(uninterrupted, tmp_path):
    run = tmp_path / "R"
    records, events = two_nodes(run, "--fault.kill_rank=3", "--fault.kill_at_step=7")
    assert losses(records) == uninterrupted  # every step, bitwise (steps 7.. were taken twice, alike)
    loaded = [e for e in events if e["event"] == "checkpoint_loaded"]
    assert [(e["step"], e["tier"]) for e in loaded] == [(6, "micro")]
    # Each node holds its own ranks' parts, and the commit record says so (step 9 is the end-of-run macro).
    record = json.loads((run / "checkpoints" / "macro" / "micro_commits.json").read_text())
    newest = record["steps"][-1]
    assert newest["step"] == 6 and sorted(map(sorted, newest["nodes"].values())) == [[0, 1], [2, 3]]
    for node, ranks in newest["nodes"].items():
        part = run / "local" / node / "micro" / "step_00000006"
        assert sorted(p.name for p in part.glob("rank*.pt")) == [f"rank{r:05d}.pt" for r in sorted(ranks)]


@pytest.mark.distributed
def test_a_lost_node_directory_falls_back_to_the_macro_tier_bitwise(uninterrupted, tmp_path):
    wiped = []

    def wipe_node1_after_step_6_is_saved(run):
        """Once step 7 is logged the step-6 micro save is committed everywhere; rank 3 dies after step 8."""
        if wiped or not (run / "metrics.jsonl").is_file():
            return
        records, _ = read_metrics(run / "metrics.jsonl")
        if any(r["step"] == 7 for r in records):
            shutil.rmtree(run / "local" / "1")
            wiped.append(True)

    run = tmp_path / "R"
    records, events = two_nodes(run, "--fault.kill_rank=3", "--fault.kill_at_step=8",
                                while_running=wipe_node1_after_step_6_is_saved)
    assert wiped and losses(records) == uninterrupted
    loaded = [e for e in events if e["event"] == "checkpoint_loaded"]
    skipped = [e for e in events if e["event"] == "checkpoint_skipped"]
    assert [(e["step"], e["tier"]) for e in loaded] == [(5, "macro")]
    assert [(e["step"], e["tier"]) for e in skipped] == [(6, "micro")] and "node 1" in skipped[0]["reason"]
