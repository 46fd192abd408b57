"""AdamW and the learning-rate schedule (warmup, then cosine, linear or constant).

One optimizer per model part (a pipeline rank may hold several stages), behind one object; its state dict is
keyed by parameter names (flattened), so it is the same whatever the layout that saved it.
"""

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict, set_optimizer_state_dict
from torch.distributed.tensor import DTensor

from bessemer.config import TrainConfig
from bessemer.errors import BessemerError
from bessemer.train.offload import HostAdamW, split_offloaded

_FLAT = StateDictOptions(flatten_optimizer_state_dict=True)


def adamw_groups(params: list[nn.Parameter], cfg: TrainConfig) -> list[dict]:
    """Weight decay on matrices only: decaying norm gains towards 0 only hurts (nanoGPT, GPT-3)."""
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": cfg.weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def adamw_defaults(cfg: TrainConfig) -> dict:
    return {"lr": cfg.lr, "betas": (cfg.beta1, cfg.beta2), "eps": cfg.eps}


def device_adamw(params: list[nn.Parameter], cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW over `params`; fused (one kernel for the moments and updates of all parameters, instead of a
    few launches per parameter), as torchtitan trains, when its kernels can take them: floating point on CUDA or
    CPU, plain tensors or DTensors of one mesh. Fused AdamW also skips a step on the device when handed a
    `found_inf` flag (train/step.py), so a non-finite gradient never makes the host wait. Elsewhere torch's
    default implementation."""
    meshes = {p.device_mesh if isinstance(p, DTensor) else None for p in params}
    fused = bool(params) and len(meshes) == 1 and all(p.is_floating_point() and p.device.type in ("cuda", "cpu")
                                                      for p in params)
    return torch.optim.AdamW([g for g in adamw_groups(params, cfg) if g["params"]], **adamw_defaults(cfg),
                             fused=fused or None)


def build_adamw(model: nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    return device_adamw([p for p in model.parameters() if p.requires_grad], cfg)


class Optimizers:
    """AdamW for each model part, stepped together. With host offload (`offload_fraction` > 0) each part's
    first fraction of parameters steps in a HostAdamW instead (train/offload.py)."""

    def __init__(self, parts: list[nn.Module], cfg: TrainConfig, offload_fraction: float = 0.0):
        self.parts = parts
        self.device_optimizers: list[torch.optim.AdamW | None] = []
        self.host_optimizers: list[HostAdamW | None] = []
        for part in parts:
            named = [(n, p) for n, p in part.named_parameters() if p.requires_grad]
            host = split_offloaded(named, offload_fraction) if offload_fraction > 0 else set()
            on_device = [p for n, p in named if n not in host]
            self.device_optimizers.append(device_adamw(on_device, cfg) if on_device else None)
            offloaded = [(n, p) for n, p in named if n in host]
            # Host copies are plain CPU tensors: fused, as a CPU run's device optimizer is (the same numerics).
            self.host_optimizers.append(HostAdamW(offloaded, adamw_groups([p for _, p in offloaded], cfg),
                                                  **adamw_defaults(cfg), fused=True) if offloaded else None)

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


# The settings that shape the schedule, as LRMultiplier names them, and their config keys (train.*).
SCHEDULE_KEYS = {"steps": "steps", "warmup": "warmup", "schedule": "schedule", "lr": "lr",
                 "min_ratio": "min_lr_ratio"}


def schedule_settings(cfg: TrainConfig) -> dict:
    return {"steps": cfg.steps, "warmup": cfg.warmup, "schedule": cfg.schedule, "lr": cfg.lr,
            "min_ratio": cfg.min_lr_ratio}


def saved_settings(state: dict) -> dict:
    """The schedule settings a checkpoint was trained with, from LambdaLR's state dict: the multiplier's fields
    (LambdaLR saves a callable object's attributes) and the peak lr (`base_lrs`). A field the state lacks is
    left out (not compared)."""
    lambdas = state.get("lr_lambdas") or [None]
    out = {k: v for k, v in (lambdas[0] or {}).items() if k in SCHEDULE_KEYS}
    if state.get("base_lrs"):
        out["lr"] = state["base_lrs"][0]
    return out


def schedule_differences(saved: dict, current: dict) -> list[str]:
    """The settings (LRMultiplier names) whose change alters the learning rate. Under a constant schedule on
    both sides, train.steps and train.min_lr_ratio do not shape the curve: changing them is no difference."""
    constant = saved.get("schedule") == current["schedule"] == "constant"
    return [k for k in SCHEDULE_KEYS if k in saved and saved[k] != current[k]
            and not (constant and k in ("steps", "min_ratio"))]


def _values(settings: dict, keys: list[str]) -> str:
    return ", ".join(f"train.{SCHEDULE_KEYS[k]}={settings[k]}" for k in keys)


class LRSchedules:
    """One LambdaLR per optimizer, all on the same schedule; the state of one stands for all.

    A checkpoint's schedule state holds its settings. Restoring one whose settings differ from this config's
    stops with each difference named, unless `train.override_schedule`: then the schedule is this config's,
    continued at the saved step (the next step's lr is what the new schedule gives for it)."""

    def __init__(self, optimizers: Optimizers, cfg: TrainConfig):
        self.cfg = cfg
        multiplier = LRMultiplier(cfg.warmup, cfg.steps, cfg.schedule, cfg.min_lr_ratio)
        self.schedules = [torch.optim.lr_scheduler.LambdaLR(opt, multiplier) for opt in optimizers.optimizers]
        self.overridden: list[str] = []  # after a restore: "train.steps 100 -> 200", ... when the config won

    def step(self) -> None:
        for s in self.schedules:
            s.step()

    def state_dict(self) -> dict:
        return self.schedules[0].state_dict()

    def load_state_dict(self, state: dict) -> None:
        saved, current = saved_settings(state), schedule_settings(self.cfg)
        changed = schedule_differences(saved, current)
        step = state["last_epoch"]  # steps taken: the 0-based index of the next one
        if changed and not self.cfg.override_schedule:
            raise BessemerError(
                f"checkpoint step {step} was trained with {_values(saved, changed)}; this config says "
                f"{_values(current, changed)}: set train.override_schedule=true to continue on the new schedule "
                f"from step {step}, or restore the old values")
        if not self.cfg.override_schedule:
            for s in self.schedules:
                s.load_state_dict(state)
            return
        # The counters from the checkpoint; the peak lr and the multiplier (already this config's) from here.
        for s in self.schedules:
            groups = s.optimizer.param_groups
            s.load_state_dict({**state, "base_lrs": [self.cfg.lr] * len(groups), "lr_lambdas": [None] * len(groups)})
            for group, multiplier in zip(groups, s.lr_lambdas):
                group["initial_lr"] = self.cfg.lr
                group["lr"] = self.cfg.lr * multiplier(step)
            s._last_lr = [group["lr"] for group in groups]
        self.overridden = [f"train.{SCHEDULE_KEYS[k]} {saved[k]} -> {current[k]}" for k in changed]
