"""AdamW and the learning-rate schedule (warmup, then cosine, linear or constant).

One optimizer per model part (a pipeline rank may hold several stages), behind one object; its state dict is
keyed by parameter names (flattened), so it is the same whatever the layout that saved it.
"""

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_optimizer_state_dict,
                                                     set_optimizer_state_dict)

from bessemer.config import TrainConfig
from bessemer.precision.offload import HostAdamW, split_offloaded

_FLAT = StateDictOptions(flatten_optimizer_state_dict=True)


def adamw_groups(params: list[nn.Parameter], cfg: TrainConfig) -> list[dict]:
    """Weight decay on matrices only: decaying norm gains towards 0 only hurts (nanoGPT, GPT-3)."""
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def adamw_defaults(cfg: TrainConfig) -> dict:
    return {"lr": cfg.lr, "betas": (cfg.beta1, cfg.beta2), "eps": cfg.eps}


def build_adamw(model: nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(adamw_groups(params, cfg), **adamw_defaults(cfg))


class Optimizers:
    """AdamW for each model part, stepped together. With host offload (`offload_fraction` > 0) each part's
    first fraction of parameters steps in a HostAdamW instead (precision/offload.py)."""

    def __init__(self, parts: list[nn.Module], cfg: TrainConfig, offload_fraction: float = 0.0):
        self.parts = parts
        self.device_optimizers: list[torch.optim.AdamW | None] = []
        self.host_optimizers: list[HostAdamW | None] = []
        for part in parts:
            named = [(n, p) for n, p in part.named_parameters() if p.requires_grad]
            host = split_offloaded(named, offload_fraction) if offload_fraction > 0 else set()
            on_device = [p for n, p in named if n not in host]
            self.device_optimizers.append(torch.optim.AdamW([g for g in adamw_groups(on_device, cfg) if g["params"]],
                                                            **adamw_defaults(cfg)) if on_device else None)
            offloaded = [(n, p) for n, p in named if n in host]
            self.host_optimizers.append(HostAdamW(offloaded, adamw_groups([p for _, p in offloaded], cfg),
                                                  **adamw_defaults(cfg)) if offloaded else None)

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        """The torch optimizers (device ones, and those inside the host ones): what the LR schedules drive."""
        return ([o for o in self.device_optimizers if o is not None]
                + [h.optimizer for h in self.host_optimizers if h is not None])

    @property
    def params(self) -> list[nn.Parameter]:
        return [p for part in self.parts for p in part.parameters()]

    @property
    def lr(self) -> float:
        return self.optimizers[0].param_groups[0]["lr"]

    def zero_grad(self) -> None:
        for p in self.params:  # also those that only a host optimizer steps
            p.grad = None
        for host in self.host_optimizers:
            if host is not None:
                host.zero_grad()

    def step(self) -> None:
        for opt in self.device_optimizers + self.host_optimizers:
            if opt is not None:
                opt.step()

    def params_changed(self) -> None:
        """The weights were replaced from outside (e.g. loaded): host-offloaded copies follow."""
        for host in self.host_optimizers:
            if host is not None:
                host.refresh()

    def state_dict(self) -> dict:
        out = {}
        for part, dev, host in zip(self.parts, self.device_optimizers, self.host_optimizers):
            if dev is not None:
                out.update(get_optimizer_state_dict(part, dev, options=_FLAT))
            if host is not None:
                out.update(host.state_dict())
        return out

    def load_state_dict(self, state: dict) -> None:
        for part, dev, host in zip(self.parts, self.device_optimizers, self.host_optimizers):
            if dev is not None:
                set_optimizer_state_dict(part, dev, optim_state_dict=state, options=_FLAT)
            if host is not None:
                host.load_state_dict(state)


@dataclass
class LRMultiplier:
    """lr(step) / peak lr for the 0-based index of the step being taken. A plain object, so LambdaLR's
    state_dict records its settings (and torch.load with weights_only reads them back)."""

    warmup: int
    steps: int
    schedule: str
    min_ratio: float

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / self.warmup
        if self.schedule == "constant":
            return 1.0
        progress = min(1.0, (step - self.warmup) / max(1, self.steps - self.warmup))
        if self.schedule == "linear":
            return 1.0 - (1.0 - self.min_ratio) * progress
        if self.schedule == "cosine":
            return self.min_ratio + (1.0 - self.min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
        raise AssertionError(f"unknown schedule {self.schedule!r}")


class LRSchedules:
    """One LambdaLR per optimizer, all on the same schedule; the state of one stands for all."""

    def __init__(self, optimizers: Optimizers, cfg: TrainConfig):
        multiplier = LRMultiplier(cfg.warmup, cfg.steps, cfg.schedule, cfg.min_lr_ratio)
        self.schedules = [torch.optim.lr_scheduler.LambdaLR(opt, multiplier) for opt in optimizers.optimizers]

    def step(self) -> None:
        for s in self.schedules:
            s.step()

    def state_dict(self) -> dict:
        return self.schedules[0].state_dict()

    def load_state_dict(self, state: dict) -> None:
        for s in self.schedules:
            s.load_state_dict(state)
