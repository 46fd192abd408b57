"""AdamW and the learning-rate schedule (warmup, then cosine, linear or constant).

One optimizer per model part (a pipeline rank may hold several stages), behind one object; its state dict is
keyed by parameter names (flattened), so it is the same whatever the layout that saved it.
"""

import functools
import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_optimizer_state_dict,
                                                     set_optimizer_state_dict)

from bessemer.config import TrainConfig

_FLAT = StateDictOptions(flatten_optimizer_state_dict=True)


def build_adamw(model: nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only: decaying norm gains towards 0 only hurts (nanoGPT, GPT-3)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)


class Optimizers:
    """AdamW for each model part, stepped together."""

    def __init__(self, parts: list[nn.Module], cfg: TrainConfig):
        self.parts = parts
        self.optimizers = [build_adamw(part, cfg) for part in parts]

    @property
    def params(self) -> list[nn.Parameter]:
        return [p for part in self.parts for p in part.parameters()]

    @property
    def lr(self) -> float:
        return self.optimizers[0].param_groups[0]["lr"]

    def zero_grad(self) -> None:
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)

    def step(self) -> None:
        for opt in self.optimizers:
            opt.step()

    def state_dict(self) -> dict:
        sds = map(functools.partial(get_optimizer_state_dict, options=_FLAT), self.parts, self.optimizers)
        return {k: v for sd in sds for k, v in sd.items()}

    def load_state_dict(self, state: dict) -> None:
        for part, opt in zip(self.parts, self.optimizers):
            set_optimizer_state_dict(part, opt, optim_state_dict=state, options=_FLAT)


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
