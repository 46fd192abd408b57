"""Step time of one layout on one cluster: compute at an achievable fraction of peak, tensor-parallel
collectives on the link they run over, the pipeline bubble, pipeline sends, context-parallel attention
exchanges and the data-parallel collectives that compute does not hide. Plain Python, no torch; see
docs/plan.md for the derivation and plan/published.py for the validation against published runs.

Per pipeline micro-batch of `b` sequences on one GPU (tp = t, pp = p, cp = q, v stages per rank; each GPU
holds b·s/q tokens of the micro-batch):
    compute    F_mm · b·s / (t·p·q) / (peak · η_gpu)     the matmul FLOPs (at the FP8 peak · FP8_ACHIEVED
                                                          with --fp8); η_gpu is the GPU's mm_efficiency
             + T_att · b·s / (t·p·q)                      the attention core (attention_seconds): unfused,
               F_att at the BF16 peak · η_gpu; flash attention, causal, FLASH_WORK of F_att at the kernel's
               published efficiency (catalog.GPU.attn_efficiency: FlashAttention-2 on the H100, measured in
               the FlashAttention-3 paper, arXiv:2407.08608, Figures 5-6)
             + r · L · b·s/q · c · (γ_h·h + γ_s·a·s) / (t·p) / HBM bandwidth
               the memory-bound ops (norms, activations, dropout, softmax, residual adds): γ_h·h·c bytes of
               HBM traffic per token and layer (γ_h fitted separately for unfused GPT-style layers and for
               layers with flash attention and fused kernels), γ_s·a·s·c more when attention stores its
               s x s matrix (no flash attention); r = 1 + (recomputed layers / L)/3
    tp         n_tp · L/p · [2(t−1)/t · b·s/q·h·c / B_tp + α]    n_tp = 4 collectives per layer (2 forward,
               2 backward: all-reduces, or all-gather + reduce-scatter of the same volume with sequence
               parallelism), 2 more for every recomputed layer
    cp         L/p · max(0, 3(q−1) · b·s/q · 2·kv/t · c / B_cp − attention compute)   the K/V blocks passed
               around the ring (forward, and K/V plus their gradients backward), hidden by attention
    p2p        2 · v · (b·s/q·h·c / t / B_pp + α)       activations forward, gradients backward
Step:  (m + bubble) · T_mb + exposed data-parallel time, with m = B/(dp·b) micro-batches and bubble =
(p−1) for GPipe and 1F1B, (p−1)/v interleaved, (p−1)/(3v) zero bubble (ZB-H1 removes about two thirds): the
bubble's share of the step, bubble/(m + bubble), grows as the per-replica batch (m) shrinks.
Data parallel (ring costs: all-reduce 2(n−1)/n · S/B, all-gather and reduce-scatter (n−1)/n · S/B), as our
trainer issues them (parallel/build.py): FSDP without pipelining re-gathers parameters in forward and in
backward and reduces gradients for every micro-batch, hidden behind that micro-batch's compute; with
pipelining it gathers once per step (hidden behind the first micro-batch) and reduces once after the last
backward, which only that last micro-batch's backward can hide — with one micro-batch per replica nothing
else can. HSDP adds an all-reduce of the shard over the replicas. DP_OVERLAP of the compute hides.

Bandwidth of a group: ranks are laid out tp innermost, then cp, dp_shard, dp_replicate, pp (torchtitan's mesh
order); a group whose members sit in one node runs at the intra-node link, one that spans nodes at the
node's NIC bandwidth shared by the GPUs of the node, times the group's members per node, divided by the
fabric's oversubscription when the group spans more nodes than one leaf switch reaches (rail-optimized: a
leaf's down ports, one per node). Latency per collective: α_launch inside a node; across nodes α_launch +
2·⌈log₂ n⌉ hops of the network's latency (catalog: InfiniBand ~1 µs, RoCE ~2.5 µs per hop).
"""

import math
from dataclasses import dataclass

from bessemer.plan.catalog import GPU, Network
from bessemer.plan.footprint import Arch, recompute_flops_fraction, recomputed_layers

# Calibrated constants: one set for every row of the calibration table (plan/published.py, docs/plan.md); the
# matmul efficiency is per GPU (catalog.GPU.mm_efficiency).
# FP8 matmuls reach this fraction of the BF16 efficiency, relative to the FP8 peak: 1.4x the BF16 matmul speed,
# which with a 3:1 matmul share gives torchtitan's measured 1.28x (Llama 3.1 8B, 8 H100, compile vs compile +
# Float8, docs/performance.md Table 1).
FP8_ACHIEVED = 0.7
ELEMENTWISE_BYTES_H = 220.0  # HBM traffic of the memory-bound ops per token per layer, in units of h x c bytes
ELEMENTWISE_BYTES_H_FUSED = 140.0  # ... in a layer with flash attention (fused kernels, Llama-style)
ELEMENTWISE_BYTES_S = 14.0  # ... of a stored attention matrix (no flash attention), in units of heads x s x c
# Flash attention's executed work per layer and token, in units of the 12·h·s FLOPs MFU counts: causal halves
# it; forward 4·h·s, backward 2.5x that (it recomputes QKᵀ), so (4 + 10)/2 = 7 of 12 for forward + backward
# and 2 of 12 for a recomputed forward.
FLASH_WORK = 7 / 12
FLASH_FORWARD = 2 / 12
LINK_EFFICIENCY = 0.75  # achievable fraction of a link's bandwidth by NCCL-style ring collectives
DP_OVERLAP = 0.8  # fraction of a micro-batch's compute that can hide data-parallel collectives
ALPHA_LAUNCH_S = 10e-6  # per-collective latency inside a node (launch + sync)
ALPHA_INTER_S = 20e-6  # software latency of a collective across nodes, before the network's hops
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
    oversubscription: float = 1.0  # leaf down:up ports; cross-leaf bandwidth is divided by it
    radix: int = 0  # switch ports (0 = the network's)

    @property
    def intra_gbs(self) -> float:
        return self.gpu.pcie_gbs if self.intra == "pcie" else self.gpu.link_gbs

    @property
    def nic_gbs_per_gpu(self) -> float:
        nics = self.nics_per_node or self.gpus_per_node
        return self.network.gbs * nics / self.gpus_per_node if self.network else 0.0

    @property
    def nodes_per_leaf(self) -> int:
        """Nodes one leaf switch reaches: its down ports (rail-optimized wiring, one port per node)."""
        if not self.network:
            return 1
        k, o = self.radix or self.network.radix, self.oversubscription
        return max(1, int(k * o // (o + 1)))


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
    cp: int = 1  # context parallel: each rank holds s/cp tokens of every sequence
    recompute_layers: int | None = None  # with recompute "full": k of the L layers (None = all)
    fp8: bool = False  # matmuls in FP8 (torchao float8), attention and the rest in BF16

    @property
    def dp(self) -> int:
        return self.dp_replicate * self.dp_shard

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def recompute_label(self) -> str:
        """'partial' for full recomputation of some of the layers, else the mode."""
        return "partial" if self.recompute == "full" and self.recompute_layers is not None else self.recompute


@dataclass(frozen=True)
class StepTime:
    step_s: float
    compute_s: float  # per step, on the critical path
    tp_s: float
    cp_s: float
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
    nodes = stride * size / cluster.gpus_per_node
    if nodes > cluster.nodes_per_leaf:
        inter /= cluster.oversubscription
    return min(inter, cluster.intra_gbs) * 1e9 * LINK_EFFICIENCY, True


def latency(cluster: Cluster, inter: bool, n: int) -> float:
    """Seconds of fixed cost per collective over `n` ranks: the launch, plus the network's hops across nodes."""
    if not inter or cluster.network is None:
        return ALPHA_LAUNCH_S
    return ALPHA_INTER_S + 2 * math.ceil(math.log2(max(n, 2))) * cluster.network.latency_us * 1e-6


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


def attention_seconds(arch: Arch, seq_len: int, recomputed: int, gpu: GPU) -> float:
    """Seconds per token of the attention core (QKᵀ, softmax, attention·V) over all layers, forward and
    backward, plus the forward again in the `recomputed` layers. Unfused (no flash attention): the 12·h·s
    FLOPs per token and layer that MFU counts, as batched GEMMs at the GPU's mm_efficiency. Flash attention
    with the causal mask computes half of them (the blocks above the diagonal are skipped), and its backward
    reruns QKᵀ (FlashAttention's own count: backward 2.5x forward): FLASH_WORK x 12·h·s per layer, at the
    kernel's measured efficiency (catalog.GPU.attn_efficiency; the GEMM efficiency where none is published)."""
    per_layer = 12 * arch.dim * seq_len
    if not arch.flash:
        return (arch.n_layers + recomputed / 3) * per_layer / (gpu.bf16_tflops * 1e12 * gpu.mm_efficiency)
    work = arch.n_layers * FLASH_WORK * per_layer + recomputed * FLASH_FORWARD * per_layer
    return work / (gpu.bf16_tflops * 1e12 * (gpu.attn_efficiency or gpu.mm_efficiency))


def step_time(arch: Arch, model_flops_per_token: float, seq_len: int, global_batch: int, layout: Layout,
              cluster: Cluster, dtype_bytes: int = 2) -> StepTime:
    t, p, v, q = layout.tp, layout.pp, layout.virtual, layout.cp
    b, dp = layout.micro_batch, layout.dp
    m = global_batch // (dp * b)
    gpu = cluster.gpu
    peak = gpu.bf16_tflops * 1e12
    tokens_mb = b * seq_len / q  # this rank's tokens of one micro-batch

    # Compute of one micro-batch on one GPU.
    k = recomputed_layers(arch.n_layers, layout.recompute, layout.recompute_layers)
    extra = recompute_flops_fraction(arch, seq_len, layout.recompute) * k / arch.n_layers
    attn_per_layer = 12 * arch.dim * seq_len  # per token, forward + backward (QKᵀ and attention·V)
    layer_flops = 6 * arch.layer_matmul_params() + attn_per_layer
    attn_flops = (arch.n_layers + k / 3) * attn_per_layer  # recomputation reruns the attention forward
    hw_flops_per_token = model_flops_per_token + extra * arch.n_layers * layer_flops
    mm_flops = hw_flops_per_token - attn_flops
    mm_peak = gpu.fp8_tflops * 1e12 * FP8_ACHIEVED if layout.fp8 and gpu.fp8_tflops else peak
    attn_s = attention_seconds(arch, seq_len, k, gpu)  # per token, all layers
    compute_mb = (mm_flops / mm_peak / gpu.mm_efficiency + attn_s) * tokens_mb / (t * p)
    gamma_h = ELEMENTWISE_BYTES_H_FUSED if arch.flash else ELEMENTWISE_BYTES_H
    traffic = gamma_h * arch.dim + (0 if arch.flash else ELEMENTWISE_BYTES_S * arch.n_heads * seq_len)
    passes = 1 + k / arch.n_layers / 3 if layout.recompute == "full" else 1.0
    compute_mb += passes * traffic * dtype_bytes * tokens_mb * arch.n_layers / (t * p) / (gpu.hbm_gbs * 1e9)

    # Tensor parallelism: innermost ranks.
    tp_bw, tp_inter = group_bandwidth(cluster, 1, t)
    n_tp = 4 + (2 * k / arch.n_layers if layout.recompute == "full" else 0)
    tp_mb = n_tp * (arch.n_layers / p) * ring_all_reduce(t, tokens_mb * arch.dim * dtype_bytes, tp_bw,
                                                         latency(cluster, tp_inter, t))

    # Context parallelism: K/V blocks around the ring of cp ranks (next to tp), hidden by the attention.
    cp_mb = 0.0
    if q > 1:
        cp_bw, cp_inter = group_bandwidth(cluster, t, q)
        kv_bytes = tokens_mb * 2 * arch.kv_dim / t * dtype_bytes
        exchange = 3 * (q - 1) * (kv_bytes / cp_bw + latency(cluster, cp_inter, 2))
        attention = attention_seconds(arch, seq_len, 0, gpu) / arch.n_layers * tokens_mb / t
        cp_mb = (arch.n_layers / p) * max(0.0, exchange - attention)

    # Pipeline sends (sequence-sharded over tp), outermost ranks.
    p2p_mb = 0.0
    if p > 1:
        pp_bw, pp_inter = group_bandwidth(cluster, t * q * dp, p)
        p2p_mb = 2 * v * (tokens_mb * arch.dim * dtype_bytes / t / pp_bw + latency(cluster, pp_inter, 2))

    mb_time = compute_mb + tp_mb + cp_mb + p2p_mb
    bubble = bubble_units(layout.schedule, p, v) * mb_time

    # Data parallelism on this rank's parameters (the cp ranks of a replica hold the same parameters and
    # join its gradient reduction: FSDP shards over dp_shard x cp, as torchtitan does).
    params_rank = arch.params() / (t * p)
    n_sh, n_rep = layout.dp_shard * q, layout.dp_replicate
    shard_bw, shard_inter = group_bandwidth(cluster, t, n_sh)
    rep_bw, rep_inter = group_bandwidth(cluster, t * n_sh, n_rep)
    a_sh, a_rep = latency(cluster, shard_inter, n_sh), latency(cluster, rep_inter, n_rep)
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
    return StepTime(step_s=step, compute_s=m * compute_mb, tp_s=m * tp_mb, cp_s=m * cp_mb, p2p_s=m * p2p_mb,
                    bubble_s=bubble, dp_exposed_s=dp_exposed, dp_total_s=dp_total, microbatches=m,
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

