"""Ray executor: the local executor's shards, run as one Ray task each (`[executor] kind = "ray"`).

Everything except *where* a shard runs is shared with `executor.py`: the shard assignment, the per-shard
function (`run_shard`), the completion markers (so a rerun skips finished shards, whichever executor wrote
them), the stats.json merge and the conservation check. Same input and steps, same shard files, byte for
byte, on either executor.

With `address` empty a local Ray is started with `workers` CPUs and shut down afterwards; with an address
("auto", "ray://head:10001") the run joins that cluster and each shard takes one CPU of it. On a cluster,
`input.paths`, `output.dir` and `output.rejected` must be visible from every node (shared filesystem or an
fsspec URL such as s3://), and bessemer (with the steps' extras) must be installed on the nodes.

`run_tasks` runs any module-level function over picklable jobs the same way (a global step's band and
shard jobs, bessemer/data/phases.py); `ray_session` keeps one Ray up across the stages of such a run.

Ray is imported only here, when a Ray run starts (importing it does not load torch, but it costs ~0.5 s).
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from bessemer.data.pipeline import ExecutorConfig

RAY_MISSING = "the Ray executor needs ray: pip install 'ray[default]' (or plain 'ray')"


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ImportError(RAY_MISSING) from None
    return ray


@contextmanager
def ray_session(config: ExecutorConfig) -> Iterator[None]:
    """Ray for the length of a run: joins an already initialized Ray as it is; otherwise starts (or connects
    to) one and shuts it down at the end. A pipeline with global steps holds one session over all phases."""
    ray = _import_ray()
    if ray.is_initialized():
        yield
        return
    import logging

    if config.address:
        ray.init(address=config.address, logging_level=logging.WARNING, log_to_driver=True)
    else:
        ray.init(num_cpus=config.workers, include_dashboard=False, logging_level=logging.WARNING)
    try:
        yield
    finally:
        ray.shutdown()


def run_tasks(fn: Callable, jobs: list, config: ExecutorConfig, on_done: Callable | None = None) -> None:
    """`fn(job)` for every job as a Ray task of one CPU; `on_done` gets each result as it finishes, in
    completion order. `fn` must be importable on the nodes (a module-level function)."""
    if not jobs:
        return
    ray = _import_ray()
    pending = []
    with ray_session(config):
        try:
            # An exception in a task fails the run (Ray does not retry application errors; the next run resumes
            # there); a worker process that dies is retried by Ray (max_retries), which is safe because every
            # job writes its files atomically and its completion marker last.
            task = ray.remote(num_cpus=1)(fn)
            pending = [task.remote(job) for job in jobs]
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                result = ray.get(ready[0])
                if on_done is not None:
                    on_done(result)
        finally:
            for ref in pending:  # on a shared cluster, don't leave the rest of a failed run running
                ray.cancel(ref)
