"""One optimizer step, read top to bottom: accumulate gradients over the micro-batches (through the pipeline
schedule when there is one), unscale, clip, update unless a gradient is not finite, advance the schedule.

The step never waits for the device: whether the gradients were finite stays a device flag that the fused
optimizer and the loss scaler read there, and the step's numbers stay on the device (`StepOutput`) until the
next log step pulls the interval's numbers in one transfer (train/reporting.py). Two settings still read the
device every step, because the host needs the value to go on: data.reweight = loss (the next step's sample plan
comes from the per-domain losses) and optimizer states offloaded to the host (precision.offload)."""

import contextlib
import math
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch

from bessemer.config import JobConfig
from bessemer.dtensor import full
from bessemer.tokens.mixture import DomainLosses, MixtureLoader
from bessemer.parallel.dims import ParallelDims
from bessemer.parallel.fsdp import set_final_microbatch
from bessemer.parallel.pipeline import sync_tied_grads
from bessemer.parallel.reduce import clip_grad_norm_
from bessemer.precision.fp8 import precompute_fp8_scales
from bessemer.precision.policy import PrecisionPolicy, compute_context
from bessemer.precision.scaler import LossScaler, unscale_
from bessemer.train.builders import ModelBuild
from bessemer.train.optim import LRSchedules, Optimizers
from bessemer.train.state import TrainState

# The step's device numbers, in this order (float64): this rank's share of the global loss (its loss where it
# holds one, else 0), the global gradient norm, 1 if it was finite, the loss scale the step used, the scale and
# the overflow count after its update.
DEVICE_FIELDS = ("loss_share", "grad_norm", "finite", "loss_scale", "scale_after", "overflows")


@dataclass
class StepOutput:
    """One step's numbers: `device` (DEVICE_FIELDS) and `domain_totals` ((2, domains) per-domain loss sums and
    sample counts this rank holds, or None) wait on the device; `host` is already known on the host (lr, data
    wait, the mixture's shares, and per-domain losses when they had to be read at once)."""

    step: int
    device: torch.Tensor
    domain_totals: torch.Tensor | None
    host: dict
    sections: dict[str, float] = field(default_factory=dict)


def step_unless_nonfinite(optimizers: Optimizers, finite: torch.Tensor) -> None:
    """Step every optimizer unless `finite` (a device flag) is false. A fused AdamW takes the flag as its
    `found_inf` and skips on the device, step counter included — torch's GradScaler relies on the same
    contract; any other optimizer (a host-offloaded one) needs the flag on the host."""
    found_inf = (~finite).float()
    on_host: bool | None = None
    for opt in optimizers.device_optimizers + optimizers.host_optimizers:
        if opt is None:
            continue
        # The groups' own flag: a resumed optimizer's groups carry the saved run's `fused` (another layout's may
        # have been unfused), and only fused kernels take `found_inf`.
        if getattr(opt, "_step_supports_amp_scaling", False) and all(g.get("fused") for g in opt.param_groups):
            opt.found_inf = found_inf
            try:
                opt.step()
            finally:
                del opt.found_inf
            continue
        if on_host is None:
            on_host = bool(finite)
        if on_host:
            opt.step()


class TrainStep:
    """The step of one rank: its model parts, loader, optimizers, schedules and loss scaler. `sections` holds
    this rank's wall time per part of the last step (data, forward/backward, optimizer)."""

    def __init__(self, cfg: JobConfig, build: ModelBuild, dims: ParallelDims, loader, optimizers: Optimizers,
                 lr_schedules: LRSchedules, scaler: LossScaler, state: TrainState, policy: PrecisionPolicy,
                 device: torch.device, sharded: bool, distributed: bool):
        self.cfg, self.build, self.dims, self.loader = cfg, build, dims, loader
        self.optimizers, self.lr_schedules, self.scaler, self.state = optimizers, lr_schedules, scaler, state
        self.policy, self.device, self.sharded, self.distributed = policy, device, sharded, distributed
        self.mixture = isinstance(loader, MixtureLoader)
        self.tokens_per_step = cfg.train.global_batch * cfg.train.seq_len
        self.guards = None  # precision.guards.Guards, set once alerts can be raised
        self.sections: dict[str, float] = {}

    def compute(self) -> contextlib.AbstractContextManager:
        """Autocast where FSDP2 does not cast the parameters; fp16 GEMM emulation on CPU."""
        return compute_context(self.policy, self.device, autocast=not self.sharded)

    def loss_context(self) -> contextlib.AbstractContextManager:
        """Under loss parallelism the logits stay sharded over the vocabulary; cross-entropy must know."""
        if self.dims.tp > 1 and self.cfg.parallel.loss_parallel:
            from torch.distributed.tensor.parallel import loss_parallel

            return loss_parallel()
        return contextlib.nullcontext()

    def forward_backward(self, inputs: torch.Tensor, targets: torch.Tensor,
                         domain_losses: DomainLosses | None = None) -> torch.Tensor | None:
        """Forward and backward of one micro-batch; returns its mean loss where this rank computes it. With
        `domain_losses` (a mixture) each sample's loss is added to its domain's (under pipeline parallelism from
        the last stage, where the schedule's loss left them: PipelineLoss.per_sample)."""
        accum, build = self.loader.accum_steps, self.build
        with self.loss_context():
            if build.pp_schedule is not None:
                losses: list[torch.Tensor] = []
                args = (inputs,) if build.has_first else ()
                with self.compute():
                    build.pp_schedule.step(*args, target=targets if build.has_last else None, losses=losses)
                if not build.has_last:
                    return None
                if domain_losses is not None:
                    # The last len(losses) calls are this step's micro-batches (the schedule's first step also
                    # calls the loss on its own while it prepares the backward).
                    samples = torch.cat([full(s) for s in build.pp_samples[-len(losses):]])
                    build.pp_samples.clear()
                    domain_losses.add(samples, self.loader.last_domains)
                return torch.stack(losses).sum().detach() * accum / self.scaler.scale
            with self.compute():
                logits = build.parts[0](inputs)  # (B, T, vocab)
                # build.loss: builders.loss_fn, compiled under train.compile (as the pipeline schedule's loss is)
                if domain_losses is None:
                    loss = build.loss(logits, targets)
                else:
                    per_sample = build.loss(logits, targets, per_sample=True)  # (B,)
                    loss = per_sample.mean()
                    per_sample = per_sample.detach()
                    domain_losses.add(full(per_sample),
                                      self.loader.last_domains)
                # Each micro-batch's mean loss is scaled so the summed gradients equal the global batch's mean
                # (and, in fp16, multiplied by the loss scale).
                (loss * (self.scaler.scale / accum)).backward()
        loss = loss.detach()
        return full(loss)

    def __call__(self) -> StepOutput:
        """One optimizer step; its numbers stay on the device (StepOutput) until `settle` reads them."""
        build = self.build
        for part in build.parts:
            part.train()
        self.optimizers.zero_grad()
        self.guards.start_step(build.parts)
        loss_sum = torch.zeros((), device=self.device)
        domain_losses = DomainLosses(self.loader.domains, self.device) if self.mixture else None
        data_s, t0 = 0.0, time.perf_counter()
        for i in range(self.loader.accum_steps):
            set_final_microbatch(build.parts, i == self.loader.accum_steps - 1)  # HSDP: one all-reduce per step
            t = time.perf_counter()
            batch = self.loader.next_batch()
            data_s += time.perf_counter() - t
            inputs, targets = (t.to(self.device, non_blocking=True) for t in batch)
            loss = self.forward_backward(inputs, targets, domain_losses)
            if loss is not None:
                loss_sum += loss
        loss = loss_sum / self.loader.accum_steps
        t1 = time.perf_counter()
        params, scale = self.optimizers.params, self.scaler.scale
        if self.scaler.enabled:
            unscale_(params, 1.0 / scale)
        max_norm = self.cfg.train.grad_clip if self.cfg.train.grad_clip > 0 else math.inf
        sync_tied_grads(build.parts)  # pipeline + tied embeddings: both copies get the summed gradient
        # The norm is reduced over every shard and stage: a non-finite gradient anywhere makes it non-finite on
        # every rank, so all ranks skip the same steps.
        grad_norm = clip_grad_norm_(params, max_norm, build.mesh["pp"].get_group() if self.dims.pp > 1 else None)
        finite = torch.isfinite(grad_norm)
        lr = self.optimizers.lr
        used_scale = scale.clone() if self.scaler.enabled else torch.ones((), device=self.device)
        step_unless_nonfinite(self.optimizers, finite)
        precompute_fp8_scales(build.parts)  # FSDP2 FP8 all-gathers of the next forward use these
        self.scaler.update(finite)
        # Host wall times: on a GPU, kernels still queued when a section ends count in the next one.
        self.sections = {"data_s": data_s, "forward_backward_s": t1 - t0 - data_s,
                         "optimizer_s": time.perf_counter() - t1}
        self.lr_schedules.step()  # a skipped step still consumed its data and its place in the schedule
        self.state.step += 1
        self.state.tokens_seen += self.tokens_per_step
        # One rank per data-parallel group holds the loss (last pipeline stage, tensor-parallel rank 0); the sum
        # of the shares over all ranks, divided by dp, is the global batch's mean loss.
        holds = not self.distributed or (build.has_last and build.tp_rank == 0)
        if self.scaler.enabled:
            after = self.scaler.snapshot()
        else:  # scale 1, no overflows
            after = torch.zeros(2, dtype=torch.float64, device=self.device)
            after[0] = 1.0
        values = torch.cat([torch.stack([loss.float() if holds else torch.zeros((), device=self.device),
                                         grad_norm.float(), finite.float(), used_scale.float()]).double(),
                            after.double()])
        host = {"lr": lr, "data_wait_s": data_s, "tokens_seen": self.state.tokens_seen,
                "data_epoch": self.loader.epoch}
        if self.mixture:
            host |= self.loader.step_metrics()  # token share, weights, epochs per domain of this step
        totals = None
        if domain_losses is not None:
            holds_domains = not self.distributed or build.tp_rank == 0
            if self.cfg.data.reweight == "loss":  # the next step's plan needs them now
                host["domain_loss"] = domain_losses.reduce(holds_domains, self.distributed)
                self.loader.update_losses(host["domain_loss"])  # identical on every rank
            else:
                totals = domain_losses.totals if holds_domains else torch.zeros_like(domain_losses.totals)
        return StepOutput(self.state.step, values, totals, host, self.sections)

    def settle(self, result: StepOutput, device: dict[str, float], domain_loss: dict[str, float] | None) -> dict:
        """A step's record once its numbers reached the host (`device`: DEVICE_FIELDS reduced over the ranks);
        the guards check it, every rank at the same step, in step order."""
        finite = bool(device["finite"])
        out = {"loss": device["loss_share"] / self.dims.dp if self.distributed else device["loss_share"],
               "grad_norm": device["grad_norm"], "lr": result.host["lr"], "skipped": int(not finite),
               "data_wait_s": result.host["data_wait_s"]}
        out |= {k: v for k, v in result.host.items() if k.startswith("domain_")}
        if domain_loss is not None:
            out["domain_loss"] = domain_loss
        # The scaler as it stood after this step's update (the live one may have moved on since).
        scaler = SimpleNamespace(enabled=self.scaler.enabled, scale=device["scale_after"],
                                 at_floor=self.scaler.enabled and device["scale_after"] <= self.scaler.cfg.min_scale)
        if self.scaler.enabled:
            out |= {"loss_scale": device["loss_scale"], "overflows": int(device["overflows"])}
        self.guards.check(result.step, out["loss"], out["grad_norm"], finite, scaler, self.build.parts)
        return out
