"""Precision end to end: the trainer in this process (so a test can poison a gradient or a weight), real
metrics files. The 40-step comparisons against a wider-precision run of the debug model are marked slow."""

import math

import pytest
import torch
from torch import nn

from bessemer.config import load_config
from bessemer.model.llama import TokenEmbedding
from bessemer.report.run_report import read_metrics
from bessemer.train.trainer import Trainer

QUIET = ["--metrics.tensorboard=false", "--metrics.peak_tflops=1", "--checkpoint.at_end=false",
         "--metrics.progress=false", "--metrics.log_interval=1000"]
# Long enough for the loss to fall by more than a nat (mean of the first five steps 7.38, of the last five 5.99:
# the batches differ a lot, so single steps are not compared across time), short enough for a CPU (a few seconds
# per run on one thread). On the debug model the 16- and 8-bit runs stay within 0.01% of the wider one at the
# last step, far inside the bounds below; a run that did not learn would be ~20% off.
COMPARE_STEPS = 40
COMPARE = ["--model.name=debug", "--train.global_batch=8", "--train.micro_batch=8", "--train.seq_len=64",
           f"--train.steps={COMPARE_STEPS}", "--train.warmup=5"]


def trainer(run_dir, *overrides, resume=False) -> Trainer:
    cfg = load_config("configs/debug.toml", [f"--run.dir={run_dir}", *QUIET, *overrides])
    return Trainer(cfg, resume=resume)


def train(run_dir, *overrides) -> tuple[list[dict], list[dict]]:
    t = trainer(run_dir, *overrides)
    t.train()
    return read_metrics(run_dir / "metrics.jsonl")


def learned(records: list[dict]) -> float:
    """How far the loss fell: the mean of the first five steps' losses minus that of the last five."""
    losses = [r["loss"] for r in records]
    return sum(losses[:5]) / 5 - sum(losses[-5:]) / 5


def alerts(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["event"] == "alert" and e["kind"] == kind]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_fp16_with_loss_scaling_tracks_fp32(tmp_path):
    fp32, _ = train(tmp_path / "fp32", *COMPARE)
    fp16, _ = train(tmp_path / "fp16", *COMPARE, "--precision.dtype=fp16")
    a, b = fp32[-1]["loss"], fp16[-1]["loss"]
    print(f"\nprecision fp16 vs fp32, debug model, step {COMPARE_STEPS}: {b:.4f} vs {a:.4f} ({abs(b - a) / a:.2%})")
    assert fp16[-1]["step"] == COMPARE_STEPS and abs(b - a) / a < 0.005
    assert learned(fp32) > 1.0 and learned(fp16) > 1.0  # both actually trained
    assert any(x["loss"] != y["loss"] for x, y in zip(fp16, fp32))  # the 16-bit path ran, not fp32 again
    # The scaler ran every step, at its initial scale (2^16): no overflow skipped a step or backed the scale off;
    # the gradients were unscaled before clipping and logging (AdamW alone would hide a missing unscale).
    assert all(r["skipped"] == 0 and r["loss_scale"] == 2.0 ** 16 for r in fp16)
    assert all(abs(x["grad_norm"] - y["grad_norm"]) < 0.01 * y["grad_norm"] for x, y in zip(fp16, fp32))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_fp8_emulation_tracks_bf16(tmp_path):
    from torchao.float8.float8_linear import Float8Linear

    bf16, _ = train(tmp_path / "bf16", *COMPARE, "--precision.dtype=bf16")
    t = trainer(tmp_path / "fp8", *COMPARE, "--precision.dtype=bf16", "--precision.fp8.enabled=true",
                "--precision.fp8.emulate=true")
    model = t.model_parts[0]
    # Every Linear of the blocks trains in FP8; the embedding and the output head stay bf16 (the default rules).
    linears = [m for name, m in model.named_modules() if name.startswith("layers.") and isinstance(m, nn.Linear)]
    assert len(linears) == 7 * len(model.layers) and all(isinstance(m, Float8Linear) for m in linears)
    assert type(model.output) is nn.Linear and type(model.tok_embeddings) is TokenEmbedding
    t.train()
    fp8, _ = read_metrics(tmp_path / "fp8" / "metrics.jsonl")
    a, b = bf16[-1]["loss"], fp8[-1]["loss"]
    print(f"\nprecision fp8 (emulated, tensorwise) vs bf16, debug model, step {COMPARE_STEPS}: {b:.4f} vs {a:.4f} "
          f"({abs(b - a) / a:.2%})")
    assert fp8[-1]["step"] == COMPARE_STEPS and abs(b - a) / a < 0.01
    assert learned(bf16) > 1.0 and learned(fp8) > 1.0
    assert any(x["loss"] != y["loss"] for x, y in zip(fp8, bf16))  # the FP8 casts changed the numbers


def test_forced_overflow_backs_off_skips_the_step_and_recovers(tmp_path):
    t = trainer(tmp_path, "--train.steps=20", "--precision.dtype=fp16", "--precision.scaler.hysteresis=1",
                "--precision.scaler.growth_interval=5", "--precision.scaler.init_scale=1024")
    weight = t.model_parts[0].layers["2"].feed_forward.w2.weight
    weight.register_hook(lambda g: g * math.inf if t.state.step == 7 else g)  # during step 8
    t.train()
    records, events = read_metrics(tmp_path / "metrics.jsonl")
    by_step = {r["step"]: r for r in records}
    assert by_step[8]["skipped"] == 1 and not math.isfinite(by_step[8]["grad_norm"])
    assert sum(r["skipped"] for r in records) == 1
    # Scale 1024 doubled at steps 5; the overflow at step 8 halves it; 5 clean steps later it grows again.
    assert [by_step[s]["loss_scale"] for s in (5, 6, 8, 9, 14)] == [1024, 2048, 2048, 1024, 2048]
    assert by_step[20]["overflows"] == 1
    assert records[-1]["loss"] < records[7]["loss"]  # training went on
    assert not alerts(events, "nonfinite")  # an fp16 overflow is routine, not an alert


def test_floor_pinned_tiny_scale_raises_the_silent_failure_alert(tmp_path):
    tiny = 2.0 ** -30
    records, events = train(tmp_path, "--train.steps=6", "--precision.dtype=fp16",
                            *(f"--precision.scaler.{k}={tiny}" for k in ("init_scale", "min_scale", "max_scale")))
    assert all(r["grad_norm"] == 0.0 and math.isfinite(r["loss"]) for r in records)
    silent = alerts(events, "silent_update")
    assert len(silent) == 1 and silent[0]["step"] == 1 and "flush to zero" in silent[0]["message"]
    assert alerts(events, "loss_scale_floor")


def test_a_nonfinite_weight_is_named_and_traced_to_its_module(tmp_path):
    t = trainer(tmp_path, "--train.steps=10", "--precision.dtype=bf16", "--precision.guards.skipped_steps=2")
    for _ in range(3):
        t.train_step()
    with torch.no_grad():
        t.model_parts[0].layers["1"].attention.wq.weight[0, 0] = float("nan")
    for _ in range(3):
        t.train_step()
    t.metrics.close()
    _, events = read_metrics(tmp_path / "metrics.jsonl")
    found = alerts(events, "nonfinite")
    assert found[0]["step"] == 4 and found[0]["parameter"] == "layers.1.attention.wq.weight"
    traced = [e for e in found if e.get("module")]
    assert traced and traced[0]["module"] == "layers.1.attention.wq"
    assert alerts(events, "skipped_steps")[0]["step"] == 5


OFFLOAD_AND_AC = {
    "offload_full": ["--precision.offload.mode=full"],
    "offload_partial": ["--precision.offload.mode=partial", "--precision.offload.fraction=0.4"],
    "ac_full": ["--precision.activation_checkpoint.mode=full"],
    "ac_every2": ["--precision.activation_checkpoint.mode=selective", "--precision.activation_checkpoint.every=2"],
    "ac_ops": ["--precision.activation_checkpoint.mode=selective",
               "--precision.activation_checkpoint.save_ops=mm,sdpa"],
}


@pytest.fixture(scope="module")
def fp32_reference(tmp_path_factory):
    records, _ = train(tmp_path_factory.mktemp("ref") / "R", "--train.steps=20")
    return [r["loss"] for r in records]


@pytest.mark.parametrize("name", list(OFFLOAD_AND_AC))
def test_offload_and_activation_checkpointing_leave_the_losses_identical(name, fp32_reference, tmp_path):
    records, _ = train(tmp_path, "--train.steps=20", *OFFLOAD_AND_AC[name])
    assert [r["loss"] for r in records] == fp32_reference


def test_fp16_run_resumes_with_its_loss_scale(tmp_path):
    flags = ["--train.steps=12", "--precision.dtype=fp16", "--precision.scaler.growth_interval=3",
             "--checkpoint.macro.interval=6", "--checkpoint.macro.keep=0"]
    full, _ = train(tmp_path / "A", *flags)
    t = trainer(tmp_path / "B", *flags)
    for _ in range(6):
        t.train_step()
    t.save("macro")
    t.metrics.close()
    resumed = trainer(tmp_path / "B", *flags, resume=True)
    assert resumed.scaler.state_dict() == t.scaler.state_dict() and resumed.scaler.scale > 2 ** 16
    resumed.train()
    records, _ = read_metrics(tmp_path / "B" / "metrics.jsonl")
    tail = {r["step"]: (r["loss"], r["loss_scale"]) for r in records if r["step"] > 6}
    assert tail == {r["step"]: (r["loss"], r["loss_scale"]) for r in full if r["step"] > 6}


def test_step_records_carry_peak_memory(tmp_path):
    records, _ = train(tmp_path, "--train.steps=2")
    assert all(r["peak_mem_gib"] > 0.01 for r in records)
