"""Pipeline parallelism with torch.distributed.pipelining: split the layers into stages, one or more per rank,
and run micro-batches through a schedule.

Stages are the same Transformer class with the parts they do not own deleted (layers removed from the
ModuleDict, tok_embeddings / norm / output set to None), so parameter names — and checkpoint keys — are the
same as in the whole model. The first stage carries the embedding, the last the final norm and the head.

Tied embeddings (Megatron's way): the last stage keeps its own copy of the embedding matrix as `output.weight`,
initialised to the same values (model/llama.py); after backward `sync_tied_grads` sums the two gradients
between the first- and last-stage ranks of the same (dp, tp) coordinates, so both copies take identical
optimizer steps and stay equal. The checkpoint then holds `tok_embeddings.weight` (first stage) and
`output.weight` (last stage), the two keys a single-process tied model's state dict has.

FSDP under pipeline parallelism: torch's stages keep every FSDP unit of a stage gathered, with unsharded
gradients, from the first micro-batch to the last (one reduce-scatter per step). For the schedules that run
whole backward passes (gpipe, 1f1b, interleaved_1f1b) the stage module is handed to the schedule behind a
plain wrapper instead, so each unit is gathered for its own forward and backward and its gradient is
reduce-scattered after each micro-batch: memory stays at the shards plus one unit, for one all-gather per unit
per forward and backward and one reduce-scatter per micro-batch. zero_bubble computes weight gradients apart
from input gradients, after FSDP's per-unit hooks have run, so it keeps torch's behaviour.
"""

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import (
    Schedule1F1B,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
    ScheduleInterleavedZeroBubble,
)

from bessemer.dtensor import local
from bessemer.model.llama import Transformer
from bessemer.model.registry import ModelArgs
from bessemer.parallel.dims import new_group

SINGLE_STAGE = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}
MULTI_STAGE = {"interleaved_1f1b": ScheduleInterleaved1F1B, "zero_bubble": ScheduleInterleavedZeroBubble}


def stage_ids(pp_rank: int, pp: int, stages_per_rank: int) -> list[int]:
    """Loop placement: rank r holds stages r, r + pp, r + 2pp, ... (what the interleaved schedules expect)."""
    return [pp_rank + k * pp for k in range(stages_per_rank)]


def build_stage_module(args: ModelArgs, max_seq_len: int, layers: range, num_stages: int,
                       stage: int) -> Transformer:
    """A meta-device Transformer that keeps only what stage `stage` owns."""
    model = Transformer(args, max_seq_len)
    for i in range(args.n_layers):
        if i not in layers:
            del model.layers[str(i)]
    if stage != 0:
        model.tok_embeddings = None
    if stage != num_stages - 1:
        model.norm = None
        model.output = None
        if model.tok_embeddings is not None:
            model.tok_embeddings.tied = False  # no head here to share the lookup's gradient with
    # With tied embeddings the last stage's head keeps the (meta) Parameter it shared with the embedding:
    # materialised, it becomes the stage's own copy.
    return model


class _StageModule(nn.Module):
    """A stage seen by the schedule as a plain module: FSDP units inside keep their own gather and
    reduce-scatter per micro-batch (see the module docstring)."""

    def __init__(self, part: nn.Module):
        super().__init__()
        self.part = part

    def forward(self, *args, **kwargs):
        return self.part(*args, **kwargs)


def attach_tied_group(parts: list[nn.Module], ids: list[int], num_stages: int, mesh: DeviceMesh) -> None:
    """With tied embeddings: create the process groups pairing, for each (dp_replicate, dp_shard, tp)
    coordinate, the first pipeline rank with the last (every rank takes part in every group's creation),
    and give this rank's first and last stage modules theirs as `tied_group`."""
    ranks = mesh.mesh  # (pp, dp_replicate, dp_shard, tp) global ranks
    me, mine = dist.get_rank(), None
    for first, last in zip(ranks[0].flatten().tolist(), ranks[-1].flatten().tolist()):
        group = new_group([first, last], desc="tied_embeddings")
        if me in (first, last):
            mine = group
    for part, sid in zip(parts, ids):
        if sid in (0, num_stages - 1):
            part.tied_group = mine
        if sid == num_stages - 1:
            # Megatron's `shared` mark: after the sum both copies hold one gradient, which the global gradient
            # norm must count once.
            part.output.weight.tied_copy = True


@torch.no_grad()
def sync_tied_grads(parts: list[nn.Module]) -> None:
    """Sum the gradients of the tied embedding's two copies (first stage's `tok_embeddings.weight`, last
    stage's `output.weight`) so both copies take the same step; nothing without tied embeddings under pipeline
    parallelism. Call after backward, before clipping."""
    for part in parts:
        group = getattr(part, "tied_group", None)
        if group is None:
            continue
        p = part.tok_embeddings.weight if part.tok_embeddings is not None else part.output.weight
        if p.grad is None:  # a stage that got no gradient still takes part in the sum
            p.grad = torch.zeros_like(p)
        grad = local(p.grad)  # FSDP: alike-sharded on both ends
        dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=group)


def build_schedule(parts: list[nn.Module], ids: list[int], num_stages: int, schedule: str, microbatches: int,
                   loss_fn, device, pp_group):
    """The stages of this rank and their schedule. `loss_fn` must already divide by the number of
    micro-batches: gradients are not rescaled by the schedule."""
    wrap = schedule != "zero_bubble"
    stages = [PipelineStage(_StageModule(part) if wrap and isinstance(part, FSDPModule) else part, sid, num_stages,
                            device, group=pp_group) for part, sid in zip(parts, ids)]
    if schedule in SINGLE_STAGE:
        return SINGLE_STAGE[schedule](stages[0], n_microbatches=microbatches, loss_fn=loss_fn, scale_grads=False), stages
    return MULTI_STAGE[schedule](stages, n_microbatches=microbatches, loss_fn=loss_fn, scale_grads=False), stages
