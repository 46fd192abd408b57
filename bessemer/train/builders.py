"""What a training run is built from, one builder per component, called top to bottom by `Trainer.__init__`:
the device, the process group and mesh with this rank's model parts (and their pipeline schedule), the resolved
config, the cold tier, the hang watchdog. Each builder takes only what it needs."""

import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from bessemer.checkpoint.paths import redact_url
from bessemer.config import CheckpointConfig, FaultConfig, JobConfig, to_toml
from bessemer.model.registry import ModelArgs
from bessemer.parallel.build import build_model_parts, single_process
from bessemer.parallel.compile import compile_enabled, compile_loss, disable_graph_caches
from bessemer.parallel.dims import Launch, ParallelDims, build_mesh, init_distributed, launcher_store
from bessemer.parallel.pipeline import build_schedule
from bessemer.train.watchdog import STORE_TIMEOUT_S, HangWatchdog

Event = Callable[..., None]  # event(name, step, **fields)


def build_device(launch: Launch) -> torch.device:
    """This rank's GPU, or the CPU. On a GPU, fp32 matrix products (what autocast leaves in fp32, and fp32
    runs) use TF32 tensor cores: about 8x the fp32 rate for a 10-bit mantissa in the products, accumulation
    still in fp32 — the setting torchtitan and Megatron train with."""
    if torch.cuda.is_available():
        torch.cuda.set_device(launch.local_rank)
        torch.set_float32_matmul_precision("high")  # TF32 for fp32 matmuls
        return torch.device("cuda", launch.local_rank)
    return torch.device("cpu")


def loss_fn(logits: torch.Tensor, targets: torch.Tensor, per_sample: bool = False) -> torch.Tensor:
    """The training loss, cross-entropy on fp32 logits: the mean over the B*T tokens, or with `per_sample` each
    sample's mean over its T tokens, (B,) (a domain mixture adds them up per domain); the mean of those is the
    former. Every path of the step takes the loss from here, compiled under train.compile (ModelBuild.loss)."""
    if not per_sample:
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(0, 1))  # mean over B*T tokens
    per_token = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(0, 1), reduction="none")  # (B*T,)
    return per_token.view(targets.shape).mean(dim=1)  # (B,)


@dataclass
class ModelBuild:
    """This rank's model parts and how they are laid out."""

    parts: list[nn.Module]
    mesh: object | None = None  # the 4-D DeviceMesh (None in one process)
    dp_mesh: object | None = None  # the flattened data-parallel mesh
    pp_schedule: object | None = None  # the pipeline schedule when pp > 1
    pp_stages: list = dataclasses.field(default_factory=list)
    tp_rank: int = 0
    has_first: bool = True  # pipeline: whether this rank feeds tokens
    has_last: bool = True  # ... and whether it computes the loss
    loss: Callable = loss_fn  # loss_fn, compiled under train.compile
    pp_samples: list | None = None  # PipelineLoss.per_sample: the last stage's per-sample losses (a mixture)

    @property
    def dp_rank(self) -> int:
        return self.dp_mesh.get_local_rank() if self.mesh is not None else 0


def build_model_parts_for(cfg: JobConfig, model_args: ModelArgs, dims: ParallelDims, launch: Launch,
                          device: torch.device, pp_microbatches: int, pipeline_loss: "PipelineLoss") -> ModelBuild:
    """Join the process group (when distributed), build the mesh and this rank's parts (and their pipeline
    schedule, whose loss is `pipeline_loss`); in one process, the whole model on a mesh of one. Either way the
    parts come from the one recipe, parallel/build.py. Under train.compile each block and the loss are compiled
    (parallel/compile.py)."""
    compiling = compile_enabled(cfg.train.compile, device.type)
    if compiling and dims.tp > 1:
        disable_graph_caches()
    loss = compile_loss(loss_fn) if compiling else loss_fn
    if not launch.distributed:
        parts, _ = build_model_parts(model_args, cfg.train.seq_len, single_process(), None, cfg.parallel,
                                     cfg.precision, device, cfg.run.seed, compile_blocks=compiling)
        return ModelBuild(parts, loss=loss)
    from bessemer.checkpoint.store import clear_tier_leftovers

    # Before the process group exists: each node clears what a killed attempt left in its own directories, so
    # no collective ever waits for that.
    clear_tier_leftovers(cfg.checkpoint, Path(cfg.run.dir), launch)
    init_distributed(launch, device.type, cfg.parallel.timeout_s, flight_recorder=cfg.fault.hang_timeout_s != 0)
    mesh, dp_mesh = build_mesh(dims, device.type)
    parts, stage_ids = build_model_parts(model_args, cfg.train.seq_len, dims, mesh, cfg.parallel, cfg.precision,
                                         device, cfg.run.seed, compile_blocks=compiling)
    build = ModelBuild(parts, mesh, dp_mesh, tp_rank=mesh["tp"].get_local_rank(), loss=loss)
    if dims.pp > 1:
        num_stages = dims.pp * cfg.parallel.stages_per_rank
        build.pp_schedule, build.pp_stages = build_schedule(
            parts, stage_ids, num_stages, cfg.parallel.pp_schedule, pp_microbatches,
            dataclasses.replace(pipeline_loss, loss=loss), device, mesh["pp"].get_group())
        build.pp_samples = pipeline_loss.per_sample
        build.has_first = any(s.is_first for s in build.pp_stages)
        build.has_last = any(s.is_last for s in build.pp_stages)
    return build


@dataclass(frozen=True)
class PipelineLoss:
    """The loss a pipeline schedule calls per micro-batch: scaled so the gradients summed over all micro-batches
    of the step are those of the global batch's mean loss (times the loss scale `scale()`). The schedule's own
    scale_grads is off: it would rescale gradients already accumulated by the previous train.micro_batch.
    `loss` is loss_fn, or its compiled form (the scaling stays outside the graph: the loss scale changes)."""

    scale: Callable[[], float]
    accum_steps: int
    pp_microbatches: int
    loss: Callable = loss_fn
    # A domain mixture: each sample's loss (detached) appended here, in the micro-batch's order, for the step to
    # add up per domain (the schedule itself returns one mean per pipeline micro-batch).
    per_sample: list | None = None

    def __call__(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self.per_sample is None:
            loss = self.loss(logits, targets)
        else:
            samples = self.loss(logits, targets, per_sample=True)  # (B,), equal lengths: their mean is the loss
            self.per_sample.append(samples.detach())
            loss = samples.mean()
        return loss * (self.scale() / (self.accum_steps * self.pp_microbatches))


def pipeline_loss(scale: Callable[[], float], accum_steps: int, pp_microbatches: int,
                  per_sample: list | None = None) -> PipelineLoss:
    return PipelineLoss(scale, accum_steps, pp_microbatches, per_sample=per_sample)


def resolved_config(cfg: JobConfig, model_args: ModelArgs, dims: ParallelDims) -> str:
    """The config as this run resolved it (the data's vocabulary, dp_shard = -1 made explicit), as TOML."""
    resolved = dataclasses.replace(
        cfg, model=dataclasses.replace(cfg.model, vocab_size=model_args.vocab_size),
        parallel=dataclasses.replace(cfg.parallel, dp_shard=dims.dp_shard))
    return to_toml(resolved)


def build_cold(cfg: CheckpointConfig, run_dir: Path, is_main: bool, events: list[tuple]):
    """Rank 0's cold tier (backups and restores), when configured; the uploader's thread appends its outcomes to
    `events` as (name, step, fields)."""
    cold = cfg.cold
    if not cold.url:
        return None
    from bessemer.checkpoint.cold_tier import ColdTier
    from bessemer.checkpoint.cold_store import load_key

    load_key(cold.key_env, cold.key_file)  # on every rank, before any collective: all fail alike
    if not is_main:
        return None
    # Stale upload snapshots are cleared with the macro tier's other leftovers (checkpoint/store.py).

    def done(step: int, error: BaseException | None, seconds: float) -> None:  # the uploader's thread
        if error is None:
            events.append(("cold_backup_saved", step, {"seconds": round(seconds, 3), "url": redact_url(cold.url)}))
        else:
            events.append(("alert", step, {"kind": "cold_backup_failed",
                                           "message": f"cold backup of step {step} failed: {error}"}))

    return ColdTier(cold, done)


def build_watchdog(cfg: FaultConfig, parallel_timeout_s: float, launch: Launch, attempt: int, run_dir: Path,
                   step: Callable[[], int]) -> HangWatchdog | None:
    """The hang watchdog of a distributed run (fault.hang_timeout_s; 0 = off), over a connection of its own to
    torchrun's store; None in one process, or without torchrun's store (said once in the rank's log)."""
    if not launch.distributed or cfg.hang_timeout_s == 0:
        return None
    store = launcher_store(STORE_TIMEOUT_S)
    if store is None:
        print("hang watchdog off: it needs torchrun's store (the agents' own, not one a rank hosts)", file=sys.stderr)
        return None
    return HangWatchdog(cfg.hang_timeout_s, parallel_timeout_s, launch, attempt, run_dir, store, step)
