"""Activation checkpointing: keep less in forward, recompute it in backward.

- full: every block keeps only its input; backward reruns the block's forward (about +33% compute);
- selective, every n-th block: those blocks as in full, the others keep everything (torchtitan's layer
  selective mode) — trades memory against compute in steps of one block;
- selective, op-level: every block keeps the outputs of the listed ops (matmuls, attention) and recomputes
  the cheap elementwise ops around them (Korthikanti et al. 2022 recompute what is cheap to recompute).

Applied to each block's `forward` from outside the model: parameter names, checkpoints and FSDP units are
unchanged. Under train.compile (parallel/compile.py) the op-level mode is traced with the block, so the compiler
sees which outputs to keep; a whole-block checkpoint (full, every n-th block) stays eager around the compiled
block (`compile_within`).
"""

import functools

import torch
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from bessemer.config import ActivationCheckpointConfig

_aten = torch.ops.aten
OPS = {
    "mm": [_aten.mm.default, _aten.addmm.default, _aten.bmm.default],
    "sdpa": [_aten._scaled_dot_product_flash_attention.default,
             _aten._scaled_dot_product_efficient_attention.default,
             _aten._scaled_dot_product_cudnn_attention.default,
             _aten._scaled_dot_product_flash_attention_for_cpu.default],
    "silu": [_aten.silu.default],
}


def _save_policy(ops: frozenset):
    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in ops else CheckpointPolicy.PREFER_RECOMPUTE
    return policy


def _checkpointed(forward, context_fn, *args, **kwargs):
    if context_fn is None:
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)
    return checkpoint(forward, *args, use_reentrant=False, context_fn=context_fn, **kwargs)


def compile_within(block: nn.Module) -> bool:
    """When `block`'s forward is a whole-block checkpoint (full, or selective every n-th block), compile the
    forward inside it, in place, and return True; otherwise (no checkpoint, or op-level) return False: the block
    is then compiled whole, with its checkpoint traced.

    Each recomputation reruns the compiled forward, so the memory and compute are those of eager full
    checkpointing. The traced form fails under tensor parallelism with torch 2.13: the compiled checkpoint saves
    the device mesh of DTensor weights for backward (`expected all tensors_saved_with_vc_check to be Tensors`)."""
    forward = block.forward
    if not (isinstance(forward, functools.partial) and forward.func is _checkpointed and forward.args[1] is None):
        return False
    block.forward = functools.partial(_checkpointed, torch.compile(forward.args[0], fullgraph=True), None)
    return True


def apply_activation_checkpointing(model: nn.Module, cfg: ActivationCheckpointConfig) -> list[str]:
    """Wrap the blocks' forward as the mode says; returns the names of the wrapped blocks."""
    if cfg.mode == "none":
        return []
    context_fn = None
    if cfg.mode == "selective" and cfg.save_ops:
        ops = frozenset(op for name in cfg.save_ops for op in OPS[name])
        context_fn = functools.partial(create_selective_checkpoint_contexts, _save_policy(ops))
    wrapped = []
    for name, block in model.layers.items():
        # Global layer ids, so every pipeline stage picks the same blocks as a single process would.
        if cfg.mode == "selective" and not cfg.save_ops and int(name) % cfg.every:
            continue
        block.forward = functools.partial(_checkpointed, block.forward, context_fn)
        wrapped.append(f"layers.{name}")
    return wrapped
