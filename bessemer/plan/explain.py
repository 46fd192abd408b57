"""Why the winning layout wins and why the obvious alternatives lose, in sentences. No torch."""

from dataclasses import replace

from bessemer.plan.footprint import GIB, recomputed_layers
from bessemer.plan.search import Candidate, Job, SearchResult, evaluate
from bessemer.plan.throughput import Layout
from bessemer.plan.workload import arch_flops_per_token

LIGHTEST_FIRST = ("none", "selective", "full")  # a layout's recompute modes by what they rebuild in backward
PARTS = {"compute": "compute", "tp_comm": "tensor-parallel collectives", "pp_p2p": "pipeline sends",
         "pp_bubble": "the pipeline bubble", "dp_exposed": "data-parallel communication left exposed",
         "cp_comm": "context-parallel K/V exchanges left exposed"}


def _shares(c: Candidate) -> dict[str, float]:
    b = c.as_dict()["breakdown_s"]
    return {k: v / c.time.step_s for k, v in b.items()}


def describe_layout(lay: Layout) -> str:
    """A layout in words, as the tables and the emitted config's `[plan]` name it."""
    sched = f", {lay.schedule}" + (f" x{lay.virtual}" if lay.virtual > 1 else "") if lay.pp > 1 else ""
    cp = f", cp {lay.cp}" if lay.cp > 1 else ""
    fp8 = ", fp8" if lay.fp8 else ""
    return (f"tp {lay.tp}, pp {lay.pp}{sched}{cp}, dp {lay.dp_replicate}x{lay.dp_shard} (replicate x shard), "
            f"micro-batch {lay.micro_batch}, {_recompute(lay)}{fp8}")


def _recompute(lay: Layout) -> str:
    layers = f" ({lay.recompute_layers} layers)" if lay.recompute == "full" and lay.recompute_layers else ""
    return f"recompute {lay.recompute}{layers}"


def _recomputes_more(a: Layout, b: Layout, n_layers: int) -> bool:
    """Whether `a` rebuilds more activations in backward than `b` (none < selective < full, then more layers)."""
    if a.recompute != b.recompute:
        return LIGHTEST_FIRST.index(a.recompute) > LIGHTEST_FIRST.index(b.recompute)
    return (recomputed_layers(n_layers, a.recompute, a.recompute_layers)
            > recomputed_layers(n_layers, b.recompute, b.recompute_layers))


def _compute_note(alt: Candidate, best: Candidate, job: Job) -> str:
    """Why the alternative's compute is longer when it recomputes more: whether it could do without (its own
    layout re-evaluated with the winner's recompute), and less model parallelism only when it has less."""
    la, lb = alt.layout, best.layout
    if not _recomputes_more(la, lb, job.arch.n_layers):
        return ""
    lighter = replace(la, recompute=lb.recompute, recompute_layers=lb.recompute_layers)
    need = evaluate(job, lighter, arch_flops_per_token(job.arch, job.seq_len)).memory["total"] / GIB
    have = job.capacity / GIB
    if need <= have:
        return f" ({_recompute(la)} runs part of the forward pass again in backward)"
    split_a, split_b = la.tp * la.pp * la.cp, lb.tp * lb.pp * lb.cp
    less = f"with less model parallelism (tp x pp x cp {split_a} vs {split_b}) " if split_a < split_b else ""
    return (f" ({_recompute(la)}: {less}it fits only by recomputing; with {_recompute(lighter)} it would need "
            f"{need:.1f} of the {have:.1f} GiB a layout may use)")


def _why_slower(alt: Candidate, best: Candidate, job: Job) -> str:
    """The part of the step that grew the most, in seconds per step (a part one layout lacks, such as the
    context-parallel exchanges without cp, counts as 0 s)."""
    a, b = alt.as_dict()["breakdown_s"], best.as_dict()["breakdown_s"]
    part = max(a, key=lambda k: a[k] - b.get(k, 0.0))
    why = f"{PARTS[part]} {a[part]:.2f} s vs {b.get(part, 0.0):.2f} s per step"
    if part == "compute":
        why += _compute_note(alt, best, job)
    return why


def explain(result: SearchResult, job: Job) -> list[str]:
    best, cl = result.best, job.cluster
    lay = best.layout
    sh = _shares(best)
    link = "PCIe" if cl.intra == "pcie" else cl.gpu.link
    lines = [f"Best: {describe_layout(best.layout)} — {best.time.step_s:.2f} s per step, MFU {best.time.mfu:.1%}, "
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
            lines.append(f"  {label} {v}: best such layout ({describe_layout(alt.layout)}) is {ratio:.2f}x slower — "
                         f"{_why_slower(alt, best, job)}.")
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
