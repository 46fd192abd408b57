"""The planner: published memory formulas, the step-time and memory model's terms, layout choice, errors, the
emitted config. Everything here is arithmetic except the last test, which trains the emitted config."""

import json
import os
import subprocess
import sys
import tomllib
from dataclasses import replace

import pytest

from bessemer.checkpoint.interval import young_daly
from bessemer.cli import main
from bessemer.model.registry import MODEL_SIZES, flops_per_token
from bessemer.plan.catalog import get_gpu, get_network
from bessemer.plan.fabric import fat_tree
from bessemer.plan.footprint import (
    Arch,
    layer_activation_bytes,
    model_state_bytes,
    pipeline_in_flight_factor,
)
from bessemer.plan.reliability import reliability_plan
from bessemer.plan.search import memory_per_gpu
from bessemer.plan.throughput import Cluster, Layout, attention_seconds, step_time
from bessemer.plan.workload import (
    arch_flops_per_token,
    arch_from_model_args,
    resolve_arch,
)

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
    (["--model", "llama3-8b", "--gpus", "64", "--headroom", "0.95"], "--headroom must be between 0 and 0.9"),
    (["--model", "llama3-8b", "--gpus", "64", "--cp", "3"], "--cp 3 does not divide --gpus 64"),
    (["--model", "llama3-8b", "--gpus", "64", "--recompute-layers", "40"], "--recompute-layers must be in 1..32"),
    (["--model", "llama3-8b", "--gpus", "64", "--mlp", "gelu"], "--mlp gelu describes a custom model"),
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


# ---------------------------------------------------------------- the step-time and memory model's terms

LLAMA70 = arch_from_model_args(MODEL_SIZES["llama3-70b"], "llama3-70b")
FPT70 = arch_flops_per_token(LLAMA70, 8192)


def _cluster(gpu="h100-sxm", gpus=512, network="ib-ndr", **kw) -> Cluster:
    return Cluster(get_gpu(gpu), gpus, 8, "nvlink", get_network(network), **kw)


def _step(layout, batch=512, cluster=None, arch=LLAMA70, seq=8192):
    return step_time(arch, arch_flops_per_token(arch, seq), seq, batch, layout, cluster or _cluster())


PIPE = Layout(tp=8, pp=8, dp_replicate=1, dp_shard=8, micro_batch=1, recompute="full")


def test_bubble_share_grows_as_the_per_replica_batch_shrinks():
    shares = [(st.bubble_s / st.step_s) for st in (_step(PIPE, b) for b in (512, 128, 64))]
    assert shares[0] < shares[1] < shares[2]
    st = _step(PIPE, 64)  # 8 micro-batches for 8 stages: the 1F1B bubble is (p - 1)/m of the work
    assert st.bubble_s / (st.step_s - st.bubble_s - st.dp_exposed_s) == pytest.approx(7 / 8)


def test_data_parallel_reduce_is_exposed_with_one_micro_batch_per_replica():
    fsdp = Layout(tp=1, pp=1, dp_replicate=1, dp_shard=512, micro_batch=1, recompute="full")
    one = _step(fsdp, 512, _cluster(network="roce-100"))  # nothing but its own compute to hide behind
    assert one.microbatches == 1 and one.dp_exposed_s > 0
    lay = Layout(tp=8, pp=4, dp_replicate=1, dp_shard=16, micro_batch=1, recompute="full")
    few, many = _step(lay, 64), _step(lay, 1024)
    assert few.dp_exposed_s / few.step_s > many.dp_exposed_s / many.step_s


def test_network_latency_and_oversubscription_change_step_time():
    lay = Layout(tp=8, pp=1, dp_replicate=1, dp_shard=64, micro_batch=1, recompute="full")
    ib, roce = _step(lay, cluster=_cluster(network="ib-ndr")), _step(lay, cluster=_cluster(network="roce-400"))
    assert roce.step_s > ib.step_s  # same 400 Gb/s, longer hops
    tp16 = Layout(tp=16, pp=1, dp_replicate=1, dp_shard=32, micro_batch=1, recompute="full")
    ib16, roce16 = (_step(tp16, cluster=_cluster(network=n)) for n in ("ib-ndr", "roce-400"))
    assert roce16.tp_s > ib16.tp_s
    # 4,096 GPUs span 512 nodes, more than one leaf reaches: an oversubscribed fabric slows the dp collectives.
    big = Layout(tp=8, pp=1, dp_replicate=1, dp_shard=512, micro_batch=1, recompute="full")
    flat = _step(big, 512, _cluster(gpus=4096))
    over = _step(big, 512, _cluster(gpus=4096, oversubscription=4.0))
    assert over.dp_total_s == pytest.approx(4 * flat.dp_total_s, rel=0.05) and over.step_s > flat.step_s
    small = Layout(tp=8, pp=1, dp_replicate=1, dp_shard=8, micro_batch=8, recompute="full")  # 8 nodes, one leaf
    assert _step(small, 64, _cluster(gpus=64, oversubscription=4.0)).step_s == \
        pytest.approx(_step(small, 64, _cluster(gpus=64)).step_s)


def test_gpu_efficiency_and_fp8_are_the_catalogs():
    lay = Layout(tp=8, pp=1, dp_replicate=1, dp_shard=64, micro_batch=1, recompute="full")
    h100 = get_gpu("h100-sxm")
    half = replace(h100, mm_efficiency=h100.mm_efficiency / 2, attn_efficiency=h100.attn_efficiency / 2)
    slow = Cluster(half, 512, 8, "nvlink", get_network("ib-ndr"))
    assert _step(lay, cluster=slow).compute_s > 1.8 * _step(lay).compute_s
    slow_attention = Cluster(replace(h100, attn_efficiency=h100.attn_efficiency / 2), 512, 8, "nvlink",
                             get_network("ib-ndr"))
    assert _step(lay).compute_s < _step(lay, cluster=slow_attention).compute_s < 1.5 * _step(lay).compute_s
    assert get_gpu("mi300x").mm_efficiency != get_gpu("a100-80gb").mm_efficiency
    fp8 = _step(replace(lay, fp8=True))
    assert fp8.compute_s < 0.85 * _step(lay).compute_s
    a100 = _cluster(gpu="a100-80gb")  # no FP8 tensor cores: unchanged
    assert _step(replace(lay, fp8=True), cluster=a100).step_s == pytest.approx(_step(lay, cluster=a100).step_s)


def test_gelu_mlp_has_two_matrices_of_4h():
    gelu = resolve_arch(None, 4096, 32, 32, 0, 0, 0, mlp="gelu")
    swiglu = resolve_arch(None, 4096, 32, 32, 0, 0, 0)
    assert (gelu.gated, gelu.ffn_hidden, swiglu.gated) == (False, 4 * 4096, True)
    assert gelu.layer_matmul_params() == 12 * 4096 ** 2
    assert swiglu.layer_matmul_params() == 4 * 4096 ** 2 + 3 * 4096 * swiglu.ffn_hidden


def test_selective_recompute_with_flash_attention_costs_compute_and_saves_memory():
    none, sel = (Layout(tp=8, pp=1, dp_replicate=1, dp_shard=64, micro_batch=1, recompute=r)
                 for r in ("none", "selective"))
    assert _step(sel).hw_tflops_per_gpu * _step(sel).step_s > _step(none).hw_tflops_per_gpu * _step(none).step_s
    assert _step(sel).step_s > _step(none).step_s
    assert memory_per_gpu(LLAMA70, 8192, sel, 1)["activations"] < memory_per_gpu(LLAMA70, 8192, none, 1)["activations"]


def test_partial_recompute_is_between_none_and_full():
    lay = Layout(tp=8, pp=8, dp_replicate=1, dp_shard=8, micro_batch=1, recompute="none")
    mems = [memory_per_gpu(LLAMA70, 8192, replace(lay, recompute=r, recompute_layers=k), 64)["activations"]
            for r, k in (("none", None), ("full", 20), ("full", 40), ("full", None))]
    steps = [_step(replace(lay, recompute=r, recompute_layers=k)).step_s
             for r, k in (("none", None), ("full", 20), ("full", 40), ("full", None))]
    assert mems[0] > mems[1] > mems[2] > mems[3]
    assert steps[0] < steps[1] < steps[2] < steps[3]


def test_context_parallelism_divides_activations_and_adds_an_exchange():
    lay = Layout(tp=8, pp=1, dp_replicate=1, dp_shard=8, micro_batch=1, recompute="full")
    cp4 = replace(lay, dp_shard=2, cp=4)
    assert cp4.world == lay.world == 64
    one, four = (memory_per_gpu(LLAMA70, 131072, x, 1)["activations"] for x in (lay, cp4))
    assert four < one / 3
    cluster = _cluster(gpus=64, network="roce-100")
    st = _step(cp4, 8, cluster, seq=131072)
    assert st.cp_s >= 0 and _step(replace(cp4, cp=4), 8, cluster, seq=8192).cp_s > 0  # short sequences: exposed


def test_headroom_flag_shrinks_what_a_layout_may_use(capsys):
    base = plan_json(capsys, "--model", "llama3-8b", "--gpus", "64")["configs"][0]
    tight = plan_json(capsys, "--model", "llama3-8b", "--gpus", "64", "--headroom", "0.6")["configs"][0]
    assert base["memory_gib_per_gpu"]["total"] <= 72 and tight["memory_gib_per_gpu"]["total"] <= 32
    assert tight["step_time_s"] >= base["step_time_s"]


def test_fp8_flag_speeds_up_an_h100_plan(capsys):
    base = plan_json(capsys, "--model", "llama3-8b", "--gpus", "64")["configs"][0]
    fp8 = plan_json(capsys, "--model", "llama3-8b", "--gpus", "64", "--fp8")["configs"][0]
    assert fp8["fp8"] and not base["fp8"] and fp8["step_time_s"] < base["step_time_s"]


def test_partial_recompute_flag_picks_the_fewest_layers(capsys):
    part = plan_json(capsys, "--model", "llama3-70b", "--gpus", "64", "--recompute", "partial", "--pp", "1",
                     "--tp", "8")["configs"][0]
    assert part["recompute"] == "partial" and 0 < part["recompute_layers"] < 80
    pinned = plan_json(capsys, "--model", "llama3-70b", "--gpus", "64", "--recompute-layers", "60", "--pp", "1",
                       "--tp", "8")["configs"][0]
    assert pinned["recompute_layers"] == 60 and pinned["step_time_s"] > part["step_time_s"]


def test_cp_and_mlp_flags(capsys):
    cp = plan_json(capsys, "--model", "llama3-8b", "--gpus", "64", "--seq-len", "131072", "--cp", "8")["configs"][0]
    assert cp["cp"] == 8 and "cp_comm" in cp["breakdown_s"]
    gelu = plan_json(capsys, "--hidden", "4096", "--layers", "32", "--heads", "32", "--gpus", "64", "--mlp", "gelu")
    swiglu = plan_json(capsys, "--hidden", "4096", "--layers", "32", "--heads", "32", "--gpus", "64")
    assert gelu["configs"][0]["step_time_s"] != swiglu["configs"][0]["step_time_s"]


def test_a_context_parallel_plan_is_explained(capsys):
    """cp over PCIe at 16K tokens: the K/V exchanges outrun the attention that hides them, and the step-time
    line names them; a free search at 64K tokens picks cp and compares it with layouts that have none."""
    out = plan_json(capsys, "--model", "llama3-8b", "--gpus", "64", "--gpu", "h100-sxm", "--seq-len", "16384",
                    "--global-batch", "64", "--network", "roce-400", "--cp", "8", "--tp", "1", "--pp", "1", "--intra-node", "pcie")
    assert out["configs"][0]["breakdown_s"]["cp_comm"] > 0
    assert out["explanation"][0].startswith("Best: tp 1, pp 1, cp 8,")
    assert "context-parallel K/V exchanges left exposed" in out["explanation"][1]
    free = plan_json(capsys, "--model", "llama3-8b", "--gpus", "64", "--gpu", "h100-sxm", "--seq-len", "65536",
                     "--global-batch", "64", "--network", "ib-ndr")
    assert free["configs"][0]["cp"] > 1
    assert any("tp 8: best such layout (tp 8, pp 1, dp" in line for line in free["explanation"])  # no cp there


def test_flash_attention_runs_its_causal_half_at_the_kernels_published_efficiency():
    """7/12 of the counted 12·h·s per token and layer (causal, backward 2.5x forward) at attn_efficiency;
    unfused attention all 12·h·s at the GEMM efficiency; a GPU without a published figure uses its GEMM one."""
    h100, a100 = get_gpu("h100-sxm"), get_gpu("a100-80gb")
    arch = resolve_arch("llama3-8b", 0, 0, 0, 0, 0, 0)
    counted = arch.n_layers * 12 * arch.dim * 8192
    assert attention_seconds(arch, 8192, 0, h100) == pytest.approx(
        counted * 7 / 12 / (989e12 * h100.attn_efficiency))
    assert attention_seconds(arch, 8192, arch.n_layers, h100) == pytest.approx(
        counted * 9 / 12 / (989e12 * h100.attn_efficiency))  # + the forward again: 2 of 12
    assert attention_seconds(arch, 8192, 0, a100) == pytest.approx(counted * 7 / 12 / (312e12 * a100.mm_efficiency))
    gpt = replace(arch, flash=False)
    assert attention_seconds(gpt, 8192, 0, h100) == pytest.approx(counted / (989e12 * h100.mm_efficiency))
