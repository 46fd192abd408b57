"""3D parallelism proven by loss parity: every layout trains the debug model for 20 steps on real gloo
processes (started by `bessemer train --nproc N`) and must match the single-process run of the same test
session within relative 1e-5 at every step."""

import functools
import shutil
from pathlib import Path

import pytest
import torch

from bessemer.report.run_report import read_metrics
from tests.distributed.runs import train_losses

STEPS = 20
COMMON = ["configs/debug.toml", f"--train.steps={STEPS}", "--train.global_batch=8", "--train.deterministic=true",
          "--metrics.tensorboard=false", "--metrics.peak_tflops=1"]

LAYOUTS = {
    "dp_replicate2": (2, ["--parallel.dp_replicate=2", "--parallel.dp_shard=1", "--train.micro_batch=2"]),
    "dp_shard4": (4, ["--parallel.dp_shard=4", "--train.micro_batch=2"]),
    "hsdp2x2": (4, ["--parallel.dp_replicate=2", "--parallel.dp_shard=2", "--train.micro_batch=2"]),
    "tp2": (2, ["--parallel.tp=2", "--train.micro_batch=4"]),
    "tp2_sp": (2, ["--parallel.tp=2", "--parallel.sequence_parallel=true", "--train.micro_batch=4"]),
    "tp2_loss_parallel": (2, ["--parallel.tp=2", "--parallel.sequence_parallel=true",
                              "--parallel.loss_parallel=true", "--train.micro_batch=4"]),
    "pp2_gpipe": (2, ["--parallel.pp=2", "--parallel.pp_schedule=gpipe", "--train.micro_batch=4"]),
    "pp2_1f1b": (2, ["--parallel.pp=2", "--parallel.pp_schedule=1f1b", "--train.micro_batch=4"]),
    "pp2_interleaved": (2, ["--parallel.pp=2", "--parallel.pp_schedule=interleaved_1f1b",
                            "--parallel.virtual_stages=2", "--train.micro_batch=4"]),
    "pp2_zero_bubble": (2, ["--parallel.pp=2", "--parallel.pp_schedule=zero_bubble", "--parallel.virtual_stages=2",
                            "--train.micro_batch=4"]),
    "tp2_dp_shard2": (4, ["--parallel.tp=2", "--parallel.dp_shard=2", "--train.micro_batch=2"]),
    "pp2_tp2_dp_shard2": (8, ["--parallel.pp=2", "--parallel.tp=2", "--parallel.dp_shard=2",
                              "--train.micro_batch=4"]),
}


train = functools.partial(train_losses, COMMON)  # train(run_dir, nproc, extra) -> {step: loss}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    run = tmp_path_factory.mktemp("single") / "R"
    return run, train(run, 1, ["--train.micro_batch=4"])


@pytest.mark.distributed
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_layout_matches_single_process_loss(name, reference, tmp_path):
    nproc, extra = LAYOUTS[name]
    ref = reference[1]
    losses = train(tmp_path / "R", nproc, extra)
    assert sorted(losses) == list(range(1, STEPS + 1))
    worst = max(abs(losses[s] - ref[s]) / abs(ref[s]) for s in ref)
    print(f"\nparity {name}: max relative loss difference over {STEPS} steps {worst:.2e}")
    assert worst < 1e-5, f"{name}: max relative loss difference {worst:.2e}"
    if name == "pp2_tp2_dp_shard2":
        _assert_same_parameters(reference[0], tmp_path / "R")


def _assert_same_parameters(single_run, sharded_run):
    """The 8-rank run's final sharded checkpoint, gathered into full tensors, equals the single-process weights."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys

    ckpt = Path("checkpoints") / "macro" / f"step_{STEPS:08d}"
    full = _load_state_dict_from_keys({"model"}, checkpoint_id=str(single_run / ckpt))["model"]
    gathered = {k: torch.empty_like(v) for k, v in full.items()}
    dcp.load({"model": gathered}, checkpoint_id=str(sharded_run / ckpt))  # no process group
    for k, v in full.items():
        torch.testing.assert_close(gathered[k], v, rtol=1e-5, atol=1e-5, msg=lambda m: f"{k}: {m}")


@pytest.mark.distributed
def test_resume_under_another_layout_continues_the_same_run(reference, tmp_path):
    """Save sharded checkpoints under FSDP (dp_shard 2), roll back to step 10, resume under tensor
    parallelism (tp 2): steps 11-20 still match the single-process run."""
    run = tmp_path / "R"
    train(run, 2, ["--parallel.dp_shard=2", "--train.micro_batch=4", "--checkpoint.macro.interval=10",
                   "--checkpoint.macro.keep=0", "--checkpoint.at_end=false"])
    shutil.rmtree(run / "checkpoints" / "macro" / f"step_{STEPS:08d}")  # roll back to step 10
    resumed = train(run, 2, ["--parallel.tp=2", "--train.micro_batch=4", "--resume"])
    ref = reference[1]
    worst = max(abs(resumed[s] - ref[s]) / abs(ref[s]) for s in range(11, STEPS + 1))
    print(f"\nparity resume dp_shard2 -> tp2: max relative loss difference, steps 11-20 {worst:.2e}")
    assert worst < 1e-5, f"max relative loss difference after resharded resume {worst:.2e}"


@pytest.mark.distributed
def test_bf16_policy_composes_with_3d(tmp_path):
    """pp2 x tp2 x dp_shard2 in bf16 (FSDP2 parameter casts, fp32 norm units, fp32 reduction) against the
    single-process bf16 run (autocast): the same losses within bf16 resolution (2^-8 relative)."""
    ref = train(tmp_path / "single", 1, ["--train.micro_batch=4", "--precision.dtype=bf16"])
    nproc, extra = LAYOUTS["pp2_tp2_dp_shard2"]
    losses = train(tmp_path / "3d", nproc, [*extra, "--precision.dtype=bf16"])
    worst = max(abs(losses[s] - ref[s]) / abs(ref[s]) for s in ref)
    print(f"\nparity bf16 pp2_tp2_dp_shard2 vs single bf16: max relative loss difference {worst:.2e}")
    assert worst < 2 ** -8, f"max relative loss difference {worst:.2e}"


@pytest.mark.distributed
def test_offload_and_checkpointing_under_fsdp_leave_the_losses_identical(tmp_path):
    """dp_shard 2 on gloo: FSDP2 CPU offload, full and op-level activation checkpointing give the losses of
    the plain dp_shard 2 run, bit for bit."""
    base = ["--parallel.dp_shard=2", "--train.micro_batch=2"]
    plain = train(tmp_path / "plain", 2, base)
    for name, extra in {"offload_full": ["--precision.offload.mode=full"],
                        "offload_partial": ["--precision.offload.mode=partial"],
                        "ac_full": ["--precision.activation_checkpoint.mode=full"],
                        "ac_ops": ["--precision.activation_checkpoint.mode=selective",
                                   "--precision.activation_checkpoint.save_ops=mm,sdpa"]}.items():
        assert train(tmp_path / name, 2, [*base, *extra]) == plain, name
        _, events = read_metrics(tmp_path / name / "metrics.jsonl")
        assert not [e for e in events if e["event"] == "alert"], name  # the end-of-run save worked too


@pytest.mark.distributed
@pytest.mark.parametrize("schedule, clip", [("interleaved_1f1b", 0.0), ("1f1b", 1.0), ("none", 1.0)])
def test_tied_embeddings_match_one_process(schedule, clip, tmp_path):
    """debug-tied (input embedding = output head). On pp 2 x dp_shard 2 the last stage's copy of the embedding
    gets the summed gradient of both copies (parallel/pipeline.py); on dp_shard 2 alone ("none", two
    micro-batches accumulated per step) embedding and head are one FSDP unit, resharded as soon as the head's
    gradient lands (parallel/fsdp.py). Either way the losses are the single-process ones."""
    tied = ["--model.name=debug-tied", f"--train.grad_clip={clip}", "--checkpoint.at_end=false"]
    ref = train(tmp_path / "single", 1, [*tied, "--train.micro_batch=4"])
    if schedule == "none":
        nproc, extra = 2, ["--parallel.dp_shard=2", "--train.micro_batch=2"]
    else:
        nproc, extra = 4, ["--parallel.pp=2", "--parallel.dp_shard=2", f"--parallel.pp_schedule={schedule}"]
        # Pipeline micro-batches default to pp x virtual stages and must divide train.micro_batch.
        extra += ["--parallel.virtual_stages=2", "--train.micro_batch=4"] if schedule == "interleaved_1f1b" else [
            "--train.micro_batch=2"]
    losses = train(tmp_path / "parallel", nproc, [*tied, *extra])
    worst = max(abs(losses[s] - ref[s]) / abs(ref[s]) for s in ref)
    print(f"\nparity tied {extra[:2]} {schedule} grad_clip {clip}: max relative loss difference {worst:.2e}")
    assert worst < 1e-5, f"max relative loss difference {worst:.2e}"
