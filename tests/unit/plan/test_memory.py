"""The per-rank memory estimate: exact parameter arithmetic, the orderings the knobs must produce, and the
activation formula against what autograd really saves for the debug model."""

import subprocess
import sys

import pytest

from bessemer.config import ParallelConfig, PrecisionConfig, TrainConfig
from bessemer.model.registry import count_params, get_model_args
from bessemer.parallel.dims import ParallelDims
from bessemer.plan.memory import estimate_memory, stages_in_flight

DEBUG = get_model_args("debug")  # 4 layers, dim 128, 4 heads, 2 kv heads, ffn 384, vocab 1024
TOTAL = count_params(DEBUG)["total"]


def estimate(world=1, micro_batch=4, seq_len=128, pp_microbatches=1, args=DEBUG, precision=None, **parallel):
    cfg = ParallelConfig(**parallel)
    train = TrainConfig(micro_batch=micro_batch, global_batch=micro_batch, seq_len=seq_len)
    return estimate_memory(args, ParallelDims.from_config(cfg, world), cfg, train, precision or PrecisionConfig(),
                           pp_microbatches)


def with_ac(mode, **kw):
    p = PrecisionConfig()
    p.activation_checkpoint.mode = mode
    for key, value in kw.items():
        setattr(p.activation_checkpoint, key, value)
    return p


def test_single_rank_states_are_4_4_8_bytes_per_parameter_and_fsdp_divides_them():
    one = estimate()
    assert (one.params, one.grads, one.optimizer) == (4 * TOTAL, 4 * TOTAL, 8 * TOTAL)
    assert one.fsdp_buffers == one.cast_weights == one.host_bytes == 0
    four = estimate(world=4, dp_shard=4)
    assert (four.params, four.grads, four.optimizer) == (TOTAL, TOTAL, 2 * TOTAL)
    assert four.fsdp_buffers > 0  # the unsharded block in use, the prefetched one and the root
    assert four.activations == one.activations
    assert four.total == sum((four.params, four.grads, four.optimizer, four.activations, four.fsdp_buffers))


def test_checkpointing_and_sequence_parallelism_lower_activations():
    none, selective, full = (estimate(precision=with_ac(m)).activations for m in ("none", "selective", "full"))
    assert full < selective < none
    ops = estimate(precision=with_ac("selective", save_ops=["mm", "sdpa"])).activations
    assert full < ops < none
    sp = estimate(world=2, tp=2, sequence_parallel=True).activations
    no_sp = estimate(world=2, tp=2).activations
    assert sp < no_sp < none


def test_offload_moves_states_to_the_host():
    p = PrecisionConfig()
    p.offload.mode = "full"
    one = estimate(precision=p)  # unsharded: a host AdamW over fp32 copies of every parameter
    assert one.optimizer == 0 and one.host_bytes == 16 * TOTAL and one.params == one.grads == 4 * TOTAL
    sharded = estimate(world=4, dp_shard=4, precision=p)  # FSDP2 CPUOffloadPolicy: all states on the host
    assert (sharded.params, sharded.grads, sharded.optimizer) == (0, 0, 0)
    assert sharded.host_bytes == 16 * TOTAL // 4 and sharded.fsdp_buffers > 0
    p.offload.mode, p.offload.fraction = "partial", 0.5
    half = estimate(precision=p)
    assert half.optimizer == 4 * TOTAL and half.host_bytes == 8 * TOTAL


def test_pipeline_in_flight_follows_the_schedules():
    assert [stages_in_flight("1f1b", 4, 1, 8, r) for r in range(4)] == [4, 3, 2, 1]
    assert stages_in_flight("gpipe", 4, 1, 8, 3) == 8
    # Interleaved on rank 0: 1F1B's pp micro-batches of L/pp layers times 1 + (pp-1)/(pp*v) (Korthikanti et al.)
    pp, v = 4, 2
    assert stages_in_flight("interleaved_1f1b", pp, v, 2 * pp, 0) / v == pp * (1 + (pp - 1) / (pp * v))
    gpipe = estimate(world=2, pp=2, pp_schedule="gpipe", pp_microbatches=2)
    one_f1b = estimate(world=2, pp=2, pp_microbatches=2)
    assert one_f1b.activations < gpipe.activations
    assert gpipe.params < estimate().params  # each rank holds half the blocks


def test_format_marks_an_estimate_with_one_line_per_component():
    text = estimate().format()
    assert "estimate" in text.splitlines()[0]
    for name in ("parameters", "gradients", "optimizer", "activations", "fsdp buffers", "host"):
        assert name in text
    assert "4.00 MiB" in text  # fp32 master weights of ~1M parameters


# ---------------------------------------------------------------- the formula against autograd

def _held_bytes(dtype: str, checkpoint_every: int, b: int, s: int) -> tuple[int, int]:
    """Bytes that stay alive from one forward + loss to backward, as the trainer runs them: the unique
    storages autograd saved (parameters and RoPE tables excluded), the logits the trainer holds, and the
    inputs of the checkpointed blocks (those whose id is a multiple of `checkpoint_every`, 0 = none), which
    the checkpoint recomputes from. Also one block's saved bytes without its input: what backward rebuilds
    at a time under checkpointing."""
    import contextlib

    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint

    from bessemer.model.llama import build_model

    torch.manual_seed(0)
    model = build_model(DEBUG, s)
    skip = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    held: dict[int, int] = {}

    def keep(t: torch.Tensor) -> torch.Tensor:
        if t.untyped_storage().data_ptr() not in skip:
            held[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    def autocast() -> contextlib.AbstractContextManager:
        return torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "bf16" else contextlib.nullcontext()

    x = torch.randn(b, s, DEBUG.dim, requires_grad=True)
    skip.add(x.untyped_storage().data_ptr())
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t), autocast():
        model.layers["0"](x, model.rope_cos, model.rope_sin)
    block = sum(held.values())
    held.clear()

    for name, layer in model.layers.items():
        if checkpoint_every and int(name) % checkpoint_every == 0:  # as parallel/recompute.py picks
            def forward(x, cos, sin, inner=layer.forward):
                keep(x)
                return checkpoint(inner, x, cos, sin, use_reentrant=False)
            layer.forward = forward
    tokens = torch.randint(0, DEBUG.vocab_size, (b, s))
    targets = torch.randint(0, DEBUG.vocab_size, (b, s))
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        with autocast():
            logits = model(tokens)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(0, 1))  # as Trainer.loss_fn
    keep(logits)
    loss.backward()  # the graph counted is the one backward runs through
    return sum(held.values()), block


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_activations_match_what_autograd_saves(dtype):
    b, s = 4, 128
    p = PrecisionConfig(dtype=dtype)
    held, _ = _held_bytes(dtype, checkpoint_every=0, b=b, s=s)
    e = estimate(micro_batch=b, seq_len=s, precision=p)
    est = e.activations + e.cast_weights  # under autocast the saved 16-bit weight copies are tensors too
    print(f"\n{dtype} no checkpointing: measured {held:,} B, estimated {est:,} B ({est / held:.3f}x)")
    assert abs(est - held) <= 0.25 * held


@pytest.mark.parametrize("every", [1, 2])
def test_checkpointing_matches_what_autograd_saves(every):
    b, s = 4, 128
    held, block = _held_bytes("fp32", checkpoint_every=every, b=b, s=s)
    ac = with_ac("full") if every == 1 else with_ac("selective", every=every)
    est = estimate(micro_batch=b, seq_len=s, precision=ac).activations
    print(f"\nfp32 checkpointing every {every}: measured {held:,} + {block:,} B recomputed, estimated {est:,} B "
          f"({est / (held + block):.3f}x)")
    assert abs(est - (held + block)) <= 0.25 * (held + block)


# ---------------------------------------------------------------- the command

def test_dry_run_prints_the_estimate_without_torch(tmp_path):
    out = subprocess.run([sys.executable, "-m", "bessemer.cli", "train", "configs/debug.toml", "--dry-run",
                          f"--run.dir={tmp_path}"], capture_output=True, text=True, timeout=120, check=True).stdout
    assert "# memory per rank (estimate)" in out
    for name in ("parameters", "gradients", "optimizer", "activations"):
        assert f"#   {name}" in out
    probe = "import sys, bessemer.plan.memory, bessemer.train.dry_run; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                          check=True).stdout.strip() == "False"
