"""Published training runs the planner is checked against: each row is a measurement from a source outside
this project, at the layout the source ran, marked `calibration` (its error may tune the constants of
plan/throughput.py and the catalog's mm_efficiency) or `held-out` (never used for tuning: it tests them).
plan/calibration.py predicts every row; tests/unit/plan/test_published.py holds each within ±10%, except the
rows whose `outside` says why they are not (the test then requires them to stay outside, so that a model
change that brings them in updates this file).

What a row gives beyond the source (micro-batch size, schedule, stages per rank, network, recompute) is
listed with the row and chosen the same way for every row of a source, never tuned per row.

Sources:
- [megatron-t1] D. Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
  Megatron-LM", SC'21 (arXiv:2104.04473), Table 1 (weak scaling, 1.7B-1T): GPT, vocabulary 51,200, sequence
  2,048, A100-80GB on Selene (8 x HDR InfiniBand per node), activation recomputation, TFLOP/s counted with
  the recomputation (hardware FLOPs). Rows without pipelining: one micro-batch of B/dp sequences; with
  pipelining: micro-batches of 1, 1F1B.
- [megatron-t2] the same paper, Table 2 (PTD-P rows): 175B (TP 8 x PP 12 = model-parallel size 96, batch
  1,536) on 384, 768, 1,536 GPUs and 530B (TP 8 x PP 35 = 280, batch 2,240) on 560, 1,120, 2,240 GPUs,
  micro-batch 1: strong scaling at a fixed batch, the per-replica batch shrinking 4x.
- [llama3-t4] A. Grattafiori et al., "The Llama 3 Herd of Models" (arXiv:2407.21783), Table 4: 405B on
  H100-80GB with RoCE 400 Gb/s per GPU, 16M tokens per step, model-FLOP TFLOP/s. 8,192 GPUs TP8 CP1 PP16
  DP64 430 TFLOP/s (43%); 16,384 GPUs DP128 400 (41%); 16,384 GPUs at 131,072 tokens CP16 380 (38%): the
  table prints DP 4 there, which with TP 8 x CP 16 x PP 16 makes 8,192 GPUs; the row uses DP 8 (16,384).
  Interleaved schedule (v = 4 assumed), micro-batches of 1, FSDP over dp; the paper does not say which
  activations it recomputes: the rows recompute the fewest layers the memory model needs (search.py). Nor
  does it say how it counts attention FLOPs: the rows count 12·L·h·s per token (no causal saving), as
  torchtitan and our trainer count, while the step time runs causal flash attention (throughput.py).
- [torchtitan] torchtitan docs/performance.md (the 64 x A100-80GB table, FSDP2 only, local batch as given,
  sequence 8,192 for Llama 3 and 4,096 for Llama 2), MFU of model FLOPs 6N + 12·L·h·s as ours. The network
  is not given: 8 x HDR InfiniBand per node assumed. Its "selective op" checkpointing recomputes every second
  matmul (half a forward pass per layer): the row models it as full recomputation of L/2 layers.
- [bloom] T. Le Scao et al., "BLOOM: A 176B-Parameter Open-Access Multilingual Language Model"
  (arXiv:2211.05100), §3.4: 384 A100-80GB (48 nodes, Jean Zay: 4 x Omni-Path 100 Gb/s per node), TP 4,
  PP 12, DP 8, micro-batch 2, global batch 2,048 of 2,048 tokens, about 150 TFLOP/s per GPU (Megatron's
  count, with recomputation); GeLU MLP, vocabulary 250,880, no flash attention.
Not a row: OPT-175B (S. Zhang et al., arXiv:2205.01068, §2.4: 992 A100-80GB, FSDP with Megatron tensor
parallelism, "up to 147 TFLOP/s per GPU"): the paper publishes neither the micro-batch nor the recomputation
nor how it counts FLOPs, and gives a peak rather than a sustained rate, so its layout would be guessed;
docs/plan.md gives the two readings' predictions.
"""

from dataclasses import dataclass, replace

from bessemer.model.registry import MODEL_SIZES
from bessemer.plan.catalog import get_gpu, get_network
from bessemer.plan.footprint import Arch
from bessemer.plan.throughput import Cluster, Layout
from bessemer.plan.workload import arch_from_model_args

CALIBRATION, HELD_OUT = "calibration", "held-out"


@dataclass(frozen=True)
class PublishedRun:
    source: str  # paper and table
    label: str
    arch: Arch
    seq_len: int
    global_batch: int
    layout: Layout
    cluster: Cluster
    published_tflops: float  # per GPU, counted as the source counts
    hardware_flops: bool  # the source counts recomputation (HFU) rather than model FLOPs
    split: str  # calibration | held-out
    partial_recompute: bool = False  # recompute the fewest layers that fit (the source does not say)
    outside: str = ""  # why the prediction misses the ±10% band, for a row that does (reported, not tuned)


def _gpt(h: int, layers: int, heads: int, vocab: int = 51200, ffn: int = 0) -> Arch:
    return Arch(dim=h, n_layers=layers, n_heads=heads, n_kv_heads=heads, ffn_hidden=ffn or 4 * h,
                vocab_size=vocab, gated=False, flash=False, dropout=True, tie_embeddings=True,
                name=f"gpt-{h}x{layers}")


def _selene(gpus: int) -> Cluster:
    return Cluster(get_gpu("a100-80gb"), gpus, 8, "nvlink", get_network("ib-hdr"))


def _megatron(table: str, label: str, h: int, layers: int, heads: int, tp: int, pp: int, gpus: int,
              batch: int, tflops: float, split: str) -> PublishedRun:
    dp = gpus // (tp * pp)
    mb = batch // dp if pp == 1 else 1
    layout = Layout(tp=tp, pp=pp, dp_replicate=dp, dp_shard=1, micro_batch=mb, recompute="full", schedule="1f1b")
    return PublishedRun(f"Narayanan et al. 2021, {table}", label, _gpt(h, layers, heads), 2048, batch, layout,
                        _selene(gpus), tflops, True, split)


def _llama3(gpus: int, dp: int, seq_len: int, cp: int, tflops: float, split: str) -> PublishedRun:
    layout = Layout(tp=8, pp=16, dp_replicate=1, dp_shard=dp, micro_batch=1, recompute="full",
                    schedule="interleaved_1f1b", virtual=4, cp=cp)
    cluster = Cluster(get_gpu("h100-sxm"), gpus, 8, "nvlink", get_network("roce-400"))
    arch = arch_from_model_args(MODEL_SIZES["llama3-405b"], "llama3-405b")
    batch = 16 * 2**20 // seq_len
    label = f"405B, {gpus:,} GPUs, seq {seq_len:,}" + (f", cp {cp}" if cp > 1 else "")
    return PublishedRun("Llama 3 paper, Table 4", label, arch, seq_len, batch, layout, cluster, tflops, False, split,
                        partial_recompute=True)


def _torchtitan(label: str, arch: Arch, seq_len: int, local_batch: int, recompute: str, mfu: float,
                split: str) -> PublishedRun:
    layout = Layout(tp=1, pp=1, dp_replicate=1, dp_shard=64, micro_batch=local_batch, recompute=recompute)
    if recompute == "selective":
        # torchtitan's "selective op" keeps the attention output and recomputes every second matmul of every
        # block (activation_checkpoint.py: "saves output of all compute ops, except every second mm"): the
        # FLOPs of half the layers' forward, which full recomputation of L/2 layers reproduces.
        layout = replace(layout, recompute="full", recompute_layers=arch.n_layers // 2)
    return PublishedRun("torchtitan docs/performance.md (64 A100)", label, arch, seq_len, 64 * local_batch, layout,
                        _selene(64), mfu * 312, False, split)


def _llama2(h: int, layers: int, heads: int, kv: int, ffn: int, name: str) -> Arch:
    return Arch(dim=h, n_layers=layers, n_heads=heads, n_kv_heads=kv, ffn_hidden=ffn, vocab_size=32000, name=name)


LLAMA2_13B = _llama2(5120, 40, 40, 40, 13824, "llama2-13b")
LLAMA2_70B = _llama2(8192, 80, 64, 8, 28672, "llama2-70b")
LLAMA3_8B = arch_from_model_args(MODEL_SIZES["llama3-8b"], "llama3-8b")
LLAMA3_70B = arch_from_model_args(MODEL_SIZES["llama3-70b"], "llama3-70b")


def _bloom() -> PublishedRun:
    arch = Arch(dim=14336, n_layers=70, n_heads=112, n_kv_heads=112, ffn_hidden=4 * 14336, vocab_size=250880,
                gated=False, flash=False, dropout=False, tie_embeddings=True, name="bloom-176b")
    layout = Layout(tp=4, pp=12, dp_replicate=8, dp_shard=1, micro_batch=2, recompute="full", schedule="1f1b")
    cluster = Cluster(get_gpu("a100-80gb"), 384, 8, "nvlink", get_network("opa-100"), nics_per_node=4)
    return PublishedRun("Le Scao et al. 2022 (BLOOM), §3.4", "BLOOM 176B, 384 GPUs", arch, 2048, 2048, layout,
                        cluster, 150, True, HELD_OUT)


PUBLISHED: list[PublishedRun] = [
    _megatron("Table 1", "1.7B", 2304, 24, 24, 1, 1, 32, 512, 137, CALIBRATION),
    _megatron("Table 1", "3.6B", 3072, 30, 32, 2, 1, 64, 512, 138, CALIBRATION),
    _megatron("Table 1", "7.5B", 4096, 36, 32, 4, 1, 128, 512, 142, CALIBRATION),
    _megatron("Table 1", "18.4B", 6144, 40, 48, 8, 1, 256, 1024, 135, CALIBRATION),
    _megatron("Table 1", "39.1B", 8192, 48, 64, 8, 2, 512, 1536, 138, CALIBRATION),
    _megatron("Table 1", "76.1B", 10240, 60, 80, 8, 4, 1024, 1792, 140, CALIBRATION),
    _megatron("Table 1", "145.6B", 12288, 80, 96, 8, 8, 1536, 2304, 148, CALIBRATION),
    _megatron("Table 1", "310.1B", 16384, 96, 128, 8, 16, 1920, 2160, 155, CALIBRATION),
    _megatron("Table 1", "529.6B", 20480, 105, 128, 8, 35, 2520, 2520, 163, CALIBRATION),
    _megatron("Table 1", "1008.0B", 25600, 128, 160, 8, 64, 3072, 3072, 163, CALIBRATION),
    _megatron("Table 2", "174.6B, 384 GPUs", 12288, 96, 96, 8, 12, 384, 1536, 153, HELD_OUT),
    _megatron("Table 2", "174.6B, 768 GPUs", 12288, 96, 96, 8, 12, 768, 1536, 149, HELD_OUT),
    _megatron("Table 2", "174.6B, 1,536 GPUs", 12288, 96, 96, 8, 12, 1536, 1536, 141, HELD_OUT),
    _megatron("Table 2", "529.6B, 560 GPUs", 20480, 105, 128, 8, 35, 560, 2240, 171, HELD_OUT),
    _megatron("Table 2", "529.6B, 1,120 GPUs", 20480, 105, 128, 8, 35, 1120, 2240, 167, HELD_OUT),
    _megatron("Table 2", "529.6B, 2,240 GPUs", 20480, 105, 128, 8, 35, 2240, 2240, 159, HELD_OUT),
    _llama3(8192, 64, 8192, 1, 430, CALIBRATION),
    _llama3(16384, 128, 8192, 1, 400, HELD_OUT),
    _llama3(16384, 8, 131072, 16, 380, HELD_OUT),
    _torchtitan("Llama 3 8B, selective op", LLAMA3_8B, 8192, 1, "selective", 0.582, CALIBRATION),
    _torchtitan("Llama 3 70B, full", LLAMA3_70B, 8192, 1, "full", 0.517, HELD_OUT),
    _torchtitan("Llama 2 13B, no recompute", LLAMA2_13B, 4096, 2, "none", 0.611, CALIBRATION),
    _torchtitan("Llama 2 70B, full", LLAMA2_70B, 4096, 2, "full", 0.505, CALIBRATION),
    _bloom(),
]
