"""Published training throughput that the planner's constants are calibrated against, and the error.

`python -m bessemer.plan.calibration` prints the table that docs/plan.md carries; tests/unit/plan checks
that every row is within 15%. One set of constants (plan/throughput.py) serves every row; what a row
specifies beyond the publication (micro-batch size, schedule) is listed with it, chosen as the source
describes its setup, never tuned per row.

Sources:
- [megatron] D. Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
  Megatron-LM", SC'21 (arXiv:2104.04473), Table 1: GPT models, vocabulary 51,200, sequence 2,048, A100-80GB
  on Selene (DGX A100: 8 GPUs on NVLink 3, 8 x HDR 200 Gb/s InfiniBand per node), activation recomputation,
  TFLOP/s counted with recomputation (their Appendix formula 96·B·s·l·h²·(1 + s/6h + V/16lh)), i.e.
  hardware FLOPs. The table gives no micro-batch size: rows without pipelining run one micro-batch of
  B/dp sequences (Megatron reduces gradients once per step, which our model does for one micro-batch), rows
  with pipelining micro-batches of 1 with the 1F1B schedule.
- [llama3] A. Grattafiori et al., "The Llama 3 Herd of Models" (arXiv:2407.21783), Table 4: Llama 3 405B
  on H100-80GB (SXM, 700 W) with RoCE 400 Gb/s per GPU, sequence 8,192, TP 8, PP 16, model-FLOP TFLOP/s
  (BF16 MFU); their interleaved schedule (we assume 2 virtual stages per rank) with micro-batches of 1 and
  FSDP over dp. The third row (context parallelism 16 for 128K sequences) is left out: the planner does not
  model context parallelism.
"""

from dataclasses import dataclass

from bessemer.model.registry import MODEL_SIZES
from bessemer.plan.catalog import get_gpu, get_network
from bessemer.plan.footprint import Arch
from bessemer.plan.throughput import Cluster, Layout, step_time
from bessemer.plan.workload import arch_flops_per_token, arch_from_model_args


@dataclass(frozen=True)
class PublishedRun:
    source: str
    label: str
    arch: Arch
    seq_len: int
    global_batch: int
    layout: Layout
    cluster: Cluster
    published_tflops: float
    hardware_flops: bool  # the publication counts recomputation (HFU) rather than model FLOPs


def _gpt(h: int, layers: int, heads: int) -> Arch:
    return Arch(dim=h, n_layers=layers, n_heads=heads, n_kv_heads=heads, ffn_hidden=4 * h, vocab_size=51200,
                gated=False, flash=False, dropout=True, tie_embeddings=True, name=f"gpt-{h}x{layers}")


def _megatron(label: str, h: int, layers: int, heads: int, tp: int, pp: int, gpus: int, batch: int,
              tflops: float) -> PublishedRun:
    dp = gpus // (tp * pp)
    mb = batch // dp if pp == 1 else 1
    layout = Layout(tp=tp, pp=pp, dp_replicate=dp, dp_shard=1, micro_batch=mb, recompute="full",
                    schedule="1f1b")
    cluster = Cluster(get_gpu("a100-80gb"), gpus, 8, "nvlink", get_network("ib-hdr"))
    return PublishedRun("megatron", label, _gpt(h, layers, heads), 2048, batch, layout, cluster, tflops, True)


def _llama3(gpus: int, dp: int, batch_per_dp: int, tflops: float) -> PublishedRun:
    layout = Layout(tp=8, pp=16, dp_replicate=1, dp_shard=dp, micro_batch=1, recompute="none",
                    schedule="interleaved_1f1b", virtual=4)
    cluster = Cluster(get_gpu("h100-sxm"), gpus, 8, "nvlink", get_network("roce-400"))
    arch = arch_from_model_args(MODEL_SIZES["llama3-405b"], "llama3-405b")
    return PublishedRun("llama3", f"405B, {gpus:,} GPUs", arch, 8192, dp * batch_per_dp, layout, cluster, tflops,
                        False)


PUBLISHED: list[PublishedRun] = [
    _megatron("1.7B", 2304, 24, 24, 1, 1, 32, 512, 137),
    _megatron("3.6B", 3072, 30, 32, 2, 1, 64, 512, 138),
    _megatron("7.5B", 4096, 36, 32, 4, 1, 128, 512, 142),
    _megatron("18.4B", 6144, 40, 48, 8, 1, 256, 1024, 135),
    _megatron("39.1B", 8192, 48, 64, 8, 2, 512, 1536, 138),
    _megatron("76.1B", 10240, 60, 80, 8, 4, 1024, 1792, 140),
    _megatron("145.6B", 12288, 80, 96, 8, 8, 1536, 2304, 148),
    _megatron("310.1B", 16384, 96, 128, 8, 16, 1920, 2160, 155),
    _megatron("529.6B", 20480, 105, 128, 8, 35, 2520, 2520, 163),
    _megatron("1008.0B", 25600, 128, 160, 8, 64, 3072, 3072, 163),
    _llama3(8192, 64, 32, 430),
    _llama3(16384, 128, 16, 400),
]


def predict(run: PublishedRun) -> float:
    """Predicted TFLOP/s per GPU, counted the way the publication counts."""
    st = step_time(run.arch, arch_flops_per_token(run.arch, run.seq_len), run.seq_len, run.global_batch,
                   run.layout, run.cluster)
    return st.hw_tflops_per_gpu if run.hardware_flops else st.model_tflops_per_gpu


def table() -> list[dict]:
    rows = []
    for run in PUBLISHED:
        pred = predict(run)
        lay = run.layout
        rows.append({"source": run.source, "run": run.label, "gpu": run.cluster.gpu.name, "gpus": run.cluster.gpus,
                     "tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "batch": run.global_batch,
                     "published": run.published_tflops, "predicted": round(pred, 1),
                     "error": (pred - run.published_tflops) / run.published_tflops})
    return rows


def markdown() -> str:
    lines = ["| source | run | GPU | GPUs | TP | PP | DP | batch | published TFLOP/s | predicted | error |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in table():
        lines.append(f"| {r['source']} | {r['run']} | {r['gpu']} | {r['gpus']:,} | {r['tp']} | {r['pp']} | "
                     f"{r['dp']} | {r['batch']:,} | {r['published']:.0f} | {r['predicted']:.1f} | "
                     f"{r['error']:+.1%} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown())
