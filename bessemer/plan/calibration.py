"""The planner's predictions for the published runs of plan/published.py, and their errors.

`python -m bessemer.plan.calibration` prints the two tables docs/plan.md carries (calibration rows, then
held-out rows); tests/unit/plan/test_published.py holds every row within ±10%. One set of constants
(plan/throughput.py, and mm_efficiency per GPU in plan/catalog.py) serves every row. Fitting: the constants
were adjusted by hand, watching only the calibration rows' errors: the A100's mm_efficiency and the unfused
element-wise traffic on Megatron's Table 1, the fused element-wise traffic on torchtitan's A100 rows (refitted
when flash attention got its causal saving and its published efficiency, which is not fitted), the H100's
mm_efficiency on Llama 3's 8,192-GPU row; the held-out rows were predicted once they were fixed.
"""

from dataclasses import replace

from bessemer.plan.footprint import GIB
from bessemer.plan.published import CALIBRATION, HELD_OUT, PUBLISHED, PublishedRun
from bessemer.plan.search import HEADROOM, fewest_recomputed_layers, memory_per_gpu
from bessemer.plan.throughput import Layout, step_time
from bessemer.plan.workload import arch_flops_per_token


def layout_of(run: PublishedRun) -> Layout:
    """The row's layout; for a source that does not say what it recomputes, full recomputation of the fewest
    layers that fit in (1 − headroom) of the GPU's memory (none if it fits without)."""
    lay = run.layout
    if not run.partial_recompute:
        return lay
    m = run.global_batch // (lay.dp * lay.micro_batch)
    capacity = run.cluster.gpu.memory_gb * GIB * (1 - HEADROOM)
    k = fewest_recomputed_layers(run.arch, run.seq_len, lay, m, capacity)
    if k is None:
        fits = memory_per_gpu(run.arch, run.seq_len, replace(lay, recompute="none"), m)["total"] <= capacity
        return replace(lay, recompute="none" if fits else "full", recompute_layers=None)
    return replace(lay, recompute_layers=k)


def predict(run: PublishedRun) -> float:
    """Predicted TFLOP/s per GPU, counted the way the publication counts."""
    st = step_time(run.arch, arch_flops_per_token(run.arch, run.seq_len), run.seq_len, run.global_batch,
                   layout_of(run), run.cluster)
    return st.hw_tflops_per_gpu if run.hardware_flops else st.model_tflops_per_gpu


def table() -> list[dict]:
    rows = []
    for run in PUBLISHED:
        pred = predict(run)
        lay = layout_of(run)
        recompute = lay.recompute_label + (f" {lay.recompute_layers}/{run.arch.n_layers}"
                                           if lay.recompute_label == "partial" else "")
        rows.append({"source": run.source, "run": run.label, "split": run.split, "gpu": run.cluster.gpu.name,
                     "gpus": run.cluster.gpus, "tp": lay.tp, "pp": lay.pp, "cp": lay.cp, "dp": lay.dp,
                     "batch": run.global_batch, "recompute": recompute, "published": run.published_tflops,
                     "predicted": round(pred, 1), "error": (pred - run.published_tflops) / run.published_tflops,
                     "peak": run.cluster.gpu.bf16_tflops})
    return rows


def markdown(split: str) -> str:
    lines = [("| source | run | GPUs | TP | PP | CP | DP | batch | recompute | published TFLOP/s (% of peak) | "
              "predicted | error |"), "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in table():
        if r["split"] != split:
            continue
        lines.append(f"| {r['source']} | {r['run']} | {r['gpus']:,} | {r['tp']} | {r['pp']} | {r['cp']} | "
                     f"{r['dp']} | {r['batch']:,} | {r['recompute']} | {r['published']:.0f} "
                     f"({r['published'] / r['peak']:.1%}) | {r['predicted']:.1f} | {r['error']:+.1%} |")
    return "\n".join(lines)


if __name__ == "__main__":
    for name in (CALIBRATION, HELD_OUT):
        print(f"{name} rows\n\n{markdown(name)}\n")
