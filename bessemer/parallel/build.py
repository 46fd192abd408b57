"""The one recipe that builds a model for any layout: this rank's model parts, parallelised from outside in
torchtitan's order, stated here once:

    pipeline split -> FP8 -> tensor parallel -> activation checkpointing -> compile per block
        -> FSDP (or, without it, the autocast islands) -> materialise -> initialise

A single process is a mesh of one (`mesh=None`, every degree 1): the same steps run, and those of degree 1
(pipeline split, tensor parallelism, FSDP) do nothing. Parts are built on the meta device and only this rank's
shards are materialised: no rank ever holds the full model. Initialisation is per parameter and row block
(model/llama.py), so the gathered weights are the single-process weights of the same seed whatever the layout."""

import logging
import warnings

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh

from bessemer.config import ParallelConfig, PrecisionConfig
from bessemer.model.llama import Transformer
from bessemer.model.registry import ModelArgs
from bessemer.parallel.compile import apply_compile
from bessemer.parallel.dims import ParallelDims
from bessemer.parallel.fsdp import apply_fsdp
from bessemer.parallel.layout import stage_layers
from bessemer.parallel.pipeline import attach_tied_group, build_stage_module, stage_ids
from bessemer.parallel.recompute import apply_activation_checkpointing
from bessemer.parallel.tensor import apply_tp
from bessemer.precision.fp8 import convert_to_fp8
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


def single_process() -> ParallelDims:
    """The layout of one process: a mesh of one."""
    return ParallelDims(dp_replicate=1, dp_shard=1, tp=1, pp=1, world_size=1)


def parallelize(model: nn.Module, dims: ParallelDims, mesh: DeviceMesh | None, cfg: ParallelConfig,
                policy: PrecisionPolicy, precision: PrecisionConfig, compile_blocks: bool = False) -> None:
    """Apply FP8, tensor parallelism, activation checkpointing, torch.compile per block (`compile_blocks`) and
    FSDP (or the autocast islands) to one model part, in place (still on the meta device). `mesh` is None for
    a single process."""
    # FP8 before TP: torchao's Float8 parallel styles apply to Float8Linear layers only.
    convert_to_fp8(model, policy, precision.fp8, dims.tp, sharded=uses_fsdp(dims))
    if dims.tp > 1:
        apply_tp(model, mesh["tp"], cfg.sequence_parallel, cfg.loss_parallel)
    apply_activation_checkpointing(model, precision.activation_checkpoint)
    if compile_blocks:  # lazily: the graphs are traced at the first forward, on the materialised shards
        apply_compile(model)
    if uses_fsdp(dims):
        dp_mesh = mesh["dp_replicate", "dp_shard"] if dims.dp_replicate > 1 else mesh["dp_shard"]
        # Resharded after forward under pipeline parallelism too: each unit is gathered per micro-batch
        # (parallel/pipeline.py), so memory stays at the shards plus one unit.
        apply_fsdp(model, dp_mesh, policy, offload=precision.offload.mode == "full")
    else:
        policy.apply_autocast_islands(model)


def build_model_parts(args: ModelArgs, max_seq_len: int, dims: ParallelDims, mesh: DeviceMesh | None,
                      cfg: ParallelConfig, precision: PrecisionConfig, device: torch.device,
                      seed: int, compile_blocks: bool = False) -> tuple[list[Transformer], list[int]]:
    """This rank's model parts (one, or one per pipeline stage it holds) and their stage ids, each block
    compiled when `compile_blocks`. The layout must have passed `layout.check_layout`; `mesh` is None (and
    `dims` single_process()) for one process."""
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
        parallelize(part, dims, mesh, cfg, policy, precision, compile_blocks)
        part.to_empty(device=device)
        if args.tie_embeddings and part.tok_embeddings is not None and part.output is not None \
                and not uses_fsdp(dims):  # to_empty() made two Parameters of the shared one
            part.output.weight = part.tok_embeddings.weight
        part.init_weights(seed)  # this rank's shards only; together the single-process weights of `seed`
    if dims.pp > 1 and args.tie_embeddings:
        attach_tied_group(parts, ids, dims.pp * cfg.stages_per_rank, mesh)
    return parts, ids
