"""Data parallelism with FSDP2 (`fully_shard`): ZeRO-3 over dp_shard, HSDP over dp_replicate x dp_shard,
plain replication over dp_replicate alone (a shard group of one)."""

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


def default_mp_policy() -> MixedPrecisionPolicy:
    """fp32 parameters, compute and gradient reduction. The precision policy replaces this hook."""
    return MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32)


def apply_fsdp(model: nn.Module, dp_mesh: DeviceMesh, mp_policy: MixedPrecisionPolicy | None = None,
               reshard_after_forward: bool = True) -> None:
    """Shard each block, then the root (embedding, final norm, head).

    Per-block units let FSDP gather one block's parameters at a time (prefetching the next) and free them
    after use, so peak memory is the sharded model plus about one unsharded block. `dp_mesh` is 1-D (FSDP) or
    2-D (replicate, shard) for HSDP.
    """
    mp_policy = mp_policy or default_mp_policy()
    for block in model.layers.values():
        fully_shard(block, mesh=dp_mesh, mp_policy=mp_policy, reshard_after_forward=reshard_after_forward)
    # The root's parameters are needed right at the end of backward: no point resharding them after forward.
    fully_shard(model, mesh=dp_mesh, mp_policy=mp_policy, reshard_after_forward=False)
