"""One way to run independent jobs: `runner.map(fn, jobs) -> results`, on local processes or on Ray.

Everything in curation that fans out goes through a runner: the executor's shard jobs and a global step's
jobs (dedup's per-shard and per-band stages get `runner.map` as their `map_jobs`). A job is one picklable
value; `fn` is a module-level function (a worker imports it by name) that takes the job and returns a
picklable result. `map` returns the results in job order and hands each to `on_done` as it finishes (in
completion order), so a caller can show progress.

    LocalRunner(workers)         1 worker: in this process, one job after another; more: a pool of spawned
                                 processes (kept for all the maps of a run when used as a context manager)
    RayRunner(address, ...)      one Ray task per job; joins the cluster at `address` (HOST:PORT of a running
                                 head, "auto", "ray://...") or starts a local Ray with `workers` CPUs

A job that raises fails the map with `JobFailed`, whose message names the job (`shard part-00003 of 8
(output.dir ...)`, or the function and job number) and the original error; the jobs not yet started are
cancelled, the running ones finish. An interruption (KeyboardInterrupt, also raised by `on_done`) stops the
local workers at once. Jobs write their files atomically with their completion markers last
(bessemer/data/io.py), so the next run resumes where this one stopped, whichever runner ran it.

Ray tasks declare `Resources` (CPUs and memory, `[executor] task_cpus`, `task_memory_mb`); Ray schedules a
task only on a node with that much free, so a large dedup stage does not overcommit a node's memory. A
request no node can satisfy is an error here, not a task that waits forever. Ray is imported only when a
RayRunner opens (it costs about half a second and does not load torch).
"""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Self

from bessemer.errors import BessemerError

if TYPE_CHECKING:
    from bessemer.data.pipeline_toml import ExecutorConfig

RAY_MISSING = "the Ray executor needs ray: pip install 'ray[default]' (or plain 'ray')"


@dataclass(frozen=True)
class Resources:
    """What one task needs. Ray schedules by them; the local runner runs `workers` jobs at once regardless."""

    cpus: float = 1.0
    memory_mb: int = 1024  # 0 = declare none


class JobFailed(BessemerError):
    """A job raised (or its worker died); the message names the job and the error."""

    def __init__(self, name: str, error: str, remote_traceback: str = ""):
        super().__init__(f"{name} failed: {error}")
        self.job = name
        self.remote_traceback = remote_traceback


class _RemoteTraceback(Exception):
    """The traceback of a job that failed in another process, chained to its JobFailed as the cause."""

    def __str__(self) -> str:
        return self.args[0]


class Runner(Protocol):
    def map(self, fn: Callable[[Any], Any], jobs: Sequence, on_done: Callable[[Any], None] | None = None,
            names: Sequence[str] | None = None, resources: Resources | None = None) -> list: ...


def job_name(fn: Callable, jobs: Sequence, i: int, names: Sequence[str] | None) -> str:
    if names is not None:
        return names[i]
    return f"job {i + 1} of {len(jobs)} of {getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}"


def _error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _call(fn: Callable, job: Any) -> tuple[bool, Any, str]:
    """In a pool worker: (True, result, "") or (False, error text, traceback). Errors travel as text, since not
    every exception pickles."""
    try:
        return True, fn(job), ""
    except Exception as e:  # noqa: BLE001 - any error of a job is reported, with the job named, by the parent
        return False, _error_text(e), traceback.format_exc()


def _apply(fn: Callable, job: Any) -> Any:
    """A Ray task's body (Ray wants a Python function; `fn` may be a builtin, and travels by reference)."""
    return fn(job)


class LocalRunner:
    """In this process for one worker (or one job), else a pool of `workers` spawned processes. As a context
    manager it keeps one pool for every map inside the block (a pipeline's stages), instead of starting one
    per map."""

    def __init__(self, workers: int = 1):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers
        self._held = False
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> Self:
        self._held = True
        return self

    def __exit__(self, *exc) -> None:
        self._held = False
        self._close_pool()

    def _close_pool(self, stop_running: bool = False) -> None:
        if self._pool is not None:
            if stop_running:  # Python 3.14 has Executor.terminate_workers() for this
                for process in list((self._pool._processes or {}).values()):
                    process.terminate()
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def map(self, fn: Callable[[Any], Any], jobs: Sequence, on_done: Callable[[Any], None] | None = None,
            names: Sequence[str] | None = None, resources: Resources | None = None) -> list:
        jobs = list(jobs)
        results: list = [None] * len(jobs)
        if self.workers <= 1 or len(jobs) <= 1:
            for i, job in enumerate(jobs):
                try:
                    results[i] = fn(job)
                except Exception as e:  # KeyboardInterrupt and SystemExit pass through unchanged
                    raise JobFailed(job_name(fn, jobs, i, names), _error_text(e)) from e
                if on_done is not None:
                    on_done(results[i])
            return results
        if self._pool is None:
            size = self.workers if self._held else min(self.workers, len(jobs))
            self._pool = ProcessPoolExecutor(size, mp_context=multiprocessing.get_context("spawn"))
        pending = {self._pool.submit(_call, fn, job): i for i, job in enumerate(jobs)}
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in sorted(done, key=pending.__getitem__):
                    i = pending.pop(fut)
                    try:
                        ok, value, tb = fut.result()
                    except BrokenProcessPool:
                        raise JobFailed(job_name(fn, jobs, i, names), "its worker process died (killed, or out of "
                                        "memory); rerun to resume") from None
                    if not ok:
                        raise JobFailed(job_name(fn, jobs, i, names), value, tb) from _RemoteTraceback(tb)
                    results[i] = value
                    if on_done is not None:
                        on_done(value)
        except BaseException as e:
            for fut in pending:
                fut.cancel()
            # A failed job: the jobs already running finish. An interruption (Ctrl-C, or on_done raising
            # KeyboardInterrupt): they stop now, as a resumable job allows, instead of running to their end (and
            # a worker would start the next job already queued to it). A broken pool is not reused.
            self._close_pool(stop_running=not isinstance(e, Exception))
            raise
        finally:
            if not self._held:
                self._close_pool()
        return results


def local_map_jobs(workers: int = 1) -> Callable[[Callable, list], list]:
    """A `map_jobs(fn, jobs) -> results` on `workers` local processes, for code run outside a pipeline (a global
    step's stages called directly)."""
    return LocalRunner(workers).map


def _check_reachable(address: str) -> None:
    """A HOST:PORT nobody listens on is an error now; Ray itself would retry for minutes."""
    host, sep, port = address.rpartition(":")
    if not sep or "://" in address or not port.isdigit():
        return  # "auto", "ray://...": Ray resolves those
    import socket

    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except OSError as e:
        raise BessemerError(f"no Ray head answers at {address} ({e.strerror or e}); start one there with `ray start "
                            f"--head --port {port}`, or check --address / executor.address") from None


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ImportError(RAY_MISSING) from None
    return ray


class RayRunner:
    """Jobs as Ray tasks. Use as a context manager: it joins `address` (or starts a local Ray with `workers`
    CPUs) on entry and disconnects on exit; inside an already initialized Ray it uses that one as it is."""

    def __init__(self, address: str = "", workers: int = 1, resources: Resources = Resources()):
        self.address = address
        self.workers = workers
        self.resources = resources
        self._owned = False

    def __enter__(self) -> Self:
        ray = _import_ray()
        if not ray.is_initialized():
            import logging

            if self.address:
                _check_reachable(self.address)
                try:
                    ray.init(address=self.address, logging_level=logging.WARNING)
                except ConnectionError as e:
                    raise BessemerError(f"cannot join the Ray cluster at {self.address} ({e}); is `ray start "
                                        "--head` running there, and does this machine reach it?") from None
            else:
                ray.init(num_cpus=self.workers, include_dashboard=False, logging_level=logging.WARNING)
            self._owned = True
        return self

    def __exit__(self, *exc) -> None:
        if self._owned:
            _import_ray().shutdown()
            self._owned = False

    def _check_feasible(self, res: Resources) -> None:
        """Fail now, naming the setting, when no node could ever run a task (Ray would wait forever)."""
        ray = _import_ray()
        nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
        cpus = max((n.get("CPU", 0.0) for n in nodes), default=0.0)
        mem_mb = max((n.get("memory", 0.0) for n in nodes), default=0.0) / (1 << 20)
        where = f"the Ray cluster at {self.address}" if self.address else "the local Ray"
        if res.cpus > cpus:
            raise BessemerError(f"executor.task_cpus = {res.cpus}: no node of {where} has that many CPUs "
                                f"(largest: {cpus:g}); lower it")
        if res.memory_mb > mem_mb:
            raise BessemerError(f"executor.task_memory_mb = {res.memory_mb}: no node of {where} has that much "
                                f"memory for tasks (largest: {mem_mb:,.0f} MB); lower it")

    def map(self, fn: Callable[[Any], Any], jobs: Sequence, on_done: Callable[[Any], None] | None = None,
            names: Sequence[str] | None = None, resources: Resources | None = None) -> list:
        jobs = list(jobs)
        if not jobs:
            return []
        if not _import_ray().is_initialized():  # a map outside `with runner:` gets its own session
            with self:
                return self.map(fn, jobs, on_done, names, resources)
        return self._map(fn, jobs, on_done, names, resources or self.resources)

    def _map(self, fn: Callable[[Any], Any], jobs: list, on_done: Callable[[Any], None] | None,
             names: Sequence[str] | None, res: Resources) -> list:
        ray = _import_ray()
        self._check_feasible(res)
        # An exception in a job fails the run (retry_exceptions off: the next run resumes there); a worker
        # process or node that dies is retried by Ray (max_retries), which is safe because every job writes
        # its files atomically and its completion marker last.
        options: dict = {"num_cpus": res.cpus, "max_retries": 3, "retry_exceptions": False}
        if res.memory_mb:
            options["memory"] = res.memory_mb << 20
        task = ray.remote(**options)(_apply)
        index = {ref: i for i, ref in enumerate(task.remote(fn, job) for job in jobs)}
        pending = list(index)
        results: list = [None] * len(jobs)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                i = index[ready[0]]
                try:
                    results[i] = ray.get(ready[0])
                except ray.exceptions.RayTaskError as e:
                    cause = getattr(e, "cause", None)
                    error = _error_text(cause) if cause is not None else str(e).splitlines()[-1]
                    raise JobFailed(job_name(fn, jobs, i, names), error, str(e)) from _RemoteTraceback(str(e))
                except ray.exceptions.RayError as e:  # worker or node lost after its retries
                    raise JobFailed(job_name(fn, jobs, i, names), _error_text(e)) from None
                if on_done is not None:
                    on_done(results[i])
        finally:
            for ref in pending:  # on a shared cluster, don't leave the rest of a failed run running
                ray.cancel(ref)
        return results


@contextmanager
def open_runner(executor: ExecutorConfig) -> Iterator[Runner]:
    """The runner of a pipeline's `[executor]` section, open for the length of a run (one Ray session across
    all of a pipeline's stages: starting or joining costs seconds)."""
    if executor.kind == "ray":
        res = Resources(cpus=executor.task_cpus, memory_mb=executor.task_memory_mb)
        with RayRunner(executor.address, executor.workers, res) as runner:
            yield runner
    else:
        with LocalRunner(executor.workers) as runner:
            yield runner
