"""torch.compile per transformer block (and of the loss), as torchtitan does it.

Blocks are compiled one by one, after tensor parallelism and activation checkpointing have wrapped them and
before FSDP shards them (a whole-block checkpoint stays eager around its compiled block: precision/
checkpointing.py, `compile_within`): every block has the same structure, so one compiled graph serves them all
(parameters are graph inputs, not constants), the compile time is that of one block whatever the depth, and FSDP's
all-gathers stay outside the graphs, where its hooks prefetch and free one unit at a time. `Module.compile`
compiles in place: parameter names, checkpoints and FSDP units are those of the eager model.

Inside a block the compiler fuses what eager mode runs as separate kernels: RMSNorm's upcast, statistics and
scaling; RoPE's rotation; SwiGLU's activation and product; the residual additions.
"""

from collections.abc import Callable
from typing import Literal

import torch
from torch import nn
from torch.distributed._functional_collectives import AsyncCollectiveTensor

from bessemer.parallel.recompute import compile_within

CompileSetting = bool | Literal["auto"]


def compile_enabled(setting: CompileSetting, device_type: str) -> bool:
    """train.compile resolved for a device: "auto" compiles on CUDA only (on CPU, eager starts faster and the
    debug models are too small for fusion to pay off)."""
    return device_type == "cuda" if setting == "auto" else bool(setting)


def disable_graph_caches() -> None:
    """Turn off inductor's compiled-graph cache and AOT autograd's cache in this process; for tensor-parallel runs.

    Their graphs hold collectives, which name their process group ('11'), and the caches (torch 2.13) key a graph
    by its structure, not by those names: a graph cached by an earlier run on the machine, whose groups were
    numbered otherwise, is reused and calls a group this run does not have ("Could not resolve the process group
    registered under the name 11"), or one that stands for other ranks. The cost: compiling afresh at every
    start, restarts included."""
    torch._inductor.config.fx_graph_cache = False
    torch._functorch.config.enable_autograd_cache = False


def apply_compile(model: nn.Module) -> list[str]:
    """Compile each transformer block of `model` (a whole model or a pipeline stage) in place; returns their
    names. `fullgraph`: a graph break inside a block is an error, not a silent slowdown."""
    # Blocks differ only in their parameters, which dynamo takes as inputs: one graph, no recompilation per
    # layer. Should a guard fail per layer anyway, stop loudly rather than fall back to eager after the limit.
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    if model.tok_embeddings is not None:
        model.tok_embeddings.register_forward_hook(_wait_for_collective)
    compiled = []
    for name, block in model.layers.items():
        if not compile_within(block):
            block.compile(fullgraph=True)
        compiled.append(f"layers.{name}")
    return compiled


def _wait_for_collective(module: nn.Module, args: tuple, out: torch.Tensor) -> torch.Tensor:
    """The tensor-parallel embedding's output, its collective waited for. Its layout hands the first block a
    tensor whose reduction is still in flight (AsyncCollectiveTensor); a compiled block given one returns a plain
    tensor as its input's gradient where DTensor's backward expects a DTensor, which fails, or under FSDP2
    trains to other losses (2e-3 relative after 20 steps, tp 2 x dp_shard 2). One copy of the (B, T, dim)
    activations per step; eager blocks wait on first use as before."""
    return out.clone() if isinstance(out, AsyncCollectiveTensor) else out


def compile_loss(loss: Callable) -> Callable:
    """The loss compiled: the fp32 upcast of the logits, log-softmax and gather fuse into one pass over the
    (tokens x vocab) logits instead of several."""
    return torch.compile(loss)
