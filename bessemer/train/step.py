"""One optimizer step, read top to bottom: accumulate gradients over the micro-batches (through the pipeline
schedule when there is one), unscale, clip, update unless a gradient is not finite, advance the schedule."""

import contextlib
import math
import time

import torch
import torch.nn.functional as F
from torch.distributed.tensor import DTensor

from bessemer.config import JobConfig
from bessemer.dataset.mixture import DomainLosses, MixtureLoader
from bessemer.parallel.dims import ParallelDims
from bessemer.parallel.pipeline import sync_tied_grads
from bessemer.parallel.reduce import clip_grad_norm_, global_loss
from bessemer.precision.policy import PrecisionPolicy, compute_context
from bessemer.precision.scaler import LossScaler, unscale_
from bessemer.train.builders import ModelBuild, loss_fn
from bessemer.train.optim import LRSchedules, Optimizers
from bessemer.train.state import TrainState


def sample_losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Each sample's mean loss over its tokens, (B,); their mean is loss_fn's."""
    per_token = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(0, 1), reduction="none")
    return per_token.view(targets.shape).mean(dim=1)


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
        `domain_losses` (a mixture, without pipeline parallelism) each sample's loss is added to its domain's."""
        accum, build = self.loader.accum_steps, self.build
        with self.loss_context():
            if build.pp_schedule is not None:
                losses: list[torch.Tensor] = []
                args = (inputs,) if build.has_first else ()
                with self.compute():
                    build.pp_schedule.step(*args, target=targets if build.has_last else None, losses=losses)
                return torch.stack(losses).sum().detach() * accum / self.scaler.scale if build.has_last else None
            with self.compute():
                logits = build.parts[0](inputs)  # (B, T, vocab)
                if domain_losses is None:
                    loss = loss_fn(logits, targets)
                else:
                    per_sample = sample_losses(logits, targets)  # (B,)
                    loss = per_sample.mean()
                    per_sample = per_sample.detach()
                    domain_losses.add(per_sample.full_tensor() if isinstance(per_sample, DTensor) else per_sample,
                                      self.loader.last_domains)
                # Each micro-batch's mean loss is scaled so the summed gradients equal the global batch's mean
                # (and, in fp16, multiplied by the loss scale).
                (loss * (self.scaler.scale / accum)).backward()
        loss = loss.detach()
        return loss.full_tensor() if isinstance(loss, DTensor) else loss

    def __call__(self) -> dict:
        """One optimizer step; returns its numbers (loss, grad_norm, lr, skipped, data_wait_s, ...)."""
        build = self.build
        for part in build.parts:
            part.train()
        self.optimizers.zero_grad()
        self.guards.start_step(build.parts)
        loss_sum = torch.zeros((), device=self.device)
        # Per-domain losses need each sample's loss; pipeline schedules only return micro-batch means.
        domain_losses = DomainLosses(self.loader.domains, self.device) if self.mixture and self.dims.pp == 1 else None
        data_s, t0 = 0.0, time.perf_counter()
        for _ in range(self.loader.accum_steps):
            t = time.perf_counter()
            batch = self.loader.next_batch()
            data_s += time.perf_counter() - t
            inputs, targets = (t.to(self.device, non_blocking=True) for t in batch)
            loss = self.forward_backward(inputs, targets, domain_losses)
            if loss is not None:
                loss_sum += loss
        loss = loss_sum / self.loader.accum_steps
        t1 = time.perf_counter()
        params = self.optimizers.params
        if self.scaler.enabled:
            unscale_(params, 1.0 / self.scaler.scale)
        max_norm = self.cfg.train.grad_clip if self.cfg.train.grad_clip > 0 else math.inf
        sync_tied_grads(build.parts)  # pipeline + tied embeddings: both copies get the summed gradient
        # The norm is reduced over every shard and stage: a non-finite gradient anywhere makes it non-finite on
        # every rank, so all ranks skip the same steps.
        grad_norm = clip_grad_norm_(params, max_norm, build.mesh["pp"].get_group() if self.dims.pp > 1 else None)
        finite = bool(torch.isfinite(grad_norm))
        lr, scale = self.optimizers.lr, self.scaler.scale
        if finite:
            self.optimizers.step()
        self.scaler.update(finite)
        # Host wall times: on a GPU, kernels still queued when a section ends count in the next one.
        self.sections = {"data_s": data_s, "forward_backward_s": t1 - t0 - data_s,
                         "optimizer_s": time.perf_counter() - t1}
        self.lr_schedules.step()  # a skipped step still consumed its data and its place in the schedule
        self.state.step += 1
        self.state.tokens_seen += self.tokens_per_step
        if self.distributed:
            holds = build.has_last and build.tp_rank == 0
            loss = global_loss(loss, holds, self.dims.dp)
        out = {"loss": loss.item(), "grad_norm": grad_norm.item(), "lr": lr, "skipped": int(not finite),
               "data_wait_s": data_s}
        if self.mixture:
            out |= self.loader.step_metrics()  # token share, weights, epochs per domain of this step
        if domain_losses is not None:
            holds = not self.distributed or build.tp_rank == 0
            out["domain_loss"] = domain_losses.reduce(holds, self.distributed)
            self.loader.update_losses(out["domain_loss"])  # identical on every rank: the next step's weights
        if self.scaler.enabled:
            out |= {"loss_scale": scale, "overflows": self.scaler.overflows}
        self.guards.check(self.state.step, out["loss"], out["grad_norm"], finite, self.scaler, build.parts)
        return out
