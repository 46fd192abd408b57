"""Optimizer-state offload: AdamW states (and an fp32 copy of their parameters) in host memory.

AdamW keeps two fp32 moments per parameter — 8 bytes, twice the fp32 weights: 560 GB for a 70B model. Two
ways to move them off the accelerator:
- full, with FSDP2: `CPUOffloadPolicy` keeps the sharded parameters, gradients and optimizer states on the
  host; FSDP copies each unit's shard to the device to gather it and the gradients back after reducing;
- partial (or full without sharding): like Megatron's hybrid optimizer, the first `fraction` of the
  parameters (by element count, in model order) step on the host. Each step copies their gradients to the
  host, runs AdamW there, and copies the new values back. The update is elementwise, so the numbers are
  those of the device optimizer.
"""

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import _init_optim_state
from torch.distributed.tensor import DTensor

from bessemer.config import OffloadConfig
from bessemer.dtensor import local


def host_offload_fraction(cfg: OffloadConfig, sharded: bool) -> float:
    """The share of parameters whose AdamW states step on the host (HostAdamW). Full offload of sharded
    parameters is FSDP2's CPUOffloadPolicy instead, so none here."""
    if cfg.mode == "partial":
        return cfg.fraction
    if cfg.mode == "full" and not sharded:
        return 1.0
    return 0.0


def split_offloaded(named: list[tuple[str, nn.Parameter]], fraction: float) -> set[str]:
    """Names of the parameters, in model order, that make up the first `fraction` of the elements."""
    total = sum(p.numel() for _, p in named)
    out, taken = set(), 0
    for name, p in named:
        if taken >= fraction * total:
            break
        out.add(name)
        taken += p.numel()
    return out


class HostAdamW:
    """AdamW over host copies of some parameters. Its state dict uses the keys of torch's flattened optimizer
    state dict (`state.<fqn>.exp_avg`, `param_groups.<fqn>.lr`), so checkpoints move freely between
    offload on and off."""

    def __init__(self, named: list[tuple[str, nn.Parameter]], groups: list[dict], **defaults):
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        pin = torch.cuda.is_available()
        self.host = [nn.Parameter(local(p).detach().to("cpu", copy=True)) for p in self.params]
        if pin:
            self.host = [nn.Parameter(h.pin_memory()) for h in self.host]
        index = {id(p): h for p, h in zip(self.params, self.host)}
        host_groups = [{**g, "params": [index[id(p)] for p in g["params"]]} for g in groups]
        self.optimizer = torch.optim.AdamW([g for g in host_groups if g["params"]], **defaults)

    @torch.no_grad()
    def step(self) -> None:
        for p, h in zip(self.params, self.host):
            h.grad = None if p.grad is None else local(p.grad).to("cpu", torch.float32, non_blocking=True)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.optimizer.step()
        for p, h in zip(self.params, self.host):
            local(p).copy_(h, non_blocking=True)

    def zero_grad(self) -> None:
        for h in self.host:
            h.grad = None

    def _saved(self, value, param: nn.Parameter):
        """A state tensor as the device optimizer would hold it (a DTensor shard for sharded parameters), so
        that distributed checkpoints can reshard it."""
        if isinstance(param, DTensor) and isinstance(value, torch.Tensor) and value.dim() > 0:
            return DTensor.from_local(value.to(param.device), param.device_mesh, param.placements,
                                      shape=param.shape, stride=param.stride())
        return value

    def state_dict(self) -> dict:
        if not self.optimizer.state:
            _init_optim_state(self.optimizer)  # so a checkpoint template holds every state tensor
        out = {}
        group_of = {id(h): g for g in self.optimizer.param_groups for h in g["params"]}
        for name, p, h in zip(self.names, self.params, self.host):
            for key, value in self.optimizer.state[h].items():
                out[f"state.{name}.{key}"] = self._saved(value, p)
            for key, value in group_of[id(h)].items():
                if key != "params":
                    out[f"param_groups.{name}.{key}"] = value
        return out

    @torch.no_grad()
    def refresh(self) -> None:
        """Copy the parameters' current values to the host copies (after weights were loaded)."""
        for p, h in zip(self.params, self.host):
            h.copy_(local(p))

    def load_state_dict(self, state: dict) -> None:
        """Restore the moments and refresh the host copies from the (already restored) parameters: the
        checkpointer restores the model before the optimizer."""
        self.refresh()
        group_of = {id(h): g for g in self.optimizer.param_groups for h in g["params"]}
        for name, h in zip(self.names, self.host):
            prefix = f"state.{name}."
            entries = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
            self.optimizer.state[h] = {k: local(v).to("cpu", copy=True) if isinstance(v, torch.Tensor) else v
                                       for k, v in entries.items()}
            group = group_of[id(h)]
            for key in group:
                saved = state.get(f"param_groups.{name}.{key}")
                if key != "params" and saved is not None:
                    group[key] = saved

    # The learning-rate schedulers drive `param_groups` of a torch optimizer; `state` is its moments.
    @property
    def param_groups(self) -> list[dict]:
        return self.optimizer.param_groups

    @property
    def state(self) -> dict:
        return self.optimizer.state
