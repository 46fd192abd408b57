"""Layout search: every valid (tp, pp, dp_replicate, dp_shard, micro-batch, recompute, schedule) for a model
on a cluster, under memory and divisibility constraints, ranked by time to train (or cost). No torch."""

import math
import re
from collections import Counter
from dataclasses import dataclass, field, replace

from bessemer.errors import ConfigError
from bessemer.plan.footprint import CONTEXT_GIB, GIB, Arch, activation_bytes_per_gpu
from bessemer.plan.throughput import Cluster, Layout, StepTime, check_batch, step_time
from bessemer.plan.workload import arch_flops_per_token

RECOMPUTE = ("none", "selective", "full", "partial")  # partial: full recomputation of the fewest layers that fit
HEADROOM = 0.10  # default share of HBM left free for fragmentation, transient buffers and NCCL
SCHEDULES = ("gpipe", "1f1b", "interleaved_1f1b", "zero_bubble")
MASTER, GRAD, ADAM, COMPUTE = 4, 4, 8, 2  # bytes per parameter: our trainer's fp32 states, bf16 compute copies


@dataclass(frozen=True)
class Pins:
    """Dimensions the user fixed (None = searched)."""

    tp: int | None = None
    pp: int | None = None
    dp_replicate: int | None = None
    dp_shard: int | None = None
    micro_batch: int | None = None
    recompute: str | None = None
    schedule: str | None = None
    cp: int | None = None
    recompute_layers: int | None = None  # pins partial recomputation to k layers


@dataclass(frozen=True)
class Job:
    arch: Arch
    seq_len: int
    global_batch: int  # sequences per step
    tokens: float  # tokens to train on
    cluster: Cluster
    price_per_hour: float  # per GPU
    objective: str = "time"  # time | cost
    headroom: float = HEADROOM  # a layout fits in (1 - headroom) x HBM
    fp8: bool = False

    @property
    def capacity(self) -> float:
        """Bytes a layout may use per GPU (HBM sizes are binary: an "80 GB" H100 has 80 GiB)."""
        return self.cluster.gpu.memory_gb * GIB * (1 - self.headroom)


@dataclass(frozen=True)
class Candidate:
    layout: Layout
    memory: dict[str, float]  # bytes per GPU: params, grads, optimizer, buffers, activations, total
    time: StepTime
    days: float
    cost: float

    def as_dict(self) -> dict:
        lay, t = self.layout, self.time
        return {
            "tp": lay.tp, "pp": lay.pp, "dp_replicate": lay.dp_replicate, "dp_shard": lay.dp_shard,
            "microbatch": lay.micro_batch, "recompute": lay.recompute_label, "cp": lay.cp,
            "recompute_layers": lay.recompute_layers, "fp8": lay.fp8,
            "schedule": lay.schedule if lay.pp > 1 else "none", "virtual_stages": lay.virtual,
            "memory_gib_per_gpu": {k: round(v / GIB, 3) for k, v in self.memory.items()},
            "step_time_s": round(t.step_s, 6), "tokens_per_s": round(t.tokens_per_s, 1),
            "tflops_per_gpu": round(t.model_tflops_per_gpu, 2), "hw_tflops_per_gpu": round(t.hw_tflops_per_gpu, 2),
            "mfu": round(t.mfu, 4),
            "time_to_train_days": round(self.days, 3), "cost": round(self.cost, 2),
            "breakdown_s": {"compute": round(t.compute_s, 6), "tp_comm": round(t.tp_s, 6),
                            "pp_p2p": round(t.p2p_s, 6), "pp_bubble": round(t.bubble_s, 6),
                            "dp_exposed": round(t.dp_exposed_s, 6),
                            **({"cp_comm": round(t.cp_s, 6)} if lay.cp > 1 else {})},
        }


@dataclass
class SearchResult:
    ranked: list[Candidate]
    evaluated: int
    rejected: Counter = field(default_factory=Counter)  # reason -> layouts

    @property
    def best(self) -> Candidate:
        return self.ranked[0]


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(math.isqrt(n)) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def tp_problem(arch: Arch, tp: int) -> str:
    """Why the model cannot split over `tp` ranks ('' if it can) — the trainer's own rules (parallel/layout.py)."""
    for what, n in (("n_heads", arch.n_heads), ("n_kv_heads", arch.n_kv_heads), ("ffn_hidden", arch.ffn_hidden),
                    ("vocab_size", arch.vocab_size)):
        if n % tp:
            return f"tp {tp} does not divide the model's {what} ({n})"
    if tp > 1 and arch.tie_embeddings:
        return "tp > 1 needs untied embeddings"
    return ""


def pp_problem(arch: Arch, pp: int, virtual: int) -> str:
    if pp * virtual > arch.n_layers:
        return f"{pp * virtual} pipeline stages for {arch.n_layers} layers"
    return ""


def memory_per_gpu(arch: Arch, seq_len: int, layout: Layout, microbatches: int) -> dict[str, float]:
    """Device bytes per GPU of the largest rank (the first pipeline stage) as our trainer keeps them: fp32
    weights, gradients and AdamW states sharded over dp_shard x cp (FSDP2; the cp ranks of a replica hold the
    same parameters), 16-bit working copies (two blocks and the root when FSDP reshards after forward; the
    whole stage with pipelining, which does not reshard), and Korthikanti activations of s/cp tokens per
    sequence; the total adds the CUDA context. What is left free for fragmentation and transient buffers is
    the job's headroom."""
    t, p = layout.tp, layout.pp
    block = arch.layer_matmul_params() / t + 2 * arch.dim
    embed = arch.vocab_size * arch.dim / t
    # Tied embeddings: one matrix in one process; under pipelining the last stage keeps its own copy.
    head = 0 if arch.tie_embeddings and p == 1 else arch.vocab_size * arch.dim / t
    layers = math.ceil(arch.n_layers / p)
    # The first stage has the embedding, the last the head; with pp == 1 one rank has both.
    stage = max(layers * block + embed, layers * block + head + arch.dim) if p > 1 else \
        arch.n_layers * block + embed + head + arch.dim
    shard = layout.dp_shard * layout.cp
    mem = {"params": MASTER * stage / shard, "grads": GRAD * stage / shard, "optimizer": ADAM * stage / shard}
    if shard > 1 or layout.dp > 1:
        mem["buffers"] = COMPUTE * (stage if p > 1 else 2 * block + embed + head)
    else:
        mem["buffers"] = COMPUTE * stage  # autocast's 16-bit copies
    mem["activations"] = activation_bytes_per_gpu(
        arch, seq_len, layout.micro_batch, t, p, layout.schedule, layout.virtual, microbatches,
        layout.sequence_parallel and t > 1, layout.recompute, cp=layout.cp, recompute_layers=layout.recompute_layers)
    mem["total"] = sum(mem.values()) + CONTEXT_GIB * GIB
    return mem


def fewest_recomputed_layers(arch: Arch, seq_len: int, layout: Layout, microbatches: int,
                             capacity: float) -> int | None:
    """The fewest layers k < L whose full recomputation makes `layout` fit (Megatron's
    --recompute-num-layers; our trainer's selective checkpointing of every n-th block covers k = ⌈L/n⌉, so a
    config for it rounds k up to such a count); None when the layout fits without recomputation or only
    with every layer recomputed (then "none" or "full" is the layout)."""
    L = arch.n_layers

    def total(k: int | None) -> float:
        lay = replace(layout, recompute="none") if k is None else replace(layout, recompute="full", recompute_layers=k)
        return memory_per_gpu(arch, seq_len, lay, microbatches)["total"]

    if L < 3 or total(None) <= capacity:
        return None
    one, saved = total(1), total(1) - total(2)  # memory falls by the same amount per recomputed layer
    k = max(1, math.ceil((one - capacity) / saved) + 1) if saved > 0 else L
    while k < L and total(k) > capacity:  # float rounding of the solve: at most a step or two
        k += 1
    return k if k < L else None


def layouts(job: Job, pins: Pins):
    """Every layout the pins allow; yields (layout, problem, partial) with problem '' for the valid ones. A
    partial recompute layout (partial True) comes with recompute "full" and recompute_layers None (the search
    picks the count) unless the pins fix the count."""
    n, arch = job.cluster.gpus, job.arch
    for tp in divisors(n):
        if pins.tp is not None and tp != pins.tp:
            continue
        if tp > max(job.cluster.gpus_per_node, 8) and pins.tp is None:
            continue  # beyond a node's GPUs TP only gets slower
        for cp in _context_parallel(n // tp, job.seq_len, pins.cp):
            for pp in divisors(n // (tp * cp)):
                if pins.pp is not None and pp != pins.pp:
                    continue
                dp = n // (tp * cp * pp)
                for shard in divisors(dp):
                    rep = dp // shard
                    if (pins.dp_shard is not None and shard != pins.dp_shard) or \
                            (pins.dp_replicate is not None and rep != pins.dp_replicate):
                        continue
                    if pins.dp_shard is None and pins.dp_replicate is None and shard not in (dp, *_small(dp)):
                        continue  # HSDP: shard groups of one or a few nodes, or everything
                    for schedule, virtual in _schedules(pp, pins.schedule):
                        for recompute in _recompute_modes(pins):
                            for mb in _micro_batches(job.global_batch, dp, pins.micro_batch):
                                lay = Layout(tp=tp, pp=pp, dp_replicate=rep, dp_shard=shard, micro_batch=mb,
                                             recompute="full" if recompute == "partial" else recompute,
                                             schedule=schedule, virtual=virtual, cp=cp, fp8=job.fp8,
                                             recompute_layers=pins.recompute_layers)
                                yield lay, (tp_problem(arch, tp) or pp_problem(arch, pp, virtual)
                                            or cp_problem(job.seq_len, cp) or check_batch(job.global_batch, lay)), \
                                    recompute == "partial"


def _recompute_modes(pins: Pins) -> tuple[str, ...]:
    if pins.recompute_layers is not None:
        return ("partial",)
    return RECOMPUTE if pins.recompute is None else (pins.recompute,)


def _context_parallel(n: int, seq_len: int, pinned: int | None) -> list[int]:
    """Context-parallel degrees to try: the pinned one, or from 32K-token sequences on, powers of two up to
    16 (below that, activations of one sequence fit and cp only adds exchanges)."""
    if pinned is not None:
        return [pinned] if n % pinned == 0 else []
    if seq_len < 32768:
        return [1]
    return [c for c in (1, 2, 4, 8, 16) if n % c == 0]


def cp_problem(seq_len: int, cp: int) -> str:
    """Ring attention splits each sequence into 2·cp chunks (load-balanced causal attention)."""
    if cp > 1 and seq_len % (2 * cp):
        return f"cp {cp} does not divide the sequence ({seq_len} tokens) into 2 x cp chunks"
    return ""


def _small(dp: int) -> list[int]:
    return [d for d in (8, 16, 32, 64) if d < dp and dp % d == 0]


def _schedules(pp: int, pinned: str | None) -> list[tuple[str, int]]:
    """Schedules with their stages per rank. Zero bubble only when asked for: its gain rests on splitting
    weight gradients from input gradients, which the (p−1)/(3v) estimate assumes rather than measures."""
    if pp == 1:
        return [("1f1b", 1)]
    out = []
    for s in SCHEDULES:
        if (pinned is not None and s != pinned) or (pinned is None and s == "zero_bubble"):
            continue
        out += [(s, v) for v in ((2, 4) if s in ("interleaved_1f1b", "zero_bubble") else (1,))]
    return out


def _micro_batches(global_batch: int, dp: int, pinned: int | None) -> list[int]:
    if pinned is not None:
        return [pinned]
    per_replica = global_batch // dp if global_batch % dp == 0 else 0
    return [mb for mb in (1, 2, 4, 8, 16) if per_replica and per_replica % mb == 0] or [1]


def evaluate(job: Job, layout: Layout, flops_per_token: float) -> Candidate:
    m = job.global_batch // (layout.dp * layout.micro_batch)
    mem = memory_per_gpu(job.arch, job.seq_len, layout, m)
    st = step_time(job.arch, flops_per_token, job.seq_len, job.global_batch, layout, job.cluster)
    seconds = job.tokens / st.tokens_per_s
    return Candidate(layout, mem, st, seconds / 86400, seconds / 3600 * job.cluster.gpus * job.price_per_hour)


def search(job: Job, pins: Pins = Pins(), keep: int = 50) -> SearchResult:
    """Evaluate every layout; the ones that fit, best first. Raises ConfigError naming the constraint when
    none is valid or none fits."""
    for name, value in (("tp", pins.tp), ("pp", pins.pp), ("dp-shard", pins.dp_shard),
                        ("dp-replicate", pins.dp_replicate), ("cp", pins.cp)):
        if value is not None and (value < 1 or job.cluster.gpus % value):
            raise ConfigError(f"--{name} {value} does not divide --gpus {job.cluster.gpus}")
    if pins.tp is not None and tp_problem(job.arch, pins.tp):
        raise ConfigError(f"--tp {pins.tp}: {tp_problem(job.arch, pins.tp)}")
    if pins.pp is not None and pp_problem(job.arch, pins.pp, 1):
        raise ConfigError(f"--pp {pins.pp}: {pp_problem(job.arch, pins.pp, 1)}")
    if not 0 <= job.headroom <= 0.9:
        raise ConfigError(f"--headroom must be between 0 and 0.9 (a share of HBM), got {job.headroom:g}")
    if pins.cp is not None and cp_problem(job.seq_len, pins.cp):
        raise ConfigError(f"--cp {pins.cp}: {cp_problem(job.seq_len, pins.cp)}")
    if pins.recompute_layers is not None and not 1 <= pins.recompute_layers <= job.arch.n_layers:
        raise ConfigError(f"--recompute-layers must be in 1..{job.arch.n_layers} (the model's layers), got "
                          f"{pins.recompute_layers}")
    fpt = arch_flops_per_token(job.arch, job.seq_len)
    capacity = job.capacity
    fits, rejected, evaluated = [], Counter(), 0
    smallest: Candidate | None = None
    for layout, problem, partial in layouts(job, pins):
        evaluated += 1
        if problem:
            rejected[problem] += 1
            continue
        if partial and layout.recompute_layers is None:
            m = job.global_batch // (layout.dp * layout.micro_batch)
            k = fewest_recomputed_layers(job.arch, job.seq_len, layout, m, capacity)
            if k is None:
                continue  # "none" fits already, or only "full" can
            layout = replace(layout, recompute_layers=k)
        cand = evaluate(job, layout, fpt)
        if cand.memory["total"] > capacity:
            rejected[f"needs more than {1 - job.headroom:.0%} of the {job.cluster.gpu.name}'s "
                     f"{job.cluster.gpu.memory_gb:g} GiB"] += 1
            if smallest is None or cand.memory["total"] < smallest.memory["total"]:
                smallest = cand
            continue
        fits.append(cand)
    if not fits:
        if smallest is not None:
            lay = smallest.layout
            raise ConfigError(
                f"{job.arch.name} does not fit on {job.cluster.gpus} x {job.cluster.gpu.name} "
                f"({job.cluster.gpu.memory_gb:g} GiB): the smallest layout (tp {lay.tp}, pp {lay.pp}, dp_shard "
                f"{lay.dp_shard}, micro-batch {lay.micro_batch}, recompute {lay.recompute}) needs "
                f"{smallest.memory['total'] / GIB:.1f} GiB per GPU, over the {job.capacity / GIB:.1f} GiB that "
                f"--headroom {job.headroom:g} leaves; add GPUs or pick a larger GPU")
        reasons = "; ".join(f"e.g. {example} ({n} layouts)" for example, n in _categories(rejected)[:3]) \
            or "no layout matches the pins"
        raise ConfigError(f"no valid layout for {job.arch.name} on {job.cluster.gpus} GPUs: {reasons}")
    key = (lambda c: c.cost) if job.objective == "cost" else (lambda c: c.time.step_s)
    fits.sort(key=lambda c: (key(c), c.memory["total"]))
    return SearchResult(fits[:keep] + _alternatives(fits, keep), evaluated, rejected)


def _categories(rejected: Counter) -> list[tuple[str, int]]:
    """Rejection reasons grouped by their wording without the numbers: (an example, layouts), most first."""
    groups: dict[str, list] = {}
    for reason, n in rejected.items():
        g = groups.setdefault(re.sub(r"\d+", "N", reason), [reason, 0])
        g[1] += n
    return sorted(((r, n) for r, n in groups.values()), key=lambda rn: -rn[1])


def _alternatives(fits: list[Candidate], keep: int) -> list[Candidate]:
    """The best candidate for each tp and pp value beyond the kept ones, so the explanation can compare."""
    seen, out = {id(c) for c in fits[:keep]}, []
    for attr in ("tp", "pp", "recompute"):
        best_by: dict = {}
        for c in fits:
            best_by.setdefault(getattr(c.layout, attr), c)
        out += [c for c in best_by.values() if id(c) not in seen and not seen.add(id(c))]
    return sorted(out, key=lambda c: c.time.step_s)
