"""The planner: published memory formulas, calibration against published runs, layout choice, errors, the
emitted config. Everything here is arithmetic except the last test, which trains the emitted config."""

import json
import os
import subprocess
import sys
import tomllib

import pytest

from bessemer.checkpoint.interval import young_daly
from bessemer.cli import main
from bessemer.model.registry import MODEL_SIZES, flops_per_token
from bessemer.plan import calibration
from bessemer.plan.fabric import fat_tree
from bessemer.plan.footprint import Arch, layer_activation_bytes, model_state_bytes, pipeline_in_flight_factor
from bessemer.plan.reliability import reliability_plan
from bessemer.plan.workload import arch_flops_per_token, arch_from_model_args

BESSEMER = [sys.executable, "-m", "bessemer.cli"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def plan_json(capsys, *args) -> dict:
    assert main(["plan", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_zero_paper_model_states_for_7_5b_on_64_gpus():
    """Rajbhandari et al. 2020, Figure 1: 120 / 31.4 / 16.6 / 1.9 GB per GPU."""
    got = [round(model_state_bytes(7.5e9, zero, 64)["total"] / 1e9, 1) for zero in (0, 1, 2, 3)]
    assert got == [120.0, 31.4, 16.6, 1.9]


GPT3 = Arch(dim=12288, n_layers=96, n_heads=96, n_kv_heads=96, ffn_hidden=4 * 12288, vocab_size=51200,
            gated=False, flash=False, dropout=True)


@pytest.mark.parametrize("t", [1, 2, 8])
@pytest.mark.parametrize("b", [1, 4])
def test_activation_bytes_per_layer_are_korthikanti_table_2(t, b):
    s, h, a = 2048, GPT3.dim, GPT3.n_heads
    sbh = s * b * h
    table = {  # Korthikanti et al. 2022, Table 2
        ("none", False): sbh * (10 + 24 / t + 5 * a * s / (h * t)),
        ("none", True): sbh * (34 / t + 5 * a * s / (h * t)),
        ("selective", False): sbh * (10 + 24 / t),
        ("selective", True): sbh * 34 / t,
        ("full", False): 2 * sbh,
    }
    if t == 1:
        assert layer_activation_bytes(GPT3, s, b) == pytest.approx(sbh * (34 + 5 * a * s / h), rel=1e-12)
    for (recompute, sp), expected in table.items():
        got = layer_activation_bytes(GPT3, s, b, tp=t, sequence_parallel=sp, recompute=recompute)
        assert got == pytest.approx(expected, rel=1e-12), (recompute, sp)


def test_pipeline_in_flight_factors():
    assert pipeline_in_flight_factor("1f1b", 8, 1, 64) == 1.0  # p micro-batches of L/p layers
    assert pipeline_in_flight_factor("interleaved_1f1b", 8, 2, 64) == pytest.approx(1 + 7 / 16)
    assert pipeline_in_flight_factor("gpipe", 8, 1, 64) == 8.0


def test_flops_are_the_trainers_function_for_registry_models():
    for name, args in MODEL_SIZES.items():
        assert arch_flops_per_token(arch_from_model_args(args), 4096) == flops_per_token(args, 4096), name


def test_calibration_every_published_row_within_15_percent():
    rows = calibration.table()
    assert {r["source"] for r in rows} == {"megatron", "llama3"}
    bad = [r for r in rows if abs(r["error"]) > 0.15]
    assert not bad, bad


def test_llama3_70b_on_512_h100_picks_tp_within_a_node_and_explains(capsys):
    out = plan_json(capsys, "--model", "llama3-70b", "--gpus", "512", "--gpu", "h100-sxm")
    best = out["configs"][0]
    assert 1 < best["tp"] <= 8
    assert any(f"tp {best['tp']} stays within a node" in line for line in out["explanation"])
    assert any(line.strip().startswith("tp 8") or line.strip().startswith("tp 1") for line in out["explanation"])
    for key in ("tp", "pp", "dp_replicate", "dp_shard", "microbatch", "recompute", "schedule", "step_time_s",
                "tokens_per_s", "tflops_per_gpu", "mfu", "time_to_train_days", "cost"):
        assert key in best
    assert set(best["memory_gib_per_gpu"]) >= {"params", "grads", "optimizer", "activations", "total"}
    assert best["memory_gib_per_gpu"]["total"] <= 80
    pcie = plan_json(capsys, "--model", "llama3-70b", "--gpus", "512", "--gpu", "h100-sxm", "--intra-node", "pcie")
    assert pcie["configs"][0]["tp"] != 8
    assert pcie["configs"][0]["step_time_s"] > best["step_time_s"]


def test_search_over_16384_gpus(capsys):
    out = plan_json(capsys, "--model", "llama3-405b", "--gpus", "16384", "--network", "roce-400")
    assert out["evaluated"] > 1000 and out["configs"][0]["tp"] <= 8
    assert out["fabric"]["levels"] == 3


@pytest.mark.parametrize("args, message", [
    (["--model", "llama3-8b", "--gpus", "64", "--gpu", "x100"], "unknown GPU 'x100'"),
    (["--model", "llama3-405b", "--gpus", "8"], "does not fit on 8 x h100-sxm"),
    (["--model", "llama3-8b", "--gpus", "48", "--tp", "3"], "tp 3 does not divide the model's n_heads (32)"),
    (["--model", "llama3-8b", "--gpus", "64", "--tp", "128"], "--tp 128 does not divide --gpus 64"),
    (["--hidden", "4096", "--layers", "32", "--gpus", "8"], "--hidden, --layers and --heads"),
    (["--model", "llama3-9b", "--gpus", "8"], "unknown model 'llama3-9b'"),
])
def test_bad_input_is_one_line_naming_the_constraint(capsys, args, message):
    assert main(["plan", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_fat_tree_sizing():
    # The example: 800 GPUs at 200 Gb/s with 8:1 oversubscription need 800 x 200 / 8 Gb/s above the leaves.
    t = fat_tree(800, 200, 40, 8)
    assert t.spine_capacity_tbps == pytest.approx(20.0)
    assert t.leaf_down + t.leaf_up == 40 and t.leaf_down / t.leaf_up >= 7
    nb = fat_tree(512, 400, 64, 1)
    assert (nb.levels, nb.leaves, nb.spines, nb.bisection_tbps) == (2, 16, 8, pytest.approx(102.4))
    assert fat_tree(8, 400, 64).levels == 1
    big = fat_tree(16384, 400, 64)
    assert big.levels == 3 and big.leaves * big.leaf_down >= 16384


def test_reliability_uses_the_checkpointers_interval():
    r = reliability_plan(gpus=1000, gpu_mtbf_hours=50_000, compute_hours=240, save_s=60, restart_s=600, step_s=5)
    assert r.cluster_mtbf_hours == pytest.approx(50.0)
    assert r.interval_s == pytest.approx(young_daly(60, 50 * 3600))
    assert 0.9 < r.goodput < 1 and r.expected_failures == pytest.approx(r.run_hours / 50)


def test_plan_imports_no_torch():
    code = ("import sys; from bessemer.cli import main; "
            "assert main(['plan', '--model', 'llama3-8b', '--gpus', '16', '--json']) == 0; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_emitted_config_passes_dry_run(tmp_path):
    cfg = tmp_path / "run.toml"
    proc = subprocess.run([*BESSEMER, "plan", "--model", "llama3-70b", "--gpus", "512", "--emit-config", str(cfg),
                           "--chart", str(tmp_path / "mem.png")], capture_output=True, text=True, env=ENV, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "mem.png").stat().st_size > 0
    doc = tomllib.loads(cfg.read_text())
    dry = subprocess.run([*BESSEMER, "train", str(cfg), "--dry-run", "--nproc", "512"], capture_output=True,
                         text=True, env=ENV, timeout=60)
    assert dry.returncode == 0, dry.stderr
    p = doc["parallel"]
    assert f"tp={p['tp']}" in dry.stdout.replace(" ", "") or f"tp = {p['tp']}" in dry.stdout
    assert "memory per rank" in dry.stdout


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_scaled_down_emitted_config_trains_on_cpu(tmp_path):
    """The planner's output for the debug model on 4 'GPUs', pinned to tp 2 x pp 2, trains with 4 processes."""
    cfg = tmp_path / "run.toml"
    proc = subprocess.run([*BESSEMER, "plan", "--model", "debug", "--gpus", "4", "--gpus-per-node", "4",
                           "--gpu", "a100-40gb", "--seq-len", "128", "--global-batch", "8", "--tokens", "4096",
                           "--tp", "2", "--pp", "2", "--emit-config", str(cfg)],
                          capture_output=True, text=True, env=ENV, timeout=60)
    assert proc.returncode == 0, proc.stderr
    run = tmp_path / "R"
    train = subprocess.run([*BESSEMER, "train", str(cfg), "--nproc", "4", f"--run.dir={run}", "--train.steps=3",
                            "--checkpoint.micro.interval=0", "--checkpoint.at_end=false"],
                           capture_output=True, text=True, env=ENV, timeout=540)
    assert train.returncode == 0, train.stderr[-3000:]
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in steps if "loss" in r and "event" not in r]
    assert [r["step"] for r in steps] == [1, 2, 3]
