"""`bessemer plan` input: every numeric flag's range (one line naming the flag and the range, exit 2), `--help`
with defaults and examples, and the explanation's and report's wording."""

import argparse
import os
import re
import subprocess
import sys
import time

import pytest

from bessemer.cli import build_parser, main
from bessemer.plan import cli as plan_cli
from bessemer.plan.catalog import get_gpu, get_network
from bessemer.plan.explain import _compute_note, explain
from bessemer.plan.report import count, rate, size
from bessemer.plan.search import Job, Pins, evaluate, search
from bessemer.plan.throughput import Cluster, Layout
from bessemer.plan.workload import arch_flops_per_token, resolve_arch

BASE = ["plan", "--model", "debug", "--gpus", "8", "--gpu", "a100-40gb", "--seq-len", "128", "--tokens", "1M"]


@pytest.mark.parametrize("args, message", [
    (["--micro-batch", "0"], "--micro-batch must be >= 1, got 0"),
    (["--storage-write-gbs", "0"], "--storage-write-gbs must be > 0, got 0"),
    (["--radix", "1"], "--radix must be >= 4, or 0 = the network's, got 1"),
    (["--nics-per-node", "-1"], "--nics-per-node must be >= 1, or 0 = one per GPU, got -1"),
    (["--oversubscription", "0.5"], "--oversubscription must be >= 1, got 0.5"),
    (["--tokens", "-5"], "--tokens must be > 0, got -5"),
    (["--tokens", "inf"], "--tokens must be > 0, got inf"),
    (["--price", "-1"], "--price must be > 0, or 0 = the catalog's, got -1"),
    (["--price", "nan"], "--price must be > 0, or 0 = the catalog's, got nan"),
    (["--gpu-mtbf-hours", "-1"], "--gpu-mtbf-hours must be > 0, or 0 = the checkpoint config's, got -1"),
    (["--gpus", "0"], "--gpus must be >= 1, got 0"),
    (["--gpus-per-node", "0"], "--gpus-per-node must be >= 1, got 0"),
    (["--gpus", "12"], "--gpus 12 is not a whole number of nodes of --gpus-per-node 8"),
    (["--seq-len", "0"], "--seq-len must be >= 1, got 0"),
    (["--global-batch", "-8"], "--global-batch must be >= 1, or 0 = ~4M tokens, got -8"),
    (["--tp", "0"], "--tp must be >= 1, got 0"),
    (["--pp", "-2"], "--pp must be >= 1, got -2"),
    (["--dp-shard", "0"], "--dp-shard must be >= 1, got 0"),
    (["--dp-replicate", "0"], "--dp-replicate must be >= 1, got 0"),
    (["--ckpt-stall-s", "0"], "--ckpt-stall-s must be > 0, got 0"),
    (["--restart-min", "-1"], "--restart-min must be >= 0, got -1"),
    (["--top", "0"], "--top must be >= 1, got 0"),
    (["--hidden", "-128"], "--hidden must be >= 1, or 0 = the model's, got -128"),
])
def test_a_bad_flag_is_one_line_naming_it_and_its_range(capsys, args, message):
    assert main([*BASE, *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err == f"bessemer plan: error: {message}"


def test_zero_sentinels_and_edges_are_accepted(capsys):
    assert main([*BASE, "--gpu-mtbf-hours", "0", "--radix", "0", "--price", "0", "--nics-per-node", "0",
                 "--oversubscription", "1", "--restart-min", "0", "--json"]) == 0
    assert capsys.readouterr().out.lstrip().startswith("{")


def _plan_parser() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["plan"]


def test_every_numeric_flag_has_a_range():
    numeric = {a.dest for a in _plan_parser()._actions if a.type in (int, float, plan_cli._number)}
    assert numeric and numeric <= {dest for dest, *_ in plan_cli.LIMITS}, numeric - {d for d, *_ in plan_cli.LIMITS}


def test_help_shows_every_default_and_examples():
    parser = _plan_parser()
    text = " ".join(parser.format_help().split())  # whatever the terminal width wrapped
    assert "examples:" in text and "bessemer plan --model llama3-70b --gpus 512" in text
    assert "(default: 8192)" in text and "(default: 1T)" in text and "(0 = the model's) (default: 0)" in text
    formatter = parser._get_formatter()
    for action in parser._actions:
        if action.option_strings and action.nargs != 0:  # flags that take a value (not --json, --help)
            shown = formatter._get_help_string(action)
            assert "default" in shown or action.required, action.option_strings


def test_help_is_fast_and_imports_no_torch():
    code = ("import sys; from bessemer.cli import main\ntry:\n    main(['plan', '--help'])\nexcept SystemExit:\n"
            "    pass\nassert 'torch' not in sys.modules, 'torch imported'")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "--micro-batch" in proc.stdout and time.perf_counter() - t0 < 5  # generous: a loaded test machine


@pytest.mark.parametrize("gbs, text", [(12.5, "12.5 GB/s"), (1234.0, "1,234 GB/s"), (0.0123, "12.3 MB/s"),
                                       (0.00041, "410 kB/s"), (2e-7, "200 B/s")])
def test_rates_keep_their_digits(gbs, text):
    assert rate(gbs) == text


def test_a_small_model_prints_no_zeros(capsys):
    assert main([*BASE]) == 0
    out = " ".join(capsys.readouterr().out.split())
    reads = re.search(r"reads: ([\d.,]+) (GB|MB|kB|B)/s of token shards", out)
    assert reads and float(reads[1].replace(",", "")) >= 1, out
    saves = re.search(r"checkpoint: ([\d.,]+) (GB|MB|kB|B) per save", out)
    assert saves and float(saves[1].replace(",", "")) >= 1, out
    assert re.search(r"debug: [\d.]+M parameters", out) and not re.search(r"\b0\.0+ [kMG]?B", out)


def test_counts_and_sizes_keep_their_digits():
    assert (count(70.6e9), count(405e9), count(7.3e6), count(512)) == ("70.6B", "405B", "7.3M", "512")
    assert (size(0.0123), size(88.0)) == ("12.3 MB", "88 GB")


def _job(model: str, gpus: int) -> Job:
    cluster = Cluster(gpu=get_gpu("h100-sxm"), gpus=gpus, gpus_per_node=8, intra="nvlink",
                      network=get_network("ib-ndr"))
    arch = resolve_arch(model, 0, 0, 0, 0, 0, 0)
    return Job(arch=arch, seq_len=8192, global_batch=512, tokens=1e12, cluster=cluster, price_per_hour=2.5)


def test_recompute_notes_say_only_what_is_true():
    job = _job("llama3-70b", 512)
    fpt = arch_flops_per_token(job.arch, job.seq_len)

    def cand(**kw):
        return evaluate(job, Layout(**{"tp": 8, "pp": 1, "dp_replicate": 1, "dp_shard": 64, "micro_batch": 1,
                                       "recompute": "selective", **kw}), fpt)

    best = cand()
    # Recomputing less than the winner: compute did not grow by recomputing, so no recompute note at all.
    assert _compute_note(cand(recompute="none"), best, job) == ""
    # Same degrees, more recompute: no "less model parallelism".
    same = _compute_note(cand(recompute="full"), best, job)
    assert "recompute full" in same and "less model parallelism" not in same
    # tp 1 on 70B: needs full recompute to fit, and does have less model parallelism.
    small = _compute_note(cand(tp=1, dp_shard=512, recompute="full"), best, job)
    assert "less model parallelism (tp x pp x cp 1 vs 8)" in small and "fits only by recomputing" in small
    need, have = (float(x) for x in small.split("would need ")[1].split(" GiB")[0].split(" of the "))
    assert need > have == pytest.approx(job.capacity / 2 ** 30, abs=0.05)


def test_explanation_never_contradicts_itself():
    job = _job("llama3-70b", 512)
    lines = explain(search(job, Pins()), job)
    forced = [line for line in lines if "fits only by recomputing" in line]
    assert forced, lines  # the tp 1 / tp 2 alternatives recompute to fit
    for line in lines:
        assert not ("recompute none:" in line and "recomputing" in line), line
        if "less model parallelism" in line:
            a, b = line.split("tp x pp x cp ")[1].split(")")[0].split(" vs ")
            assert int(a) < int(b), line
