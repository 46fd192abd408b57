"""Data parallelism with FSDP2 (`fully_shard`): ZeRO-3 over dp_shard, HSDP over dp_replicate x dp_shard,
plain replication over dp_replicate alone (a shard group of one)."""

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, OffloadPolicy, fully_shard
from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter  # the interface; torch does not export it

from bessemer.precision.policy import PrecisionPolicy


class PiecewiseReduceScatter(ReduceScatter):
    """Reduce-scatter in pieces, for gloo (CPU ranks). gloo copies a reduce-scatter's whole input before reducing
    (measured: 0.5 GiB more peak for a 0.5 GiB input on 2 ranks): for the largest unit — a 128k-vocab embedding
    — that is one more unsharded gradient at the end of backward. Run as pieces of about `piece_bytes` (each the
    same column range of every rank's chunk), the copy is one piece. Every element is reduced by the same
    operation as in one call: the same bits (tested).

    The input (FSDP's copy of the unit's unsharded gradients) is given back as soon as the collective returns:
    FSDP keeps it referenced until a later unit's reduce-scatter — on GPUs that stops the caching allocator from
    reusing memory a stream may still read; on CPU the collective is synchronous, and the reference would keep
    one more unsharded gradient of the largest unit alive through the gradient's cast and accumulation."""

    def __init__(self, piece_bytes: int = 32 << 20):
        self.piece_bytes = piece_bytes

    def allocate(self, size, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: dist.ProcessGroup, op,
                 async_op: bool = False):
        world, per_rank = dist.get_world_size(group), output_tensor.numel()
        step = max(1, self.piece_bytes // (world * input_tensor.element_size()))
        if async_op:
            return dist.reduce_scatter_tensor(output_tensor, input_tensor, op=op, group=group, async_op=True)
        chunks = input_tensor.view(world, per_rank)  # row r: the part whose sum rank r receives
        for start in range(0, per_rank, step):
            stop = min(start + step, per_rank)
            dist.reduce_scatter_tensor(output_tensor[start:stop], chunks[:, start:stop].reshape(-1), op=op,
                                       group=group)
        input_tensor.untyped_storage().resize_(0)
        return None


def reshard_after_head_backward(head: FSDPModule) -> None:
    """Free the gathered tied embedding as soon as the head's gradient has landed.

    Tied, the embedding and the head are one unit, and FSDP frees a unit's gathered parameters only after its
    last backward use — the lookup's, at the very end of backward — so the whole vocab x dim matrix would stay
    gathered through the backward of every block, next to its gradient. The lookup's backward needs no weights
    (its gradient rows go into `.grad`, model/llama.py), so the unit reshards once the head's gradient is
    accumulated: a post-accumulate-grad hook on the gathered parameter, armed by a forward pre-hook of the head
    that runs after FSDP's own (which swaps the gathered parameter in); the hook removes itself. The unit's
    post-backward still reduces the gradient (resharding there again is a no-op)."""

    def arm(module: nn.Module, args) -> None:
        weight = module.weight
        if not (torch.is_grad_enabled() and weight.requires_grad):
            return

        def landed(param: torch.Tensor) -> None:
            handle.remove()
            head.reshard()

        handle = weight.register_post_accumulate_grad_hook(landed)

    head.register_forward_pre_hook(arm)  # after FSDP's own pre-forward: `weight` is the gathered parameter


def set_final_microbatch(model_parts: list[nn.Module], is_last: bool) -> None:
    """Call before each micro-batch of gradient accumulation. With replicas (HSDP, or dp_replicate alone) only
    the last micro-batch all-reduces gradients across them; the earlier ones still reduce-scatter within the
    shard group, and FSDP2 sums those partial results into the final all-reduce — one cross-replica all-reduce
    per step instead of one per micro-batch, with sharded (not full) partial gradients held in between. Without
    replicas there is no all-reduce and this changes nothing. Pipeline schedules set gradient sync on their
    stages themselves (per pipeline micro-batch), which overrides this."""
    for part in model_parts:
        if isinstance(part, FSDPModule):
            part.set_requires_all_reduce(is_last)


def apply_fsdp(model: nn.Module, dp_mesh: DeviceMesh, policy: PrecisionPolicy, offload: bool = False,
               reshard_after_forward: bool = True) -> None:
    """Shard each block, the token embedding and the output head each as its own unit, then the root (final
    norm).

    Per-block units let FSDP gather one block's parameters at a time (prefetching the next) and free them
    after use, so peak memory is the sharded model plus about one unsharded unit. The embedding and the head
    (vocab x dim each, the largest matrices) are units of their own so they are never gathered together;
    tied, they are one matrix and form one unit. `dp_mesh` is 1-D (FSDP) or 2-D (replicate, shard) for HSDP.
    Each unit casts its parameters as the precision policy says; norms stay in their unit (RMSNorm computes in
    fp32 itself), and only a submodule that an explicit `param`/`reduce` rule sets apart becomes its own unit
    first. `offload` keeps parameters, gradients and optimizer states in host memory (CPUOffloadPolicy).

    Prefetch is FSDP2's implicit one: each unit's all-gather runs on its own stream and is issued before the
    previous unit's compute has finished, which overlaps one unit ahead in forward and in backward.
    `reshard_after_forward` is True for the blocks (ZeRO-3: gathered again in backward) and False for the
    head and the root, whose backward follows their forward at once.
    """
    offload_policy = CPUOffloadPolicy(pin_memory=dp_mesh.device_type == "cuda") if offload else OffloadPolicy()

    def shard(module: nn.Module | list[nn.Module], name: str, reshard: bool, skip: str | None = None,
              done: tuple[nn.Module, ...] = ()) -> None:
        islands = policy.fsdp_islands(module, name, skip) if isinstance(module, nn.Module) else []
        for sub, mp in islands:
            if not any(sub is d for d in done):
                fully_shard(sub, mesh=dp_mesh, mp_policy=mp, offload_policy=offload_policy, reshard_after_forward=reshard)
        fully_shard(module, mesh=dp_mesh, mp_policy=policy.mp_policy(name), offload_policy=offload_policy,
                    reshard_after_forward=reshard)

    for layer_id, block in model.layers.items():
        shard(block, f"layers.{layer_id}", reshard_after_forward)
    emb, head = model.tok_embeddings, model.output
    if emb is not None and head is not None and head.weight is emb.weight:
        shard([emb, head], "tok_embeddings", reshard_after_forward)
        reshard_after_head_backward(head)
    else:
        if emb is not None:
            shard(emb, "tok_embeddings", reshard_after_forward)
            emb.set_unshard_in_backward(False)  # a lookup's gradient needs no weights: no gather in backward
        if head is not None:  # its backward follows its forward at once
            shard(head, "output", False)
    # The root's parameters (the final norm) are needed right at the end of forward and the start of backward.
    shard(model, "", False, skip="layers", done=tuple(m for m in (emb, head) if m is not None))
    if dp_mesh.device_type == "cpu":
        pieces = PiecewiseReduceScatter()
        for unit in model.modules():
            if isinstance(unit, FSDPModule):
                unit.set_custom_reduce_scatter(pieces)
