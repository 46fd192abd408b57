"""End to end through the `bessemer` command, as a user runs it: real processes, real signals, real files."""

import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from bessemer.config import load_config
from bessemer.report.run_report import read_metrics

BESSEMER = [sys.executable, "-m", "bessemer.cli"]
ENV = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
STEP_KEYS = {"step", "loss", "lr", "grad_norm", "tokens_per_s", "mfu", "step_time_s"}


def bessemer(*args, check=True):
    proc = subprocess.run([*BESSEMER, *args], capture_output=True, text=True, env=ENV, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def losses(run_dir) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_metrics(Path(run_dir) / "metrics.jsonl")[0]}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted 50-step run of configs/debug.toml (deterministic, fp32)."""
    run = tmp_path_factory.mktemp("ref") / "R"
    bessemer("train", "configs/debug.toml", "--train.steps=50", f"--run.dir={run}")
    return run


def test_debug_run_writes_50_step_records_and_resolved_config(reference):
    records, events = read_metrics(reference / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(1, 51))
    for r in records:
        assert STEP_KEYS <= r.keys()
        assert r["tokens_per_s"] > 0 and 0 < r["mfu"] and r["step_time_s"] > 0
    assert records[-1]["loss"] < records[0]["loss"] - 1.0  # it learns
    assert any(e["event"] == "checkpoint_saved" and e["step"] == 50 for e in events)
    resolved = load_config(reference / "config.toml")
    assert resolved.train.steps == 50 and resolved.run.dir == str(reference)
    assert resolved.model.vocab_size == 1024  # resolved from the data
    assert list((reference / "tb").glob("events.out.tfevents.*"))


def test_same_seed_deterministic_runs_are_identical(reference, tmp_path):
    bessemer("train", "configs/debug.toml", "--train.steps=50", f"--run.dir={tmp_path}",
             "--metrics.tensorboard=false")
    assert losses(tmp_path) == losses(reference)


def _wait_for(predicate, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, f"training ended early: {proc.communicate()}"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_resume_after_kill9_gives_bitwise_the_same_losses(reference, tmp_path):
    run = tmp_path / "R"
    proc = subprocess.Popen([*BESSEMER, "train", "configs/debug.toml", "--train.steps=50", f"--run.dir={run}",
                             "--checkpoint.micro.interval=25"], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    latest = run / "checkpoints" / "micro" / "latest"
    _wait_for(lambda: latest.is_file() and "25" in latest.read_text(), proc)
    proc.kill()  # SIGKILL: no chance to save anything more
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    bessemer("train", "configs/debug.toml", "--train.steps=50", f"--run.dir={run}", "--checkpoint.micro.interval=25",
             "--resume")
    resumed, ref = losses(run), losses(reference)
    assert [resumed[s] for s in range(26, 51)] == [ref[s] for s in range(26, 51)]
    events = [e["event"] for e in read_metrics(run / "metrics.jsonl")[1]]
    assert "checkpoint_loaded" in events


def test_ctrl_c_finishes_the_step_saves_and_exits_130(reference, tmp_path):
    run = tmp_path / "R"
    proc = subprocess.Popen([*BESSEMER, "train", "configs/debug.toml", "--train.steps=50", f"--run.dir={run}"],
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = run / "metrics.jsonl"
    _wait_for(lambda: metrics.is_file() and metrics.read_text().count('"loss"') >= 5, proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "state saved" in err
    stopped = int((run / "checkpoints" / "macro" / "latest").read_text().strip().removeprefix("step_"))
    assert 5 <= stopped < 50 and max(losses(run)) == stopped  # the step in flight was finished and saved
    bessemer("train", "configs/debug.toml", "--train.steps=50", f"--run.dir={run}", "--resume")
    resumed, ref = losses(run), losses(reference)
    assert [resumed[s] for s in range(1, 51)] == [ref[s] for s in range(1, 51)]


def test_fresh_run_refuses_a_directory_with_checkpoints(reference):
    proc = bessemer("train", "configs/debug.toml", "--train.steps=50", f"--run.dir={reference}", check=False)
    assert proc.returncode != 0 and "pass --resume" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["configs/debug.toml", "--train.stpes=5"], "train.steps"),
    (["configs/nope.toml"], "config file not found: configs/nope.toml"),
    (["configs/debug.toml", "--train.steps=abc"], "train.steps: expected an integer, got 'abc'"),
    (["configs/debug.toml", "--data.path=/nonexistent"], "no token shards at /nonexistent"),
    (["configs/debug.toml", "--train.steps"], "must look like --section.key=value"),
])
def test_user_errors_are_one_line(args, message, tmp_path):
    proc = bessemer("train", *args, f"--run.dir={tmp_path}", check=False)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_help_lists_sections_and_fields():
    out = bessemer("train", "--help").stdout
    for text in ("[train]", "train.steps", "Optimizer steps", "[checkpoint.micro]", "checkpoint.micro.interval", "--resume"):
        assert text in out


def test_dry_run_reports_without_training(tmp_path):
    out = bessemer("train", "configs/debug.toml", "--dry-run", f"--run.dir={tmp_path}").stdout
    assert "1,049,728 parameters" in out and "steps = 100" in out
    assert not (tmp_path / "metrics.jsonl").exists()
    tomllib.loads(out.split("\n# model")[0])


def test_gradient_accumulation_matches_one_big_batch(tmp_path):
    from bessemer.train.trainer import Trainer

    def run(micro, sub):
        cfg = load_config("configs/debug.toml", [f"--run.dir={tmp_path / sub}", "--train.steps=5",
                                                 f"--train.micro_batch={micro}", "--metrics.tensorboard=false",
                                                 "--checkpoint.at_end=false", "--metrics.peak_tflops=1"])
        trainer = Trainer(cfg, log=True)
        trainer.train()
        return losses(tmp_path / sub)

    one, four = run(8, "a"), run(2, "b")
    assert one.keys() == four.keys()
    for s in one:
        assert abs(one[s] - four[s]) < 1e-4, (s, one[s], four[s])


def test_bf16_autocast_trains(tmp_path):
    bessemer("train", "configs/debug.toml", "--train.steps=20", f"--run.dir={tmp_path}", "--precision.dtype=bf16",
             "--train.deterministic=false", "--metrics.tensorboard=false")
    records = read_metrics(tmp_path / "metrics.jsonl")[0]
    assert len(records) == 20 and records[-1]["loss"] < records[0]["loss"]


@pytest.mark.parametrize("args, message", [
    (["--nproc=2", "--parallel.tp=3"], "world size 2 is not divisible by dp_replicate x tp x pp = 1 x 3 x 1 = 3"),
    (["--nproc=4", "--parallel.tp=4"], "parallel.tp = 4 does not divide the model's n_kv_heads (2)"),
    (["--nproc=2", "--parallel.pp=2", "--parallel.microbatches=3"], "parallel.microbatches (3) must divide"),
    (["--nproc=2", "--parallel.pp=8", "--parallel.dp_shard=1"], "dp_replicate x dp_shard x tp x pp = 1 x 1 x 1 x 8"),
    (["--parallel.tp=2"], "world size 1 is not divisible"),
])
def test_invalid_layouts_fail_before_any_process_starts(args, message, tmp_path):
    proc = bessemer("train", "configs/debug.toml", f"--run.dir={tmp_path}", *args, check=False)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "torch.distributed.run" not in proc.stderr


def test_launcher_refuses_a_run_with_checkpoints_before_starting_ranks(reference):
    proc = bessemer("train", "configs/debug.toml", "--nproc=2", "--parallel.dp_shard=2", "--train.micro_batch=4",
                    f"--run.dir={reference}", check=False)
    assert proc.returncode == 2 and "pass --resume" in proc.stderr and "Traceback" not in proc.stderr
    assert "torch.distributed.run" not in proc.stderr


def test_nproc_must_be_positive(tmp_path):
    proc = bessemer("train", "configs/debug.toml", "--nproc=0", f"--run.dir={tmp_path}", check=False)
    assert proc.returncode == 2 and "expected a whole number >= 1" in proc.stderr


def test_last_interval_checkpoint_without_at_end_and_resuming_a_finished_run(tmp_path):
    args = ["configs/debug.toml", "--train.steps=10", f"--run.dir={tmp_path}", "--checkpoint.macro.interval=5",
            "--checkpoint.at_end=false", "--checkpoint.macro.keep=0", "--metrics.tensorboard=false"]
    bessemer("train", *args)
    ckpts = tmp_path / "checkpoints" / "macro"
    assert sorted(p.name for p in ckpts.glob("step_*")) == ["step_00000005", "step_00000010"]
    before = (ckpts / "step_00000010" / "manifest.json").stat().st_mtime_ns
    bessemer("train", *args[:-3], "--resume")  # nothing left to train: the checkpoint stays as it was
    assert (ckpts / "step_00000010" / "manifest.json").stat().st_mtime_ns == before
    assert (ckpts / "latest").read_text().strip() == "step_00000010"


def test_resume_with_another_model_is_a_clear_error(tmp_path):
    bessemer("train", "configs/debug.toml", "--train.steps=2", f"--run.dir={tmp_path}", "--metrics.tensorboard=false")
    proc = bessemer("train", "configs/debug.toml", "--train.steps=4", f"--run.dir={tmp_path}", "--model.name=tiny",
                    "--resume", check=False)
    assert proc.returncode == 2 and "written for another model" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["--precision.dtype=bf16", "--precision.fp8.enabled=true", "--precision.fp8.emulate=true",
      '--precision.rules=["tok_embeddings: fp8=tensorwise"]'], "all-zero lookups"),
    (["--precision.dtype=bf16", "--precision.fp8.enabled=true", "--precision.fp8.divisible_by=0"],
     "precision.fp8.divisible_by must be >= 1"),
])
def test_refused_precision_settings_are_one_line_errors(args, message, tmp_path):
    proc = bessemer("train", "configs/debug.toml", "--train.steps=2", f"--run.dir={tmp_path}", *args, check=False)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_resume_with_another_schedule_stops_unless_overridden(tmp_path):
    """A resume whose schedule settings differ from the checkpoint's names each difference and stops; with
    train.override_schedule it continues on the new schedule from the saved step."""
    from bessemer.train.optim import LRMultiplier

    quiet = [f"--run.dir={tmp_path}", "--metrics.tensorboard=false", "--metrics.peak_tflops=1"]
    bessemer("train", "configs/debug.toml", "--train.steps=12", *quiet)  # warmup 10, cosine; saves step 12
    changed = ["--train.steps=20", "--train.schedule=linear", "--resume"]
    proc = bessemer("train", "configs/debug.toml", *changed, *quiet, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "bessemer train: error: checkpoint step 12 was trained with train.steps=12, train.schedule=cosine; this "
        "config says train.steps=20, train.schedule=linear: set train.override_schedule=true to continue on the new "
        "schedule from step 12, or restore the old values"]
    bessemer("train", "configs/debug.toml", *changed, "--train.override_schedule=true", *quiet)
    steps, events = read_metrics(tmp_path / "metrics.jsonl")
    records = {r["step"]: r for r in steps}
    overridden = [e for e in events if e["event"] == "schedule_overridden"]
    assert len(overridden) == 1 and overridden[0]["step"] == 12 and "train.steps 12 -> 20" in overridden[0]["changes"]
    old, new = LRMultiplier(10, 12, "cosine", 0.1), LRMultiplier(10, 20, "linear", 0.1)
    assert sorted(records) == list(range(1, 21))
    for step, rec in records.items():  # the lr a step was taken with: the schedule at its 0-based index
        assert rec["lr"] == pytest.approx(3e-3 * (old if step <= 12 else new)(step - 1), rel=1e-12), step
    assert records[13]["lr"] != pytest.approx(3e-3 * old(12))  # the old schedule would have gone on elsewhere
