"""On Ray the executor writes the same files as the local one (byte for byte), resumes, and conserves documents:
on a local Ray it starts itself, and on a two-node cluster joined with `bessemer data run --address HOST:PORT`,
global stages included."""

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from bessemer.data.phases import run_pipeline
from bessemer.data.pipeline_toml import Pipeline
from tests.unit.data.test_pipeline import shard_files, write_inputs

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
STEPS = [{"name": "normalize"}, {"name": "pii", "action": "mask"}]


def make(tmp_path, out: str, steps=STEPS, **executor) -> Pipeline:
    return Pipeline.from_dict({
        "input": {"paths": [str(tmp_path / "in")], "format": "jsonl"},
        "steps": [dict(s) for s in steps],
        "executor": {"shards": 3, "task_memory_mb": 128, **executor},  # small: CI machines have little memory
        "output": {"dir": str(tmp_path / out), "format": "jsonl.zst"},
    })


def counts(s: dict) -> list:  # everything but the timings
    return [{k: v for k, v in st.items() if k != "seconds"} for st in s["steps"]]


def test_starts_and_stops_its_own_local_ray(tmp_path):
    # runs before the module fixture starts Ray: the executor starts one with `workers` CPUs, then stops it
    assert not ray.is_initialized()
    write_inputs(tmp_path / "in", n_files=2, per_file=10)
    stats = run_pipeline(make(tmp_path, "out", kind="ray", workers=2))
    assert stats["complete"] and stats["conserved"] and stats["docs_in"] == 20
    assert not ray.is_initialized()


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()


def test_local_and_ray_write_identical_shards(tmp_path, local_ray):
    write_inputs(tmp_path / "in", n_files=5)
    local = run_pipeline(make(tmp_path, "local", kind="local", workers=1))
    on_ray = run_pipeline(make(tmp_path, "ray", kind="ray", workers=2))
    for stats in (local, on_ray):
        assert stats["complete"] and stats["conserved"]
        assert stats["docs_in"] == stats["docs_out"] + stats["docs_rejected"] == 150
    assert shard_files(tmp_path / "local") == shard_files(tmp_path / "ray")
    assert len(shard_files(tmp_path / "ray")) == 3
    assert shard_files(tmp_path / "local" / "rejected") == shard_files(tmp_path / "ray" / "rejected")
    assert counts(local) == counts(on_ray)
    written = json.loads((tmp_path / "ray" / "stats.json").read_text())
    assert written["conserved"] and written["shards"] == 3


def test_ray_resumes_and_skips_done_shards(tmp_path, local_ray):
    write_inputs(tmp_path / "in", n_files=4)
    partial = run_pipeline(make(tmp_path, "out", kind="ray", workers=2), limit_shards=1)
    assert partial["complete"] is False and partial["shards_done"] == 1
    marker = tmp_path / "out" / "stats" / "part-00000.json"
    before = marker.stat().st_mtime_ns
    full = run_pipeline(make(tmp_path, "out", kind="ray", workers=2))
    assert full["complete"] and full["conserved"] and full["shards"] == 3
    assert marker.stat().st_mtime_ns == before  # the finished shard was not run again
    # a shard finished by the local executor counts as done for the Ray one and vice versa
    again = run_pipeline(make(tmp_path, "out", kind="local"))
    assert again["docs_out"] == full["docs_out"]


def test_address_only_with_ray(tmp_path):
    from bessemer.errors import ConfigError

    write_inputs(tmp_path / "in", n_files=1)
    with pytest.raises(ConfigError, match="executor.address"):
        make(tmp_path, "out", kind="local", address="auto")
    with pytest.raises(ConfigError, match="executor.task_memory_mb: must be >= 0"):
        make(tmp_path, "out", kind="ray", task_memory_mb=-1)


# --- a two-node cluster on this machine ----------------------------------------------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_started(procs: list[subprocess.Popen], root: Path) -> None:
    """Kill what this test started: each `ray start --block` runs in its own session, so its process group holds
    the node's processes; anything that left the group still names the test's own temp dir on its command line."""
    import psutil

    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(timeout=30)
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if any(str(root) in arg for arg in proc.info["cmdline"] or []):
                proc.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass


@pytest.fixture
def ray_cluster():
    """A head and a second node, one CPU each, on 127.0.0.1, with token authentication; yields (address, env for
    a driver). Started with `ray start --block` in sessions of their own and killed by process group at the end
    (`ray stop` would stop every Ray of this user)."""
    exe = Path(sys.executable).with_name("ray")
    if not exe.exists():
        pytest.skip("the `ray` command is not installed next to this Python")
    root = Path(tempfile.mkdtemp(prefix="bray", dir="/tmp"))  # short: Ray's unix sockets live under it
    token = root / "token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token), RAY_USAGE_STATS_ENABLED="0",
               PYTHONPATH=os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    port = _free_port()
    address = f"127.0.0.1:{port}"
    common = ["--block", "--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--disable-usage-stats",
              "--temp-dir", str(root / "t"), "--object-store-memory", str(80 << 20), "--memory", str(2 << 30)]
    procs: list[subprocess.Popen] = []
    try:
        for i, args in enumerate([["--head", "--port", str(port), "--include-dashboard", "false"],
                                  ["--address", address]]):
            log = root / f"node{i}.log"
            with open(log, "wb") as out:
                procs.append(subprocess.Popen([str(exe), "start", *args, *common], stdout=out,
                                              stderr=subprocess.STDOUT, env=env, start_new_session=True))
            deadline = time.monotonic() + 120
            while b"will now block" not in log.read_bytes():
                if procs[-1].poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"ray start (node {i}) did not come up:\n{log.read_text()[-3000:]}")
                time.sleep(0.2)
        yield address, env
    finally:
        _kill_started(procs, root)
        shutil.rmtree(root, ignore_errors=True)


NODES = textwrap.dedent("""
    import sys, time, ray
    ray.init(address=sys.argv[1])
    deadline = time.monotonic() + 60
    while sum(n["Alive"] for n in ray.nodes()) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    print(sum(n["Alive"] for n in ray.nodes()))
""")


@pytest.mark.distributed
def test_two_node_cluster_joined_with_address_writes_what_local_writes(tmp_path, ray_cluster):
    address, env = ray_cluster
    nodes = subprocess.run([sys.executable, "-c", NODES, address], env=env, capture_output=True, text=True,
                           timeout=120, check=False)
    assert nodes.stdout.split()[-1:] == ["2"], nodes.stdout + nodes.stderr

    write_inputs(tmp_path / "in", n_files=2, per_file=10)
    dup = json.dumps({"text": "the same document in both files, written twice to be found by dedup"})
    for f in ("f0.jsonl", "f1.jsonl"):
        with open(tmp_path / "in" / f, "a") as fh:
            fh.write(dup + "\n")
    steps = [*STEPS, {"name": "dedup"}]
    local = run_pipeline(make(tmp_path, "local", steps=steps, shards=2))
    toml = tmp_path / "cluster.toml"
    toml.write_text(textwrap.dedent(f"""
        [input]
        paths = ["{tmp_path / 'in'}"]
        [[steps]]
        name = "normalize"
        [[steps]]
        name = "pii"
        action = "mask"
        [[steps]]
        name = "dedup"
        [executor]
        shards = 2
        task_memory_mb = 256
        [output]
        dir = "{tmp_path / 'cluster'}"
        format = "jsonl.zst"
    """))
    run = subprocess.run([sys.executable, "-m", "bessemer.cli", "data", "run", str(toml), "--address", address,
                          "--no-report"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    on_cluster = json.loads((tmp_path / "cluster" / "stats.json").read_text())
    assert on_cluster["complete"] and on_cluster["conserved"]
    assert "dedup.exact_duplicate" in on_cluster["rejected"]
    assert counts(on_cluster) == counts(local)
    assert shard_files(tmp_path / "cluster") == shard_files(tmp_path / "local")
    rejected = lambda out: {str(p.relative_to(out)): p.read_bytes() for p in sorted((out / "rejected").rglob("*.zst"))}
    assert rejected(tmp_path / "cluster") == rejected(tmp_path / "local")
