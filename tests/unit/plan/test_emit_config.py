"""`bessemer plan --emit-config`: the prediction goes into the config's `[plan]` table, the config loads, and
the run report of a run made from it shows predicted vs measured — and says when the two are not comparable."""

import json
import math
import os
import subprocess
import sys
import tomllib

import pytest

from bessemer.cli import main
from bessemer.config import load_config, to_toml
from bessemer.errors import ConfigError
from bessemer.plan.report import checkpoint_every
from bessemer.report.prediction import compare, read_plan
from bessemer.report.run_report import build_report

BESSEMER = [sys.executable, "-m", "bessemer.cli"]
PLAN = ["plan", "--model", "debug", "--gpus", "4", "--gpus-per-node", "4", "--gpu", "a100-40gb", "--seq-len",
        "128", "--global-batch", "8", "--tokens", "4096", "--json"]


@pytest.fixture
def emitted(tmp_path, capsys):
    """(path of the emitted config, the JSON plan's best layout)."""
    path = tmp_path / "run.toml"
    assert main([*PLAN, "--emit-config", str(path)]) == 0
    return path, json.loads(capsys.readouterr().out)["configs"][0]


def test_the_config_carries_the_prediction(emitted):
    path, best = emitted
    plan = tomllib.loads(path.read_text())["plan"]
    assert plan["gpu"] == "a100-40gb" and plan["gpus"] == 4
    assert plan["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-5, abs=1e-6)  # JSON: 6 decimals
    assert plan["tokens_per_s"] == pytest.approx(best["tokens_per_s"], rel=1e-5)
    assert plan["mfu"] == pytest.approx(best["mfu"], rel=1e-3)
    assert plan["memory_gib_per_rank"] == pytest.approx(best["memory_gib_per_gpu"]["total"], rel=1e-3)
    assert f"tp {best['tp']}, pp {best['pp']}" in plan["layout"]
    cfg = load_config(path)
    assert cfg.plan.gpu == "a100-40gb" and cfg.plan.step_time_s > 0
    assert "[plan]" in to_toml(cfg)  # the trainer's resolved config keeps it for the report


def test_a_config_without_plan_loads_and_a_bad_prediction_is_refused(tmp_path):
    assert load_config("configs/debug.toml").plan.gpu == ""
    with pytest.raises(ConfigError, match=r"plan.mfu must be a fraction in \[0, 1\], got 2.0"):
        load_config("configs/debug.toml", ["--plan.mfu=2"])
    assert read_plan(tmp_path / "missing.toml") == {}


def _fake_run(run_dir, config_text: str, device: str, world_size: int) -> None:
    """What a 3-step run leaves: the resolved config and metrics.jsonl (the trainer's record shapes)."""
    run_dir.mkdir()
    (run_dir / "config.toml").write_text(config_text)
    lines = [{"event": "run_started", "step": 0, "layout": "dp 1", "world_size": world_size, "device": device}]
    lines += [{"step": s, "loss": 7.0 - s * 0.1, "lr": 1e-4, "grad_norm": 1.0, "tokens_per_s": 2000.0,
               "mfu": 0.02, "step_time_s": 0.5, "tokens_seen": 1024 * s, "peak_mem_gib": 0.3} for s in (1, 2, 3)]
    (run_dir / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")


def test_report_shows_predicted_vs_measured_and_that_cpu_is_not_comparable(emitted, tmp_path):
    path, _ = emitted
    predicted = tomllib.loads(path.read_text())["plan"]
    run = tmp_path / "R"
    _fake_run(run, to_toml(load_config(path)), device="cpu", world_size=4)
    page = build_report(run).read_text()
    assert "<h2>Predicted vs measured</h2>" in page
    assert f"<td>{predicted['step_time_s']:.4g}</td><td>0.5</td>" in page  # predicted, measured step time
    assert f"<td>{predicted['mfu']:.1%}</td><td>2.0%</td>" in page  # predicted, measured MFU
    assert "The run ran on CPU, the plan is for 4 x a100-40gb: the numbers are not comparable" in page


def test_comparability_follows_device_and_world_size():
    plan = {"gpu": "h100-sxm", "gpus": 8, "step_time_s": 2.0, "tokens_per_s": 1000.0, "mfu": 0.4,
            "memory_gib_per_rank": 60.0}
    summary = {"mean_step_time_s": 2.5, "mean_tokens_per_s": 800.0, "mean_mfu": 0.32}
    same = compare(plan, summary, 58.0, {"device": "cuda", "world_size": 8})
    assert same["comparable"] and ("step time (s)", "2", "2.5", "1.25x") in same["rows"]
    assert ("MFU", "40.0%", "32.0%", "0.80x") in same["rows"]
    assert "compare only if they are h100-sxm" in same["notes"][0]
    other = compare(plan, summary, None, {"device": "cuda", "world_size": 4})
    assert not other["comparable"] and "4 ranks, the plan 8 GPUs" in other["notes"][-1]
    assert ("memory per rank (GiB)", "60.00", "-", "-") in other["rows"]
    assert not compare(plan, summary, None, None)["comparable"]


def test_a_run_without_prediction_has_no_section(tmp_path):
    run = tmp_path / "R"
    _fake_run(run, "[train]\nsteps = 3\n", device="cpu", world_size=1)
    assert "Predicted vs measured" not in build_report(run).read_text()


@pytest.mark.slow
def test_a_cpu_run_from_the_emitted_config_reports_prediction_and_measurement(tmp_path):
    """The whole path: plan the debug model for one GPU, train 3 steps of that config on CPU, build the report."""
    cfg, run = tmp_path / "run.toml", tmp_path / "R"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    plan = subprocess.run([*BESSEMER, "plan", "--model", "debug", "--gpus", "1", "--gpu", "a100-40gb", "--seq-len",
                           "128", "--global-batch", "8", "--tokens", "4096", "--emit-config", str(cfg)],
                          capture_output=True, text=True, env=env, timeout=60)
    assert plan.returncode == 0, plan.stderr
    train = subprocess.run([*BESSEMER, "train", str(cfg), f"--run.dir={run}", "--train.steps=3",
                            "--checkpoint.micro.interval=0", "--checkpoint.at_end=false",
                            "--metrics.tensorboard=false"], capture_output=True, text=True, env=env, timeout=120)
    assert train.returncode == 0, train.stderr[-3000:]
    report = subprocess.run([*BESSEMER, "report", str(run)], capture_output=True, text=True, env=env, timeout=60)
    assert report.returncode == 0, report.stderr
    page = (run / "report" / "index.html").read_text()
    predicted = tomllib.loads(cfg.read_text())["plan"]
    assert f"<td>{predicted['step_time_s']:.4g}</td>" in page and f"<td>{predicted['mfu']:.1%}</td>" in page
    assert "The run ran on CPU, the plan is for 1 x a100-40gb: the numbers are not comparable" in page


def _emit_with(tmp_path, capsys, *flags) -> dict:
    path = tmp_path / "ac.toml"
    assert main(["plan", "--model", "tiny", "--gpus", "4", "--gpus-per-node", "4", "--gpu", "a100-40gb",
                 "--seq-len", "128", "--global-batch", "8", "--tokens", "4096", *flags, "--emit-config",
                 str(path)]) == 0
    capsys.readouterr()
    return load_config(path).precision.activation_checkpoint


def test_partial_recompute_is_emitted_as_the_planned_number_of_checkpointed_blocks(tmp_path, capsys):
    """k = 3 of tiny's 8 layers: the trainer's own wrapping (parallel/recompute.py) wraps exactly 3."""
    torch = pytest.importorskip("torch")
    from bessemer.parallel.recompute import apply_activation_checkpointing

    ac = _emit_with(tmp_path, capsys, "--recompute", "partial", "--recompute-layers", "3")
    assert (ac.mode, ac.every, ac.save_ops) == ("selective", 3, [])
    blocks = torch.nn.Module()
    blocks.layers = torch.nn.ModuleDict({str(i): torch.nn.Linear(2, 2) for i in range(8)})
    assert apply_activation_checkpointing(blocks, ac) == ["layers.0", "layers.3", "layers.6"]


@pytest.mark.parametrize("n_layers", [8, 80, 126])
def test_checkpoint_every_wraps_the_fewest_blocks_that_cover_k(n_layers):
    for k in range(1, n_layers + 1):
        every = checkpoint_every(n_layers, k)
        assert math.ceil(n_layers / every) >= k
        assert every == n_layers or math.ceil(n_layers / (every + 1)) < k  # a larger stride wraps too few


def test_selective_recompute_keeps_only_the_matmul_outputs(tmp_path, capsys):
    """The planner's "selective" drops the attention core's output and the SwiGLU gate (plan/footprint.py):
    save_ops keeps the matmul outputs and recomputes sdpa and silu."""
    ac = _emit_with(tmp_path, capsys, "--recompute", "selective")
    assert (ac.mode, ac.save_ops) == ("selective", ["mm"])
    assert _emit_with(tmp_path, capsys, "--recompute", "full").mode == "full"
