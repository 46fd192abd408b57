"""This rank's part of a tensor that may be a DTensor: the one home of that question, for every package that
asks it (model init, the loss scaler and guards, the host optimizer, pipeline gradient sums, checkpoint loads).
Torch-level, below every package that uses DTensors; it imports nothing of bessemer."""

import torch
from torch.distributed.tensor import DTensor


def local(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a DTensor, or the tensor itself."""
    return t.to_local() if isinstance(t, DTensor) else t


def full(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a DTensor (gathered where it is sharded), or the tensor itself."""
    return t.full_tensor() if isinstance(t, DTensor) else t


def local_part(p: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...]]:
    """This rank's part of `p` and where it starts in the full tensor."""
    if not isinstance(p, DTensor):
        return p, (0,) * p.dim()
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    part = p.to_local()
    shape, offset = compute_local_shape_and_global_offset(p.shape, p.device_mesh, p.placements)
    assert tuple(shape) == tuple(part.shape), (shape, tuple(part.shape))
    return part, tuple(offset)


def shard_shape(t: torch.Tensor) -> list:
    """What must match for a saved local shard to fit `t` again: global shape, local shape, placements."""
    if isinstance(t, DTensor):
        return [list(t.shape), list(t.to_local().shape), [str(p) for p in t.placements]]
    return [list(t.shape), list(t.shape), []]
