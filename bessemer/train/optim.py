"""AdamW and the learning-rate schedule (warmup, then cosine, linear or constant)."""

import math
from dataclasses import dataclass

import torch
from torch import nn

from bessemer.config import TrainConfig


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only: decaying norm gains towards 0 only hurts (nanoGPT, GPT-3)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)


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


def build_lr_schedule(optimizer: torch.optim.Optimizer, cfg: TrainConfig) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, LRMultiplier(cfg.warmup, cfg.steps, cfg.schedule, cfg.min_lr_ratio))
