"""Guards against numeric failures that a loss curve hides. Each raises an `alert` event (kind, message):

- loss_scale_floor: the fp16 loss scale reached its floor — gradients keep overflowing even there, or the
  floor is set so low that gradients underflow;
- skipped_steps: k consecutive steps skipped for non-finite gradients — the run is not training;
- silent_update: the loss is finite but every gradient is exactly zero — the optimizer steps on nothing
  (a scale so small that fp16 gradients flush to zero looks like a flat, healthy loss);
- nonfinite: a non-finite parameter or gradient outside routine fp16 overflow. The next step then hooks
  every module's forward and names the first whose output is not finite (pipeline stages in order).
"""

import math
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

from bessemer.config import GuardConfig
from bessemer.dtensor import local

Alert = Callable[..., None]  # alert(kind, message, **fields)


@torch.no_grad()
def first_nonfinite_param(parts: list[nn.Module]) -> str | None:
    for part in parts:
        for name, p in part.named_parameters():
            if not torch.isfinite(local(p)).all():
                return name
    return None


class NonfiniteTracer:
    """Forward hooks on every module; remembers the first (in execution order) whose output is not finite."""

    def __init__(self, parts: list[nn.Module]):
        self.first: str | None = None
        self.handles = [module.register_forward_hook(self._hook(name))
                        for part in parts for name, module in part.named_modules() if name]

    def _hook(self, name: str):
        def hook(module, args, output):
            if self.first is None:
                out = output[0] if isinstance(output, (tuple, list)) else output
                if isinstance(out, torch.Tensor) and out.is_floating_point() and not torch.isfinite(local(out)).all():
                    self.first = name
        return hook

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


class Guards:
    def __init__(self, cfg: GuardConfig, alert: Alert, distributed: bool):
        self.cfg = cfg
        self.alert = alert if cfg.enabled else (lambda *a, **k: None)
        self.distributed = distributed
        self.skipped_streak = 0
        self.zero_streak = 0
        self.floor_alerted = False
        self.trace_next = False  # hook the next step's forward
        self.tracer: NonfiniteTracer | None = None

    def start_step(self, parts: list[nn.Module]) -> None:
        """Switch the forward hooks on for this step if the last one asked for a trace."""
        if self.trace_next:
            self.trace_next = False
            self.tracer = NonfiniteTracer(parts)

    def check(self, step: int, loss: float, grad_norm: float, finite: bool, scaler, parts: list[nn.Module]) -> None:
        """After the update of `step`. Every rank calls it (the trace gathers over ranks); `loss` and
        `grad_norm` are global values, the same on every rank."""
        if self.tracer is not None:
            self._report_trace(step)
        if scaler.enabled:
            if scaler.at_floor and not self.floor_alerted:
                self.alert("loss_scale_floor", f"loss scale at its floor {scaler.scale:g} "
                           f"(precision.scaler.min_scale): gradients overflow even there, or underflow below it",
                           scale=scaler.scale)
            self.floor_alerted = scaler.at_floor
        self.skipped_streak = 0 if finite else self.skipped_streak + 1
        if self.skipped_streak == self.cfg.skipped_steps:
            self.alert("skipped_steps", f"{self.skipped_streak} consecutive steps skipped for non-finite gradients",
                       skipped=self.skipped_streak)
        zero = finite and grad_norm == 0.0 and math.isfinite(loss)
        self.zero_streak = self.zero_streak + 1 if zero else 0
        if self.zero_streak == 1:
            self.alert("silent_update", f"loss {loss:.4f} is finite but every gradient is zero: the update is zero"
                       + (f" (loss scale {scaler.scale:g}: fp16 gradients flush to zero)" if scaler.enabled else ""),
                       scale=scaler.scale if scaler.enabled else None)
        if not scaler.enabled and (not finite or not math.isfinite(loss)):
            self._nonfinite(step, "gradients" if math.isfinite(loss) else "loss", parts)
        elif not finite and scaler.at_floor:
            self._nonfinite(step, "gradients at the loss-scale floor", parts)

    def _nonfinite(self, step: int, what: str, parts: list[nn.Module]) -> None:
        name = first_nonfinite_param(parts)
        if self.distributed:
            names = [None] * dist.get_world_size()
            dist.all_gather_object(names, name)
            name = next((n for n in names if n is not None), None)
        self.alert("nonfinite", f"non-finite {what} at step {step}; the update was skipped"
                   + (f"; parameter {name} is not finite" if name else ""), parameter=name)
        if self.cfg.trace_nonfinite and self.tracer is None:
            self.trace_next = True

    def _report_trace(self, step: int) -> None:
        first = self.tracer.first
        self.tracer.remove()
        self.tracer = None
        firsts = [first]
        if self.distributed:
            firsts = [None] * dist.get_world_size()
            dist.all_gather_object(firsts, first)
        # Ranks are ordered pipeline-outermost, so the lowest rank with a hit is the earliest stage.
        hit = next(((r, n) for r, n in enumerate(firsts) if n is not None), None)
        if hit is None:
            self.alert("nonfinite", f"traced step {step}: every module's output was finite (the non-finite value "
                       "came from the gradients, or was transient)", module=None)
        else:
            self.alert("nonfinite", f"traced step {step}: first module with a non-finite output is {hit[1]} "
                       f"(rank {hit[0]})", module=hit[1], rank=hit[0])
