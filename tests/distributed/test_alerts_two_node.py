"""An alert raised on a node other than rank 0's reaches rank 0's metrics.jsonl and the run report.

Two "nodes" on this machine: two torchrun launchers of 2 ranks each, with a static rendezvous so that the node
ranks are the ones given. Only node 1 sees a GPU driver — a fake pynvml first on its PYTHONPATH, whose GPU 1 runs
at 1100 of 1980 MHz with HwThermalSlowdown — so its sampling rank (rank 2) feeds those samples to its own
throttle detector, and the alert can reach rank 0 only through the end-of-step exchange. The trainer's start-up
runtime checks run too, so runtime.busbw's size sweep is measured across the two nodes."""

import os
import subprocess
import sys
import time

import pytest

from bessemer.report.run_report import build_report, read_metrics
from tests.distributed.test_two_node import free_port

FAKE_PYNVML = '''"""A driver with two busy GPUs; GPU 1 is hot and slow."""
import types


class NVMLError(Exception):
    pass


NVML_NVLINK_MAX_LINKS = 0


def nvmlInit():
    pass


def nvmlShutdown():
    pass


def nvmlDeviceGetCount():
    return 2


def nvmlDeviceGetHandleByIndex(index):
    return index


def nvmlDeviceGetClockInfo(handle, clock):
    return (1980, 1100)[handle]


def nvmlDeviceGetMaxClockInfo(handle, clock):
    return 1980


def nvmlDeviceGetCurrentClocksEventReasons(handle):
    return (0, 0x40)[handle]  # HwThermalSlowdown on GPU 1


def nvmlDeviceGetUtilizationRates(handle):
    return types.SimpleNamespace(gpu=99)
'''

COMMON = ["configs/debug.toml", "--train.steps=10", "--train.global_batch=4", "--train.micro_batch=1",
          "--train.seq_len=32", "--metrics.tensorboard=false", "--metrics.peak_tflops=1",
          "--metrics.telemetry_period_s=0.05", "--metrics.throttle_samples=2", "--parallel.timeout_s=60",
          "--metrics.runtime_checks=true"]


def two_nodes(run, fake_driver_dir) -> None:
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    hot = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(fake_driver_dir), env.get("PYTHONPATH")]))}
    procs = []
    for node, node_env in ((0, env), (1, hot)):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=2",
               f"--node-rank={node}", "--rdzv-backend=static", "--master-addr=127.0.0.1", f"--master-port={port}",
               "-m", "bessemer.cli", "train", *COMMON, f"--run.dir={run}"]
        with open(run.parent / f"node{node}.log", "w") as log:
            procs.append(subprocess.Popen(cmd, env=node_env, stdout=log, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + 120
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.05)
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    logs = "".join((run.parent / f"node{i}.log").read_text()[-3000:] for i in range(2))
    assert all(p.returncode == 0 for p in procs), logs


@pytest.mark.distributed
def test_a_throttled_gpu_on_node_1_reaches_rank_0s_metrics_and_the_report(tmp_path):
    fake = tmp_path / "fake_driver"
    fake.mkdir()
    (fake / "pynvml.py").write_text(FAKE_PYNVML)
    run = tmp_path / "R"
    two_nodes(run, fake)
    records, events = read_metrics(run / "metrics.jsonl")
    assert len(records) == 10
    # Rank 0's node has no driver: its own samples carry no GPUs, so the alert came from node 1.
    assert not any(e.get("gpus") for e in events if e["event"] == "telemetry")
    alerts = [e for e in events if e["event"] == "alert" and e["kind"] != "runtime_check"]
    assert [(a["kind"], a["node"], a["source_rank"], a["gpu"]) for a in alerts] == [("throttle", 1, 2, 1)], alerts
    assert "HwThermalSlowdown" in alerts[0]["reasons"] and alerts[0]["message"].startswith("node 1 (")
    assert "alert throttle on" in (run / "logs" / "rank2.log").read_text()  # node 1's own stderr says it too
    # The start-up runtime checks swept the CPU sizes over both nodes, with no planner figure on gloo.
    busbw = {e["id"]: e["evidence"] for e in events if e["event"] == "runtime_check" and ".busbw." in e["id"]}
    assert set(busbw) == {"runtime.busbw.dp_shard", "runtime.busbw.world"}, busbw
    assert "1 MiB" in busbw["runtime.busbw.world"] and "4 MiB" in busbw["runtime.busbw.world"]
    assert "16 MiB" in busbw["runtime.busbw.world"] and "CPU (gloo)" in busbw["runtime.busbw.world"]
    html = build_report(run).read_text()
    assert "<h2>Alerts</h2>" in html and f"node 1 ({alerts[0]['host']}), GPU 1" in html
