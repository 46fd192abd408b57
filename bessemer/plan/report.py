"""What `bessemer plan` prints and writes: rich tables, the JSON document, the training config for the chosen
layout, the memory chart. No torch."""

import math
from pathlib import Path

from bessemer.errors import ConfigError
from bessemer.plan.explain import describe_layout
from bessemer.plan.fabric import FatTree
from bessemer.plan.footprint import GIB, model_state_bytes, recomputed_layers
from bessemer.plan.reliability import ReliabilityPlan
from bessemer.plan.search import Candidate, Job, SearchResult
from bessemer.plan.storage import StoragePlan
from bessemer.plan.throughput import Layout


def size(gb: float) -> str:
    """Bytes (given in GB) in the unit that keeps their digits: 12.5 GB, 410 MB, 52.4 kB (never "0.000 GB")."""
    for scale, unit in ((1.0, "GB"), (1e-3, "MB"), (1e-6, "kB")):
        if gb >= scale:
            v = gb / scale
            return f"{v:,.0f} {unit}" if v >= 100 else f"{v:.3g} {unit}"
    return f"{gb * 1e9:.3g} B"


def rate(gb_per_s: float) -> str:
    """A byte rate the same way: 12.5 GB/s, 410 MB/s, 52.4 kB/s."""
    return f"{size(gb_per_s)}/s"


def count(n: float) -> str:
    """A parameter count: 70.6B, 15.2M, 8.1k."""
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.3g}{unit}" if n < 100 * scale else f"{n / scale:,.0f}{unit}"
    return f"{n:.0f}"


def zero_table(job: Job, best: Candidate) -> list[dict]:
    """Model-state memory per GPU of the winner's model-parallel shard under plain DP and ZeRO 1/2/3 over
    its data-parallel degree (mixed-precision Adam, 16 bytes per parameter), for comparison."""
    params = job.arch.params() / (best.layout.tp * best.layout.pp)
    rows = []
    for zero, name in ((0, "DP"), (1, "ZeRO-1"), (2, "ZeRO-2"), (3, "ZeRO-3 / FSDP")):
        m = model_state_bytes(params, zero, best.layout.dp)
        rows.append({"sharding": name, **{k: round(v / GIB, 3) for k, v in m.items()}})
    return rows


def to_json(job: Job, result: SearchResult, fabric: FatTree | None, storage: StoragePlan,
            reliability: ReliabilityPlan, explanation: list[str], top: int) -> dict:
    cl = job.cluster
    return {
        "model": {"name": job.arch.name, "params": job.arch.params(), "dim": job.arch.dim,
                  "layers": job.arch.n_layers, "heads": job.arch.n_heads, "kv_heads": job.arch.n_kv_heads,
                  "ffn": job.arch.ffn_hidden, "vocab": job.arch.vocab_size},
        "cluster": {"gpu": cl.gpu.name, "gpus": cl.gpus, "gpus_per_node": cl.gpus_per_node, "intra_node": cl.intra,
                    "network": cl.network.name if cl.network else None, "price_per_gpu_hour": job.price_per_hour},
        "workload": {"seq_len": job.seq_len, "global_batch": job.global_batch, "tokens": job.tokens,
                     "objective": job.objective},
        "configs": [c.as_dict() for c in result.ranked[:top]],
        "evaluated": result.evaluated,
        "rejected": dict(result.rejected.most_common()),
        "explanation": explanation,
        "zero": zero_table(job, result.best),
        "fabric": fabric.as_dict() if fabric else None,
        "storage": storage.as_dict(),
        "reliability": reliability.as_dict(),
    }


def print_report(job: Job, result: SearchResult, fabric: FatTree | None, fabric_notes: list[str],
                 storage: StoragePlan, reliability: ReliabilityPlan, explanation: list[str], top: int) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(width=None if Console().is_terminal else 150)
    cl, arch = job.cluster, job.arch
    con.print(f"[bold]{arch.name}[/]: {count(arch.params())} parameters, {job.tokens:.3g} tokens of "
              f"{job.seq_len}, batch {job.global_batch} sequences — on {cl.gpus:,} x {cl.gpu.name} "
              f"({cl.gpus_per_node} per node, {'PCIe' if cl.intra == 'pcie' else cl.gpu.link} inside, "
              f"{cl.network.name if cl.network else 'no network'} between)")
    t = Table(title=f"best layouts of {result.evaluated:,} evaluated (ranked by {job.objective})")
    for col in ("#", "tp", "pp", "dp rep x shard", "mb", "recompute", "schedule", "GiB/GPU", "step s",
                "tokens/s", "TFLOP/s", "MFU", "days", "cost $"):
        t.add_column(col, justify="right")
    for i, c in enumerate(result.ranked[:top], 1):
        d = c.as_dict()
        t.add_row(str(i), str(d["tp"]), str(d["pp"]), f"{d['dp_replicate']}x{d['dp_shard']}", str(d["microbatch"]),
                  d["recompute"], d["schedule"] + (f" x{d['virtual_stages']}" if d["virtual_stages"] > 1 else ""),
                  f"{d['memory_gib_per_gpu']['total']:.1f}", f"{d['step_time_s']:.2f}", f"{d['tokens_per_s']:,.0f}",
                  f"{d['tflops_per_gpu']:.0f}", f"{d['mfu']:.1%}", f"{d['time_to_train_days']:.1f}",
                  f"{d['cost']:,.0f}")
    con.print(t)
    mem = Table(title="memory per GPU of the best layout (GiB)")
    m = result.best.as_dict()["memory_gib_per_gpu"]
    for k in m:
        mem.add_column(k, justify="right")
    mem.add_row(*(f"{v:.2f}" for v in m.values()))
    con.print(mem)
    z = Table(title=f"model states per GPU by sharding over dp = {result.best.layout.dp} (GiB)")
    for col in ("sharding", "params", "grads", "optimizer", "total"):
        z.add_column(col, justify="right")
    for r in zero_table(job, result.best):
        z.add_row(r["sharding"], *(f"{r[k]:.2f}" for k in ("params", "grads", "optimizer", "total")))
    con.print(z)
    con.print("[bold]why[/]")
    for line in explanation:
        con.print(f"  {line}")
    con.print("[bold]fabric[/]")
    if fabric is None:
        con.print("  one node: no inter-node fabric")
    else:
        levels = {1: "a single switch", 2: "two levels (leaf-spine)", 3: "three levels"}[fabric.levels]
        con.print(f"  {fabric.endpoints:,} NIC ports at {fabric.link_gbps:g} Gb/s, radix {fabric.radix}, "
                  f"oversubscription {fabric.oversubscription:g}:1 -> {levels}: {fabric.leaves} leaves"
                  + (f", {fabric.spines} spines" if fabric.spines else "")
                  + (f", {fabric.cores} cores" if fabric.cores else "")
                  + f"; bisection {fabric.bisection_tbps:,.1f} Tb/s; the level above the leaves carries "
                    f"{fabric.spine_capacity_tbps:,.1f} Tb/s; {fabric.cables:,} cables")
    for note in fabric_notes:
        con.print(f"  {note}")
    s = storage
    con.print("[bold]storage[/]")
    con.print(f"  reads: {rate(s.read_gbs)} of token shards ({s.bytes_per_token} B/token at "
              f"{s.tokens_per_s:,.0f} tokens/s); {rate(s.read_gbs_raw_text)} if reading raw text")
    con.print(f"  checkpoint: {size(s.checkpoint_gb)} per save (micro and macro tiers, and each cold backup); "
              f"HF export {size(s.export_gb)}; a {s.target_stall_s:g} s stall needs {rate(s.write_gbs_for_stall)} "
              f"of writes ({rate(s.write_gbs_per_node)} per node); at {rate(s.storage_write_gbs)} a "
              f"save takes {s.save_s:,.3g} s")
    r = reliability
    con.print("[bold]reliability[/]")
    con.print(f"  MTBF {r.gpu_mtbf_hours:,.0f} h per GPU -> {r.cluster_mtbf_hours:.2f} h for the job; "
              f"{r.expected_failures:.1f} failures expected over {r.run_hours / 24:.1f} days; Young/Daly "
              f"interval {r.interval_s:,.0f} s = {r.interval_steps} steps; goodput {r.goodput:.1%}")


def _toml_float(x: float) -> str:
    """Six significant digits as a TOML float (a float literal even when whole: 2.0, 1.5e-07)."""
    return repr(float(f"{x:.6g}"))


def plan_section(job: Job, best: Candidate) -> str:
    """The `[plan]` table of the emitted config: the prediction the run report compares with the measurement."""
    t = best.time
    return f"""[plan]
gpu = "{job.cluster.gpu.name}"
gpus = {job.cluster.gpus}
layout = "{describe_layout(best.layout)}"
step_time_s = {_toml_float(t.step_s)}
tokens_per_s = {_toml_float(t.tokens_per_s)}
mfu = {_toml_float(t.mfu)}
memory_gib_per_rank = {_toml_float(best.memory["total"] / GIB)}
"""


def checkpoint_every(n_layers: int, k: int) -> int:
    """The trainer's selective checkpointing wraps the blocks whose global id is a multiple of `every`
    (parallel/recompute.py), ⌈L/every⌉ of them: the largest `every` that still wraps at least the k
    layers the plan recomputes (exactly k when some `every` gives ⌈L/every⌉ = k, else the next count above)."""
    return max(n for n in range(1, n_layers + 1) if math.ceil(n_layers / n) >= k)


def checkpointing_section(lay: Layout, n_layers: int) -> str:
    """`[precision.activation_checkpoint]` that reproduces the planned recompute: partial (k of L layers) as
    every n-th block, selective as op-level checkpointing that keeps the matmul outputs and recomputes the
    attention core and the pointwise ops (save_ops = ["mm"], what plan/footprint.py drops for "selective")."""
    if lay.recompute == "selective":
        return 'mode = "selective"\nsave_ops = ["mm"]'
    k = recomputed_layers(n_layers, lay.recompute, lay.recompute_layers)
    if k == 0 or k == n_layers:
        return 'mode = "none"' if k == 0 else 'mode = "full"'
    every = checkpoint_every(n_layers, k)
    wrapped = math.ceil(n_layers / every)
    note = "" if wrapped == k else f" ({k} planned; every n-th block cannot give exactly {k})"
    return f'# recompute {wrapped} of {n_layers} layers{note}\nmode = "selective"\nevery = {every}'


def emit_config(path: str, job: Job, best: Candidate, reliability: ReliabilityPlan) -> str:
    """A `bessemer train` config for the chosen layout; the planner's numbers in comments at the top and in
    `[plan]`, which the run report compares with what the run measures."""
    from bessemer.config import load_config
    from bessemer.model.registry import MODEL_SIZES

    name = job.arch.name
    if name not in MODEL_SIZES:
        raise ConfigError(f"--emit-config needs a registry model (--model {', '.join(MODEL_SIZES)}); "
                          f"{name!r} was given as dims")
    lay = best.layout
    m = best.time.microbatches
    local = job.global_batch // lay.dp
    micro_batch, microbatches = (local, m) if lay.pp > 1 else (lay.micro_batch, 0)
    steps = max(1, math.ceil(job.tokens / (job.global_batch * job.seq_len)))
    ac = checkpointing_section(lay, job.arch.n_layers)
    schedule = lay.schedule if lay.pp > 1 else "1f1b"
    virtual = lay.virtual if lay.pp > 1 else 0
    sp = "true" if lay.tp > 1 else "false"
    d = best.as_dict()
    text = f"""# Written by `bessemer plan` for {job.cluster.gpus} x {job.cluster.gpu.name}: predicted
# {d['step_time_s']:.3f} s per step, {d['tokens_per_s']:,.0f} tokens/s, MFU {d['mfu']:.1%},
# {d['memory_gib_per_gpu']['total']:.1f} GiB per GPU, {d['time_to_train_days']:.2f} days.
# Set data.path to your token shards (`bessemer tokenizer encode`), then:
#   bessemer train {Path(path).name} --nproc {job.cluster.gpus_per_node}   (per node, under torchrun or srun)

[run]
dir = "runs/{name}-{job.cluster.gpus}gpu"
seed = 0

[model]
name = "{name}"
vocab_size = {job.arch.vocab_size}

[data]
path = "data/debug"

[train]
steps = {steps}
global_batch = {job.global_batch}
micro_batch = {micro_batch}
seq_len = {job.seq_len}

[parallel]
dp_replicate = {lay.dp_replicate}
dp_shard = {lay.dp_shard}
tp = {lay.tp}
pp = {lay.pp}
pp_schedule = "{schedule}"
virtual_stages = {virtual}
microbatches = {microbatches}
sequence_parallel = {sp}

[precision]
dtype = "bf16"

[precision.activation_checkpoint]
{ac}

[checkpoint]
mtbf_hours = {reliability.cluster_mtbf_hours:.4f}

[checkpoint.micro]
interval = "auto"

{plan_section(job, best)}"""
    Path(path).write_text(text)
    load_config(path)  # what we write must load
    return path


def memory_chart(path: str, result: SearchResult, top: int) -> str:
    """Stacked bars of the memory breakdown of the top layouts (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cands = result.ranked[:top]
    parts = ("params", "grads", "optimizer", "buffers", "activations")
    labels = [f"tp{c.layout.tp} pp{c.layout.pp}\n{c.layout.dp_replicate}x{c.layout.dp_shard} "
              f"mb{c.layout.micro_batch}\n{c.layout.recompute}" for c in cands]
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(cands)), 4.5))
    bottom = [0.0] * len(cands)
    for part in parts:
        vals = [c.memory[part] / GIB for c in cands]
        ax.bar(labels, vals, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("GiB per GPU (before margin and context)")
    ax.legend(fontsize=8)
    ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
