"""Numbers that span ranks: the gradient norm over every shard and stage, the loss of the global batch."""

import math
from collections import defaultdict

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor


def _groups(params: list[torch.nn.Parameter]) -> list[list[torch.nn.Parameter]]:
    """Parameters with gradients, grouped so that each group is all plain tensors or DTensors of one mesh
    (torch's foreach kernels do not mix them)."""
    groups: dict[object, list] = defaultdict(list)
    for p in params:
        if p.grad is not None:
            groups[p.grad.device_mesh if isinstance(p.grad, DTensor) else None].append(p)
    return list(groups.values())


@torch.no_grad()
def clip_grad_norm_(params: list[torch.nn.Parameter], max_norm: float, pp_group=None) -> torch.Tensor:
    """Global L2 norm of all gradients (DTensor shards reduced, pipeline stages summed); clip to max_norm."""
    groups = _groups(params)
    norms = []
    for group in groups:
        # The last stage's copy of tied embeddings holds the same summed gradient as the first stage's: count it once.
        grads = [p.grad for p in group if not getattr(p, "tied_copy", False)]
        if not grads:
            norms.append(torch.zeros((), device=group[0].grad.device))
            continue
        norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0)
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()  # sharded grads give partial norms: reduce them over the mesh
        norms.append(norm.float())
    if len(norms) == 1 and pp_group is None:
        total = norms[0]  # the common single-process case: exactly torch's clip_grad_norm_
    else:
        total_sq = torch.stack(norms).square().sum()
        if pp_group is not None:
            dist.all_reduce(total_sq, op=dist.ReduceOp.SUM, group=pp_group)  # stages hold different parameters
        total = total_sq.sqrt()
    if math.isfinite(max_norm):
        for group in groups:
            torch.nn.utils.clip_grads_with_norm_(group, max_norm, total)
    return total


def global_loss(local: torch.Tensor, holds_loss: bool, dp: int) -> torch.Tensor:
    """Mean loss over the data-parallel ranks. One rank per data-parallel group contributes its loss
    (`holds_loss`: last pipeline stage, tensor-parallel rank 0); the others contribute zero."""
    value = local.detach().float().clone() if holds_loss else torch.zeros_like(local, dtype=torch.float32)
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value / dp
