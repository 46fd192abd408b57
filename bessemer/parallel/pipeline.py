"""Pipeline parallelism with torch.distributed.pipelining: split the layers into stages, one or more per rank,
and run micro-batches through a schedule.

Stages are the same Transformer class with the parts they do not own deleted (layers removed from the
ModuleDict, tok_embeddings / norm / output set to None), so parameter names — and checkpoint keys — are the
same as in the whole model. The first stage carries the embedding, the last the final norm and the head.
"""

from torch import nn
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import (Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B,
                                                    ScheduleInterleavedZeroBubble)

from bessemer.model.llama import Transformer
from bessemer.model.registry import ModelArgs

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
    return model


def build_schedule(parts: list[nn.Module], ids: list[int], num_stages: int, schedule: str, microbatches: int,
                   loss_fn, device, pp_group):
    """The stages of this rank and their schedule. `loss_fn` must already divide by the number of
    micro-batches: gradients are not rescaled by the schedule."""
    stages = [PipelineStage(part, sid, num_stages, device, group=pp_group) for part, sid in zip(parts, ids)]
    if schedule in SINGLE_STAGE:
        return SINGLE_STAGE[schedule](stages[0], n_microbatches=microbatches, loss_fn=loss_fn, scale_grads=False), stages
    return MULTI_STAGE[schedule](stages, n_microbatches=microbatches, loss_fn=loss_fn, scale_grads=False), stages
