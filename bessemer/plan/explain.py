"""Why the winning layout wins and why the obvious alternatives lose, in sentences. No torch."""

from bessemer.plan.footprint import GIB
from bessemer.plan.search import Candidate, Job, SearchResult

PARTS = {"compute": "compute", "tp_comm": "tensor-parallel collectives", "pp_p2p": "pipeline sends",
         "pp_bubble": "the pipeline bubble", "dp_exposed": "data-parallel communication left exposed"}


def _shares(c: Candidate) -> dict[str, float]:
    b = c.as_dict()["breakdown_s"]
    return {k: v / c.time.step_s for k, v in b.items()}


def _describe(c: Candidate) -> str:
    lay = c.layout
    sched = f", {lay.schedule}" + (f" x{lay.virtual}" if lay.virtual > 1 else "") if lay.pp > 1 else ""
    return (f"tp {lay.tp}, pp {lay.pp}{sched}, dp {lay.dp_replicate}x{lay.dp_shard} (replicate x shard), "
            f"micro-batch {lay.micro_batch}, recompute {lay.recompute}")


def _why_slower(alt: Candidate, best: Candidate) -> str:
    """The part of the step that grew the most, in seconds per step."""
    a, b = alt.as_dict()["breakdown_s"], best.as_dict()["breakdown_s"]
    part = max(a, key=lambda k: a[k] - b[k])
    why = f"{PARTS[part]} {a[part]:.2f} s vs {b[part]:.2f} s per step"
    if part == "compute" and alt.layout.recompute != best.layout.recompute:
        why += f" (recompute {alt.layout.recompute}: with less model parallelism it fits only by recomputing)"
    return why


def explain(result: SearchResult, job: Job) -> list[str]:
    best, cl = result.best, job.cluster
    lay = best.layout
    sh = _shares(best)
    link = "PCIe" if cl.intra == "pcie" else cl.gpu.link
    lines = [f"Best: {_describe(best)} — {best.time.step_s:.2f} s per step, MFU {best.time.mfu:.1%}, "
             f"{best.memory['total'] / GIB:.1f} of {cl.gpu.memory_gb:g} GiB per GPU."]
    parts = ", ".join(f"{PARTS[k]} {v:.0%}" for k, v in sh.items() if v >= 0.005)
    lines.append(f"Step time: {parts}.")
    if lay.tp > 1:
        where = "within a node" if lay.tp <= cl.gpus_per_node else "across nodes"
        lines.append(f"tp {lay.tp} stays {where}: its all-reduces run over {link} "
                     f"({cl.intra_gbs:g} GB/s per GPU per direction) and cost {sh['tp_comm']:.0%} of the step.")
    else:
        lines.append("tp 1: no tensor-parallel collectives; the model states are sharded by FSDP instead"
                     + (f" (tensor parallelism over {link} at {cl.intra_gbs:g} GB/s would cost more than it "
                        f"saves)" if cl.intra == "pcie" else "") + ".")
    ranked = result.ranked
    for attr, label in (("tp", "tp"), ("pp", "pp"), ("recompute", "recompute")):
        value = getattr(lay, attr)
        others: dict = {}
        for c in ranked:
            v = getattr(c.layout, attr)
            if v != value:
                others.setdefault(v, c)
        for v, alt in sorted(others.items(), key=lambda kv: kv[1].time.step_s)[:3]:
            ratio = alt.time.step_s / best.time.step_s
            lines.append(f"  {label} {v}: best such layout ({_describe(alt)}) is {ratio:.2f}x slower — "
                         f"{_why_slower(alt, best)}.")
        tried = {getattr(c.layout, attr) for c in ranked}
        if attr == "tp":
            missing = [t for t in (1, 2, 4, 8) if t not in tried and cl.gpus % t == 0]
            if missing:
                lines.append(f"  tp {', '.join(map(str, missing))}: no valid layout fits in memory or divides "
                             f"the model.")
    if result.rejected:
        top = "; ".join(f"{n:,} x {r}" for r, n in result.rejected.most_common(4))
        lines.append(f"Rejected {sum(result.rejected.values()):,} of {result.evaluated:,} layouts: {top}.")
    return lines
