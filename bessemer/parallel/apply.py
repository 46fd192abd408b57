"""Build the model parts of this rank and parallelise them from outside, in torchtitan's order:
pipeline split -> tensor parallel -> FSDP -> materialise -> initialise."""

import logging
import warnings

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
from torch.distributed.device_mesh import DeviceMesh

from bessemer.config import ParallelConfig, PrecisionConfig
from bessemer.model.llama import Transformer, build_model
from bessemer.model.registry import ModelArgs
from bessemer.parallel.dims import ParallelDims
from bessemer.parallel.fsdp import apply_fsdp
from bessemer.parallel.layout import stage_layers
from bessemer.parallel.pipeline import build_stage_module, stage_ids
from bessemer.parallel.tensor import apply_tp
from bessemer.precision.apply import prepare_model
from bessemer.precision.policy import PrecisionPolicy


def quiet_known_warnings() -> None:
    """Silence two torch messages that every rank would print, each checked to be harmless here:
    - FSDP2 warns that a pipeline stage returns a view (the last block's local shard under sequence
      parallelism); stage outputs are only sent to the next stage, never modified in place.
    - DTensor warns that the gradient norm over a 2-D (dp_shard, tp) mesh takes two all-reduces; it is one
      scalar per step, and every rank reduces in the same order, so all ranks get the same bits."""
    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module .* returned a view tensor")
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)


def uses_fsdp(dims: ParallelDims) -> bool:
    return dims.dp_shard > 1 or dims.dp_replicate > 1


def parallelize(model: nn.Module, dims: ParallelDims, mesh: DeviceMesh, cfg: ParallelConfig,
                policy: PrecisionPolicy, precision: PrecisionConfig) -> None:
    """Apply tensor parallelism, FP8, activation checkpointing and FSDP (or the autocast islands) to one
    model part, in place (still on the meta device)."""
    if dims.tp > 1:
        apply_tp(model, mesh["tp"], cfg.sequence_parallel, cfg.loss_parallel)
    prepare_model(model, policy, precision, dims.tp)
    if uses_fsdp(dims):
        dp_mesh = mesh["dp_replicate", "dp_shard"] if dims.dp_replicate > 1 else mesh["dp_shard"]
        apply_fsdp(model, dp_mesh, policy, offload=precision.offload.mode == "full",
                   reshard_after_forward=dims.pp == 1)
    else:
        policy.apply_autocast_islands(model)


def build_model_parts(args: ModelArgs, max_seq_len: int, dims: ParallelDims, mesh: DeviceMesh,
                      cfg: ParallelConfig, precision: PrecisionConfig, device: torch.device,
                      seed: int) -> tuple[list[Transformer], list[int]]:
    """This rank's model parts (one, or one per pipeline stage it holds) and their stage ids. The layout
    must have passed `layout.check_layout`."""
    quiet_known_warnings()
    with torch.device("meta"):
        if dims.pp > 1:
            num_stages = dims.pp * cfg.stages_per_rank
            ids = stage_ids(mesh["pp"].get_local_rank(), dims.pp, cfg.stages_per_rank)
            ranges = stage_layers(args.n_layers, num_stages, cfg.pp_layers)
            parts = [build_stage_module(args, max_seq_len, ranges[i], num_stages, i) for i in ids]
        else:
            parts, ids = [Transformer(args, max_seq_len)], [0]
    policy = PrecisionPolicy(precision)
    for part in parts:
        parallelize(part, dims, mesh, cfg, policy, precision)
        part.to_empty(device=device)
        if cfg.init_from_full:
            part.init_buffers()
        else:
            part.init_weights()  # each shard draws its own values: not the single-process weights
    if cfg.init_from_full:
        # The same weights as a single-process run with this seed, whatever the layout.
        torch.manual_seed(seed)
        full = build_model(args, max_seq_len, "cpu").state_dict()
        for part in parts:
            keys = part.state_dict().keys()
            set_model_state_dict(part, {k: full[k].to(device) for k in keys},
                                 options=StateDictOptions(full_state_dict=True, strict=True))
    return parts, ids
