"""Dynamic loss scaling for fp16, and the finite-gradient check every precision uses.

fp16 keeps 5 exponent bits: gradients below ~6e-8 flush to zero, above 65504 become inf. Multiplying the loss
by a scale S lifts small gradients into range; the optimizer sees them divided by S again. S follows the
gradients (Micikevicius et al. 2018, "Mixed Precision Training"; Megatron-LM's DynamicGradScaler):
- an overflow anywhere — on any rank, any shard, any pipeline stage — skips the whole step everywhere: the
  trainer reads it from the global gradient norm, which is reduced over every shard and stage, so all ranks
  see the same non-finite value and no rank steps alone; after `hysteresis` overflows the scale
  backs off by `backoff_factor` (never below `min_scale`);
- after `growth_interval` clean steps it grows by `growth_factor` (never above `max_scale`).
"""

import torch

from bessemer.config import LossScalerConfig
from bessemer.parallel.reduce import local


@torch.no_grad()
def unscale_(params: list[torch.nn.Parameter], inv_scale: float) -> None:
    grads = [local(p.grad) for p in params if p.grad is not None]
    if grads:
        torch._foreach_mul_(grads, inv_scale)


class LossScaler:
    """Stateful dynamic loss scale. `scale` multiplies the loss before backward; `update(finite)` after it."""

    def __init__(self, cfg: LossScalerConfig, enabled: bool):
        self.cfg = cfg
        self.enabled = enabled
        self.scale = float(cfg.init_scale) if enabled else 1.0
        self.growth_tracker = 0  # clean steps since the last growth or overflow
        self.hysteresis_left = cfg.hysteresis
        self.overflows = 0  # total overflowing (skipped) steps
        self.backoffs = 0

    @property
    def at_floor(self) -> bool:
        return self.enabled and self.scale <= self.cfg.min_scale

    def update(self, finite: bool) -> None:
        if not self.enabled:
            return
        cfg = self.cfg
        if not finite:
            self.overflows += 1
            self.growth_tracker = 0
            self.hysteresis_left -= 1
            if self.hysteresis_left <= 0:
                self.scale = max(self.scale * cfg.backoff_factor, cfg.min_scale)
                self.backoffs += 1
            return
        self.growth_tracker += 1
        if self.growth_tracker >= cfg.growth_interval:
            self.growth_tracker = 0
            self.hysteresis_left = cfg.hysteresis
            self.scale = min(self.scale * cfg.growth_factor, cfg.max_scale)

    def state_dict(self) -> dict:
        return {"scale": self.scale, "growth_tracker": self.growth_tracker, "hysteresis_left": self.hysteresis_left,
                "overflows": self.overflows, "backoffs": self.backoffs}

    def load_state_dict(self, state: dict) -> None:
        self.scale = float(state["scale"])
        self.growth_tracker = int(state["growth_tracker"])
        self.hysteresis_left = int(state["hysteresis_left"])
        self.overflows = int(state["overflows"])
        self.backoffs = int(state["backoffs"])
