"""How fast `plan` searches layouts: a full search over 16,384 GPUs (llama3-405b) against the 512-GPU search
(llama3-70b) measured in the same run. The issue's bar: the 16,384-GPU search in < 2 s.

A search enumerates layouts (most of the 16,384-GPU ones are rejected there by a divisibility or batch check,
at a few µs each) and models the valid ones: a memory estimate and a step time each, plus the memory
estimates of the partial-recompute solve (search.fewest_recomputed_layers) for the layouts that need it. So
the time follows the enumerated layouts and the memory estimates, not the cluster size; time per enumerated
layout differs between the two searches only because they reject different shares.

Ends with `ratio plan_search_16384_vs_512_per_memory_estimate X`: the search time left after enumeration,
per memory estimate, large / small (about 1 when modeling a layout costs the same at 16,384 GPUs).
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bessemer.plan import search as search_module  # noqa: E402
from bessemer.plan.catalog import get_gpu, get_network  # noqa: E402
from bessemer.plan.search import Job, Pins, layouts, search  # noqa: E402
from bessemer.plan.throughput import Cluster  # noqa: E402
from bessemer.plan.workload import resolve_arch  # noqa: E402


def best_of(fn, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def counts(job: Job) -> dict:
    """Enumerated, valid and partial-recompute layouts, and memory estimates, from an untimed pass."""
    rows = list(layouts(job, Pins()))
    estimates = 0
    original = search_module.memory_per_gpu

    def counted(*args, **kwargs):
        nonlocal estimates
        estimates += 1
        return original(*args, **kwargs)

    search_module.memory_per_gpu = counted
    try:
        search(job)
    finally:
        search_module.memory_per_gpu = original
    return {"enumerated": len(rows), "valid": sum(1 for _, problem, _ in rows if not problem),
            "partial": sum(1 for _, problem, partial in rows if not problem and partial), "estimates": estimates}


def measure(model: str, gpus: int, batch: int) -> dict:
    arch = resolve_arch(model, 0, 0, 0, 0, 0, 0)
    job = Job(arch, 8192, batch, 15e12, Cluster(get_gpu("h100-sxm"), gpus, 8, "nvlink", get_network("roce-400")),
              2.5)
    total = best_of(lambda: search(job))
    enumerate_s = best_of(lambda: sum(1 for _ in layouts(job, Pins())))
    n = counts(job)
    modeling = max(total - enumerate_s, 0.0)
    print(f"search {gpus:,} GPUs ({model}): {total * 1e3:7.1f} ms (bar: < 2000 ms) — {n['enumerated']:,} layouts "
          f"enumerated in {enumerate_s * 1e3:.1f} ms, {n['valid']:,} valid ({n['partial']:,} of them solved for "
          f"partial recompute), {n['estimates']:,} memory estimates: {modeling / n['estimates'] * 1e6:.1f} us per "
          f"estimate (with its share of step times)")
    return {"per_estimate": modeling / n["estimates"]}


small = measure("llama3-70b", 512, 512)
large = measure("llama3-405b", 16384, 2048)
print("ratio = (search − enumeration) per memory estimate, 16,384 GPUs / 512 GPUs (about 1: modeling a layout "
      "costs the same on the larger cluster)")
print(f"ratio plan_search_16384_vs_512_per_memory_estimate {large['per_estimate'] / small['per_estimate']:.3f}")
