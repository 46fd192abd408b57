"""The runner: one map-over-jobs interface; in-process, a process pool and Ray give the same results in job
order, and a failing job surfaces with its name. The job functions are stdlib ones, so every worker (a spawned
process, a Ray worker) imports them without this test module."""

import math
import os
import time

import pytest

from bessemer.data.runner import (
    JobFailed,
    LocalRunner,
    RayRunner,
    Resources,
    local_map_jobs,
)
from bessemer.errors import BessemerError

JOBS = [3, 0, 7, 5, 1]
WANT = [math.factorial(n) for n in JOBS]


@pytest.mark.parametrize("workers", [1, 2])
def test_local_results_in_job_order_and_on_done_for_each(workers):
    seen = []
    assert LocalRunner(workers).map(math.factorial, JOBS, on_done=seen.append) == WANT
    assert sorted(seen) == sorted(WANT)
    assert local_map_jobs(workers)(math.factorial, JOBS) == WANT
    assert LocalRunner(workers).map(math.factorial, []) == []


@pytest.mark.parametrize("workers", [1, 2])
def test_a_failing_job_is_named(workers):
    with pytest.raises(JobFailed, match=r"^shard b failed: ValueError: math domain error$") as e:
        LocalRunner(workers).map(math.sqrt, [4.0, -1.0, 9.0], names=["shard a", "shard b", "shard c"])
    assert e.value.job == "shard b" and isinstance(e.value, BessemerError)
    assert "math domain error" in str(e.value.__cause__)  # the original error, or the worker's traceback
    # without names: the function and the job's number
    with pytest.raises(JobFailed, match=r"job 2 of 2 of math\.sqrt failed: ValueError"):
        LocalRunner(workers).map(math.sqrt, [1.0, -1.0])


def test_a_held_pool_serves_every_map_and_survives_a_failed_one():
    with LocalRunner(2) as runner:
        assert runner.map(math.factorial, JOBS) == WANT
        with pytest.raises(JobFailed):
            runner.map(math.sqrt, [1.0, -1.0])
        assert runner.map(math.factorial, JOBS) == WANT
    assert runner._pool is None


def test_a_worker_that_dies_fails_the_map_with_the_job_named():
    with pytest.raises(JobFailed, match=r"exit-job failed: its worker process died"):
        LocalRunner(2).map(os._exit, [3, 3], names=["exit-job", "exit-job"])


def test_keyboard_interrupt_in_process_passes_through():
    def stop(_):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        LocalRunner(1).map(stop, [1])


def test_an_interruption_stops_the_running_jobs_at_once():
    def stop(_):
        raise KeyboardInterrupt

    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):  # the first job ends at once; the other would sleep a minute
        LocalRunner(2).map(time.sleep, [0, 60], on_done=stop)
    assert time.monotonic() - start < 30


@pytest.mark.slow
def test_ray_runner_matches_local_and_names_failures():
    ray = pytest.importorskip("ray")
    assert not ray.is_initialized()
    with RayRunner(workers=2, resources=Resources(cpus=1, memory_mb=64)) as runner:
        seen = []
        assert runner.map(math.factorial, JOBS, on_done=seen.append) == LocalRunner(2).map(math.factorial, JOBS)
        assert sorted(seen) == sorted(WANT)
        with pytest.raises(JobFailed, match=r"^shard b failed: ValueError: math domain error$"):
            runner.map(math.sqrt, [4.0, -1.0], names=["shard a", "shard b"])
        # a request no node can meet is an error naming the setting, not a task that waits forever
        with pytest.raises(BessemerError, match=r"executor.task_cpus = 64: no node .* has that many CPUs"):
            runner.map(math.factorial, [1], resources=Resources(cpus=64))
        with pytest.raises(BessemerError, match=r"executor.task_memory_mb = 1073741824: no node"):
            runner.map(math.factorial, [1], resources=Resources(memory_mb=1 << 30))
    assert not ray.is_initialized()  # the runner started that Ray, so it stopped it


def test_an_address_nobody_listens_on_is_a_clear_error(tmp_path):
    pytest.importorskip("ray")
    import socket

    from bessemer.cli import main

    with socket.socket() as s:  # a port that was free a moment ago
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(BessemerError, match=rf"no Ray head answers at 127.0.0.1:{port}"):
        RayRunner(address=f"127.0.0.1:{port}").__enter__()
    (tmp_path / "in.jsonl").write_text('{"text": "a"}\n')
    toml = tmp_path / "p.toml"
    toml.write_text(f'[input]\npaths = ["{tmp_path / "in.jsonl"}"]\n[output]\ndir = "{tmp_path / "out"}"\n')
    assert main(["data", "run", str(toml), "--address", f"127.0.0.1:{port}"]) == 2
