"""The planner against published runs: every row of plan/published.py within ±10% at its published layout,
calibration and held-out alike, and Llama 3 405B's published layout feasible and near the search's best."""

from collections import defaultdict
from dataclasses import replace

import pytest

from bessemer.plan import calibration
from bessemer.plan.catalog import get_gpu, get_network
from bessemer.plan.footprint import GIB
from bessemer.plan.published import CALIBRATION, HELD_OUT, PUBLISHED
from bessemer.plan.search import Job, evaluate, memory_per_gpu, search
from bessemer.plan.throughput import Cluster
from bessemer.plan.workload import arch_flops_per_token

ROWS = calibration.table()
OUTSIDE = {run.label: run.outside for run in PUBLISHED if run.outside}


@pytest.mark.parametrize("row", [
    pytest.param(r, marks=pytest.mark.xfail(strict=True, reason=OUTSIDE[r["run"]])) if r["run"] in OUTSIDE else r
    for r in ROWS], ids=[f"{r['split']}: {r['source']}: {r['run']}" for r in ROWS])
def test_every_published_row_within_10_percent(row):
    assert abs(row["error"]) <= 0.10, row


def test_rows_outside_the_band_are_few_and_held_out():
    assert len(OUTSIDE) <= 2
    assert all(r.split == HELD_OUT for r in PUBLISHED if r.outside)


def test_held_out_rows_are_a_third_and_include_a_strong_scaling_series():
    splits = [r.split for r in PUBLISHED]
    assert set(splits) == {CALIBRATION, HELD_OUT}
    assert splits.count(HELD_OUT) >= len(splits) / 3
    # A strong-scaling series: one model at one global batch on at least three cluster sizes, all held out.
    series = defaultdict(set)
    for r in PUBLISHED:
        if r.split == HELD_OUT:
            series[(r.arch, r.seq_len, r.global_batch)].add(r.cluster.gpus)
    assert max(len(sizes) for sizes in series.values()) >= 3
    assert all(r.source and ("Table" in r.source or "§" in r.source or "docs/" in r.source) for r in PUBLISHED)


def test_strong_scaling_loses_throughput_as_the_per_replica_batch_shrinks():
    """Megatron's 175B at a fixed batch on 384 → 1,536 GPUs: the bubble's share grows, the prediction falls."""
    rows = [r for r in ROWS if r["run"].startswith("174.6B")]
    assert [r["gpus"] for r in rows] == [384, 768, 1536]
    assert rows[0]["predicted"] > rows[1]["predicted"] > rows[2]["predicted"]


def _llama3(gpus: int):
    return next(r for r in PUBLISHED if r.label.startswith(f"405B, {gpus:,} GPUs, seq 8,192"))


@pytest.mark.parametrize("gpus", [8192, 16384])
def test_llama3_405b_published_layout_fits_with_partial_recompute(gpus):
    run = _llama3(gpus)
    lay = calibration.layout_of(run)
    m = run.global_batch // (lay.dp * lay.micro_batch)
    assert (lay.tp, lay.pp, lay.dp) == (8, 16, gpus // 128)
    assert lay.recompute_label == "partial" and 0 < lay.recompute_layers < run.arch.n_layers
    total = memory_per_gpu(run.arch, run.seq_len, lay, m)["total"]
    assert total <= 0.9 * 80 * GIB
    # Without recomputation it would not fit: the recompute is what makes the published layout feasible.
    none = memory_per_gpu(run.arch, run.seq_len, replace(lay, recompute="none", recompute_layers=None), m)["total"]
    assert none > 0.9 * 80 * GIB


def test_llama3_405b_search_best_within_10_percent_of_the_published_layout():
    run = _llama3(16384)
    job = Job(run.arch, run.seq_len, run.global_batch, 15e12,
              Cluster(get_gpu("h100-sxm"), 16384, 8, "nvlink", get_network("roce-400")), 2.5)
    best = search(job).best
    published = evaluate(job, calibration.layout_of(run), arch_flops_per_token(run.arch, run.seq_len))
    assert published.memory["total"] <= job.capacity
    assert best.time.step_s <= published.time.step_s <= 1.10 * best.time.step_s
