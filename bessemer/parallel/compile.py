"""torch.compile per transformer block (and of the loss), as torchtitan does it.

Blocks are compiled one by one, after tensor parallelism and activation checkpointing have wrapped them and
before FSDP shards them: every block has the same structure, so one compiled graph serves them all (parameters
are graph inputs, not constants), the compile time is that of one block whatever the depth, and FSDP's
all-gathers stay outside the graphs, where its hooks prefetch and free one unit at a time. `Module.compile`
compiles in place: parameter names, checkpoints and FSDP units are those of the eager model.

Inside a block the compiler fuses what eager mode runs as separate kernels: RMSNorm's upcast, statistics and
scaling; RoPE's rotation; SwiGLU's activation and product; the residual additions.
"""

from collections.abc import Callable
from typing import Literal

import torch
from torch import nn

from bessemer.errors import ConfigError

CompileSetting = bool | Literal["auto"]


def compile_enabled(setting: CompileSetting, device_type: str, tp: int = 1) -> bool:
    """train.compile resolved for a device and layout: "auto" compiles on CUDA only (on CPU, eager starts faster
    and the debug models are too small for fusion to pay off).

    Tensor parallelism is left eager: compiled tensor-parallel blocks do not yet train to the eager losses
    (tp 2 x dp_shard 2 on CPU: 2e-3 relative after 20 steps, where fp32 fusion accounts for ~1e-6), and with
    activation checkpointing torch's compiled checkpoint saves the device mesh of tensor-parallel weights for
    backward and fails at the first step (torch 2.13, CPU). "auto" then means off; an explicit true is refused."""
    if tp > 1:
        if setting is True:
            raise ConfigError("train.compile=true is not supported with parallel.tp > 1 yet (compiled tensor-"
                              "parallel blocks do not match the eager losses): set train.compile=false")
        return False
    return device_type == "cuda" if setting == "auto" else bool(setting)


def apply_compile(model: nn.Module) -> list[str]:
    """Compile each transformer block of `model` (a whole model or a pipeline stage) in place; returns their
    names. `fullgraph`: a graph break inside a block is an error, not a silent slowdown."""
    # Blocks differ only in their parameters, which dynamo takes as inputs: one graph, no recompilation per
    # layer. Should a guard fail per layer anyway, stop loudly rather than fall back to eager after the limit.
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    compiled = []
    for name, block in model.layers.items():
        block.compile(fullgraph=True)
        compiled.append(f"layers.{name}")
    return compiled


def compile_loss(loss: Callable) -> Callable:
    """The loss compiled: the fp32 upcast of the logits, log-softmax and gather fuse into one pass over the
    (tokens x vocab) logits instead of several."""
    return torch.compile(loss)
