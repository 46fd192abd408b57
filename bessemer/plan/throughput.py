"""Step time of one layout on one cluster: compute at an achievable fraction of peak, tensor-parallel
collectives on the link they run over, the pipeline bubble, pipeline sends, and the data-parallel
collectives that compute does not hide. Plain Python, no torch; see docs/plan.md for the derivation and the
calibration against published runs.

Per pipeline micro-batch of `b` sequences on one GPU (tp = t, pp = p, v stages per rank):
    compute    F_hw · b·s / (t·p) / (peak · η)          F_hw = model FLOPs per token x (1 + recompute share)
             + r · L · b·s · c · (γ_h·h + γ_s·a·s) / (t·p) / HBM bandwidth
               the memory-bound ops (norms, activations, dropout, softmax, residual adds): γ_h·h·c bytes of
               HBM traffic per token and layer, γ_s·a·s·c more when attention stores its s x s matrix (no
               flash attention); r = 4/3 with full recomputation (the forward runs twice)
    tp         n_tp · L/p · [2(t−1)/t · b·s·h·c / B_tp + α]    n_tp = 4 collectives per layer (2 forward,
               2 backward: all-reduces, or all-gather + reduce-scatter of the same volume with sequence
               parallelism), 6 with full recomputation
    p2p        2 · v · (b·s·h·c / t / B_pp + α)         activations forward, gradients backward
Step:  (m + bubble) · T_mb + exposed data-parallel time, with m = B/(dp·b) micro-batches and bubble =
(p−1) for GPipe and 1F1B, (p−1)/v interleaved, (p−1)/(3v) zero bubble (ZB-H1 removes about two thirds).
Data parallel (ring costs: all-reduce 2(n−1)/n · S/B, all-gather and reduce-scatter (n−1)/n · S/B), as our
trainer issues them (parallel/apply.py): FSDP without pipelining re-gathers parameters in forward and in
backward and reduce-scatters gradients for every micro-batch; with pipelining it gathers once per step and
reduces once per step; HSDP adds an all-reduce of the shard over the replicas. The part of it that the
micro-batch's compute hides is DP_OVERLAP of that compute.

Bandwidth of a group: ranks are laid out tp innermost, then dp_shard, dp_replicate, pp (torchtitan's mesh
order); a group whose members sit in one node runs at the intra-node link, one that spans nodes at the
node's NIC bandwidth shared by the GPUs of the node, times the group's members per node.
"""

from dataclasses import dataclass

from bessemer.plan.catalog import GPU, Network
from bessemer.plan.footprint import Arch, recompute_flops_fraction

# Calibrated constants: one set for every row of the calibration table (plan/calibration.py, docs/plan.md).
GEMM_EFFICIENCY = 0.65  # achievable fraction of dense peak for the matrix multiplies
ELEMENTWISE_BYTES_H = 220.0  # HBM traffic of the memory-bound ops per token per layer, in units of h x c bytes
ELEMENTWISE_BYTES_S = 14.0  # ... of a stored attention matrix (no flash attention), in units of heads x s x c
LINK_EFFICIENCY = 0.75  # achievable fraction of a link's bandwidth by NCCL-style ring collectives
DP_OVERLAP = 0.8  # fraction of a micro-batch's compute that can hide data-parallel collectives
ALPHA_INTRA_S = 10e-6  # per-collective latency inside a node (launch + sync)
ALPHA_INTER_S = 30e-6  # per-collective latency across nodes
PARAM_BYTES = 2  # 16-bit parameters all-gathered
GRAD_BYTES = 4  # gradients reduced in fp32 (precision.reduce_dtype = fp32, the default)


@dataclass(frozen=True)
class Cluster:
    gpu: GPU
    gpus: int
    gpus_per_node: int = 8
    intra: str = "nvlink"  # "nvlink" | "pcie"
    network: Network | None = None
    nics_per_node: int = 0  # 0 = one per GPU (rail-optimized)

    @property
    def intra_gbs(self) -> float:
        return self.gpu.pcie_gbs if self.intra == "pcie" else self.gpu.link_gbs

    @property
    def nic_gbs_per_gpu(self) -> float:
        nics = self.nics_per_node or self.gpus_per_node
        return self.network.gbs * nics / self.gpus_per_node if self.network else 0.0


@dataclass(frozen=True)
class Layout:
    tp: int
    pp: int
    dp_replicate: int
    dp_shard: int
    micro_batch: int  # sequences per pipeline micro-batch (per forward without pipelining)
    recompute: str = "none"  # none | selective | full
    schedule: str = "1f1b"  # gpipe | 1f1b | interleaved_1f1b | zero_bubble
    virtual: int = 1  # stages per pipeline rank
    sequence_parallel: bool = True

    @property
    def dp(self) -> int:
        return self.dp_replicate * self.dp_shard

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp


@dataclass(frozen=True)
class StepTime:
    step_s: float
    compute_s: float  # per step, on the critical path
    tp_s: float
    p2p_s: float
    bubble_s: float
    dp_exposed_s: float
    dp_total_s: float
    microbatches: int
    model_tflops_per_gpu: float
    hw_tflops_per_gpu: float
    tokens_per_s: float
    mfu: float
    hfu: float


def group_bandwidth(cluster: Cluster, stride: int, size: int) -> tuple[float, bool]:
    """Bytes/s per GPU of a collective over `size` ranks `stride` apart, and whether it crosses nodes."""
    if stride * size <= cluster.gpus_per_node:
        return cluster.intra_gbs * 1e9 * LINK_EFFICIENCY, False
    per_node = max(1, min(size, cluster.gpus_per_node // stride))
    inter = cluster.nic_gbs_per_gpu * per_node
    if inter <= 0:
        return cluster.intra_gbs * 1e9 * LINK_EFFICIENCY, True  # no network given: a single node
    return min(inter, cluster.intra_gbs) * 1e9 * LINK_EFFICIENCY, True


def ring_all_reduce(n: int, size: float, bw: float, alpha: float) -> float:
    return 0.0 if n <= 1 else 2 * (n - 1) / n * size / bw + alpha


def ring_gather(n: int, size: float, bw: float, alpha: float) -> float:
    """All-gather or reduce-scatter of a buffer whose full size is `size`."""
    return 0.0 if n <= 1 else (n - 1) / n * size / bw + alpha


def bubble_units(schedule: str, pp: int, virtual: int) -> float:
    """Idle time of a pipeline step in units of one micro-batch's forward + backward on a rank."""
    if pp == 1:
        return 0.0
    if schedule == "interleaved_1f1b":
        return (pp - 1) / virtual
    if schedule == "zero_bubble":
        return (pp - 1) / (3 * virtual)
    return float(pp - 1)


def step_time(arch: Arch, model_flops_per_token: float, seq_len: int, global_batch: int, layout: Layout,
              cluster: Cluster, dtype_bytes: int = 2) -> StepTime:
    t, p, v = layout.tp, layout.pp, layout.virtual
    b, dp = layout.micro_batch, layout.dp
    m = global_batch // (dp * b)
    peak = cluster.gpu.bf16_tflops * 1e12
    tokens_mb = b * seq_len

    # Compute of one micro-batch on one GPU.
    extra = recompute_flops_fraction(arch, seq_len, layout.recompute)
    layer_flops = 6 * arch.layer_matmul_params() + 12 * arch.dim * seq_len  # per token, forward + backward
    hw_flops_per_token = model_flops_per_token + extra * arch.n_layers * layer_flops
    compute_mb = hw_flops_per_token * tokens_mb / (t * p) / (peak * GEMM_EFFICIENCY)
    traffic = ELEMENTWISE_BYTES_H * arch.dim + (0 if arch.flash else ELEMENTWISE_BYTES_S * arch.n_heads * seq_len)
    passes = 4 / 3 if layout.recompute == "full" else 1.0
    compute_mb += passes * traffic * dtype_bytes * tokens_mb * arch.n_layers / (t * p) / (cluster.gpu.hbm_gbs * 1e9)

    # Tensor parallelism: innermost ranks.
    tp_bw, tp_inter = group_bandwidth(cluster, 1, t)
    alpha_tp = ALPHA_INTER_S if tp_inter else ALPHA_INTRA_S
    n_tp = 6 if layout.recompute == "full" else 4
    tp_mb = n_tp * (arch.n_layers / p) * ring_all_reduce(t, tokens_mb * arch.dim * dtype_bytes, tp_bw, alpha_tp)

    # Pipeline sends (sequence-sharded over tp), outermost ranks.
    p2p_mb = 0.0
    if p > 1:
        pp_bw, pp_inter = group_bandwidth(cluster, t * dp, p)
        alpha_pp = ALPHA_INTER_S if pp_inter else ALPHA_INTRA_S
        p2p_mb = 2 * v * (tokens_mb * arch.dim * dtype_bytes / t / pp_bw + alpha_pp)

    mb_time = compute_mb + tp_mb + p2p_mb
    bubble = bubble_units(layout.schedule, p, v) * mb_time

    # Data parallelism on this rank's parameters.
    params_rank = arch.params() / (t * p)
    shard_bw, shard_inter = group_bandwidth(cluster, t, layout.dp_shard)
    rep_bw, rep_inter = group_bandwidth(cluster, t * layout.dp_shard, layout.dp_replicate)
    a_sh = ALPHA_INTER_S if shard_inter else ALPHA_INTRA_S
    a_rep = ALPHA_INTER_S if rep_inter else ALPHA_INTRA_S
    n_sh, n_rep = layout.dp_shard, layout.dp_replicate
    gather = ring_gather(n_sh, params_rank * PARAM_BYTES, shard_bw, a_sh)
    reduce = (ring_gather(n_sh, params_rank * GRAD_BYTES, shard_bw, a_sh)
              + ring_all_reduce(n_rep, params_rank * GRAD_BYTES / n_sh, rep_bw, a_rep))
    hide = DP_OVERLAP * compute_mb
    if p == 1:  # every micro-batch: gather for forward and backward, reduce after backward
        per_mb = 2 * gather + reduce
        dp_total, dp_exposed = m * per_mb, m * max(0.0, per_mb - hide)
    else:  # gathered once (not resharded between micro-batches), reduced once after the last backward
        dp_total = gather + reduce
        dp_exposed = max(0.0, gather - hide) + max(0.0, reduce - hide * 2 / 3)

    step = m * mb_time + bubble + dp_exposed
    tokens = global_batch * seq_len
    n_gpus = layout.world
    model_tflops = model_flops_per_token * tokens / n_gpus / step / 1e12
    hw_tflops = hw_flops_per_token * tokens / n_gpus / step / 1e12
    return StepTime(step_s=step, compute_s=m * compute_mb, tp_s=m * tp_mb, p2p_s=m * p2p_mb, bubble_s=bubble,
                    dp_exposed_s=dp_exposed, dp_total_s=dp_total, microbatches=m,
                    model_tflops_per_gpu=model_tflops, hw_tflops_per_gpu=hw_tflops, tokens_per_s=tokens / step,
                    mfu=model_tflops * 1e12 / peak, hfu=hw_tflops * 1e12 / peak)


def check_batch(global_batch: int, layout: Layout) -> str:
    """Why the batch does not split over this layout ('' when it does)."""
    per_replica = layout.dp * layout.micro_batch
    if global_batch % per_replica:
        return (f"global batch {global_batch} is not a multiple of dp {layout.dp} x micro-batch "
                f"{layout.micro_batch}")
    m = global_batch // per_replica
    if layout.pp > 1 and m < layout.pp:
        return f"{m} micro-batches per step for {layout.pp} pipeline stages (need >= pp)"
    if layout.schedule in ("interleaved_1f1b", "zero_bubble") and m % layout.pp:
        return f"{layout.schedule} needs the micro-batches ({m}) to be a multiple of pp ({layout.pp})"
    return ""

