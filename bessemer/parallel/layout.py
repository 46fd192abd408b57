"""Layout checks that need no torch: they run in the launcher before any process starts, in every rank
before any collective, and in `plan`. Each message names the numbers that disagree."""

import logging
from typing import TYPE_CHECKING

from bessemer.config import ParallelConfig, check_data_parallel
from bessemer.errors import ConfigError
from bessemer.model.registry import ModelArgs
from bessemer.parallel.dims import ParallelDims

if TYPE_CHECKING:
    from bessemer.config import JobConfig

log = logging.getLogger(__name__)


def check_tp(args: ModelArgs, tp: int) -> None:
    """Heads, kv heads, FFN width and vocabulary must split evenly over the tensor-parallel ranks."""
    for what, n in (("n_heads", args.n_heads), ("n_kv_heads", args.n_kv_heads), ("ffn_hidden", args.ffn_hidden),
                    ("vocab_size", args.vocab_size)):
        if n % tp:
            raise ConfigError(f"parallel.tp = {tp} does not divide the model's {what} ({n})")
    if args.tie_embeddings:
        raise ConfigError("tensor parallelism with tied embeddings is not supported; use an untied size")


def stage_layers(n_layers: int, num_stages: int, pp_layers: list[int]) -> list[range]:
    """The layer indices of each pipeline stage: `pp_layers` if given, else as even as possible (earlier
    stages take the remainder, since the last stage also carries the output head)."""
    if pp_layers:
        if len(pp_layers) != num_stages or sum(pp_layers) != n_layers or min(pp_layers) < 1:
            raise ConfigError(f"parallel.pp_layers {pp_layers} must list {num_stages} positive layer counts "
                              f"(pp x virtual stages) summing to the model's {n_layers} layers")
        counts = pp_layers
    else:
        if num_stages > n_layers:
            raise ConfigError(f"{num_stages} pipeline stages (pp x virtual stages) for a model of {n_layers} "
                              f"layers: each stage needs at least one layer")
        base, extra = divmod(n_layers, num_stages)
        counts = [base + (i < extra) for i in range(num_stages)]
    starts = [sum(counts[:i]) for i in range(num_stages)]
    return [range(s, s + c) for s, c in zip(starts, counts)]


def pipeline_microbatches(cfg: ParallelConfig, pp: int, micro_batch: int) -> int:
    """The number of pipeline micro-batches per forward pass (parallel.microbatches, default pp x virtual
    stages); it must divide train.micro_batch."""
    n = cfg.microbatches or pp * cfg.stages_per_rank
    if micro_batch % n:
        raise ConfigError(f"parallel.microbatches ({n}) must divide the local batch of each forward pass, "
                          f"train.micro_batch ({micro_batch})")
    if n < pp:
        log.warning("parallel.microbatches (%d) < pp (%d): some stages idle for most of each step", n, pp)
    return n


def check_layout(args: ModelArgs, dims: ParallelDims, cfg: ParallelConfig, micro_batch: int) -> int:
    """Everything about a layout that can be wrong, before any process group exists. Returns the number of
    pipeline micro-batches per forward pass (1 without pipeline parallelism)."""
    if dims.tp > 1:
        check_tp(args, dims.tp)
    if dims.pp > 1:
        if cfg.loss_parallel and dims.tp > 1:
            raise ConfigError("parallel.loss_parallel with pipeline parallelism is not supported yet; set "
                              "parallel.loss_parallel=false (the head then gathers logits over tp)")
        if cfg.pp_schedule in ("gpipe", "1f1b") and cfg.stages_per_rank != 1:
            raise ConfigError(f"parallel.pp_schedule {cfg.pp_schedule} runs one stage per rank; "
                              f"parallel.virtual_stages is {cfg.stages_per_rank}")
        if cfg.pp_schedule in ("interleaved_1f1b", "zero_bubble") and cfg.stages_per_rank < 2:
            raise ConfigError(f"parallel.pp_schedule {cfg.pp_schedule} needs parallel.virtual_stages >= 2")
        stage_layers(args.n_layers, dims.pp * cfg.stages_per_rank, cfg.pp_layers)
        return pipeline_microbatches(cfg, dims.pp, micro_batch)
    if cfg.pp_layers:
        raise ConfigError(f"parallel.pp_layers {cfg.pp_layers} is set but parallel.pp is 1")
    return 1


def check_job(cfg: "JobConfig", world_size: int) -> ParallelDims:
    """All layout checks for a job on `world_size` ranks, from the config and the data's index alone."""
    from bessemer.tokens.shards import TokenDataset
    from bessemer.model.registry import resolve_model_args

    dims = ParallelDims.from_config(cfg.parallel, world_size)
    args = resolve_model_args(cfg.model, TokenDataset(cfg.data.path).vocab_size)
    check_layout(args, dims, cfg.parallel, cfg.train.micro_batch)
    check_data_parallel(cfg.train, dims.dp)
    return dims
