"""How fast `plan` searches layouts: a full search over 16,384 GPUs (llama3-405b) against the 512-GPU search
(llama3-70b) measured in the same run, per layout evaluated. The issue's bar: the 16,384-GPU search in < 2 s.

Ends with `ratio plan_search_16384_vs_512_per_layout X` (time per evaluated layout, large / small; ~1 means
the cost grows only with the number of layouts, not with the cluster).
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bessemer.plan.catalog import get_gpu, get_network  # noqa: E402
from bessemer.plan.search import Job, search  # noqa: E402
from bessemer.plan.throughput import Cluster  # noqa: E402
from bessemer.plan.workload import resolve_arch  # noqa: E402


def timed(model: str, gpus: int, batch: int, repeats: int = 5) -> tuple[float, int]:
    arch = resolve_arch(model, 0, 0, 0, 0, 0, 0)
    job = Job(arch, 8192, batch, 15e12, Cluster(get_gpu("h100-sxm"), gpus, 8, "nvlink", get_network("roce-400")),
              2.5)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = search(job)
        best = min(best, time.perf_counter() - t0)
    return best, result.evaluated


small, n_small = timed("llama3-70b", 512, 512)
large, n_large = timed("llama3-405b", 16384, 2048)
print(f"search 512 GPUs (llama3-70b):    {small * 1e3:8.1f} ms, {n_small:,} layouts, "
      f"{small / n_small * 1e6:.1f} us/layout")
print(f"search 16,384 GPUs (llama3-405b): {large * 1e3:8.1f} ms, {n_large:,} layouts, "
      f"{large / n_large * 1e6:.1f} us/layout   (bar: < 2000 ms)")
print("ratio = time per layout at 16,384 GPUs / at 512 GPUs (about 1: cost follows the layout count)")
print(f"ratio plan_search_16384_vs_512_per_layout {large / n_large / (small / n_small):.3f}")
