"""Dynamic loss scaling for fp16, and the finite-gradient check every precision uses.

fp16 keeps 5 exponent bits: gradients below ~6e-8 flush to zero, above 65504 become inf. Multiplying the loss
by a scale S lifts small gradients into range; the optimizer sees them divided by S again. S follows the
gradients (Micikevicius et al. 2018, "Mixed Precision Training"; Megatron-LM's DynamicGradScaler):
- an overflow anywhere — on any rank, any shard, any pipeline stage — skips the whole step everywhere: the
  trainer reads it from the global gradient norm, which is reduced over every shard and stage, so all ranks
  see the same non-finite value and no rank steps alone; after `hysteresis` overflows the scale
  backs off by `backoff_factor` (never below `min_scale`);
- after `growth_interval` clean steps it grows by `growth_factor` (never above `max_scale`).

The scale and its counters live on the training device and `update` takes the step's finite flag as a device
tensor, so a step never waits for the host to learn whether it overflowed (train/step.py); reading `scale`'s
value, the counters or `state_dict` does wait.
"""

import torch

from bessemer.config import LossScalerConfig
from bessemer.dtensor import local

# Positions in the counter tensor.
_GROWTH, _HYSTERESIS, _OVERFLOWS, _BACKOFFS = range(4)


@torch.no_grad()
def unscale_(params: list[torch.nn.Parameter], inv_scale: float | torch.Tensor) -> None:
    grads = [local(p.grad) for p in params if p.grad is not None]
    if grads:
        torch._foreach_mul_(grads, inv_scale)


class LossScaler:
    """Stateful dynamic loss scale. `scale` multiplies the loss before backward (a device tensor when enabled,
    1.0 otherwise); `update(finite)` after it."""

    def __init__(self, cfg: LossScalerConfig, enabled: bool, device: torch.device | str = "cpu"):
        self.cfg = cfg
        self.enabled = enabled
        self._scale = torch.tensor(float(cfg.init_scale), dtype=torch.float32, device=device)
        # growth tracker (clean steps since the last growth or overflow), hysteresis left, overflows, backoffs
        self._counts = torch.tensor([0, cfg.hysteresis, 0, 0], dtype=torch.int64, device=device)

    @property
    def scale(self) -> torch.Tensor | float:
        return self._scale if self.enabled else 1.0

    @property
    def growth_tracker(self) -> int:
        return int(self._counts[_GROWTH])

    @property
    def hysteresis_left(self) -> int:
        return int(self._counts[_HYSTERESIS])

    @property
    def overflows(self) -> int:
        """Total overflowing (skipped) steps."""
        return int(self._counts[_OVERFLOWS])

    @property
    def backoffs(self) -> int:
        return int(self._counts[_BACKOFFS])

    @property
    def at_floor(self) -> bool:
        return self.enabled and float(self._scale) <= self.cfg.min_scale

    def snapshot(self) -> torch.Tensor:
        """(scale, overflows) as a float64 device tensor, for the step's metrics: no host read."""
        return torch.stack([self._scale.double(), self._counts[_OVERFLOWS].double()])

    @torch.no_grad()
    def update(self, finite: bool | torch.Tensor) -> None:
        """The same rules as a host-side if/else, written as selects on device tensors."""
        if not self.enabled:
            return
        cfg, counts = self.cfg, self._counts
        finite = torch.as_tensor(finite, device=counts.device)
        overflow = ~finite
        growth, hysteresis = counts[_GROWTH], counts[_HYSTERESIS] - overflow.long()
        backoff = overflow & (hysteresis <= 0)
        growth = torch.where(finite, growth + 1, 0)
        grow = finite & (growth >= cfg.growth_interval)
        scale = torch.where(backoff, (self._scale * cfg.backoff_factor).clamp(min=cfg.min_scale), self._scale)
        scale = torch.where(grow, (scale * cfg.growth_factor).clamp(max=cfg.max_scale), scale)
        self._scale.copy_(scale)
        counts.copy_(torch.stack([torch.where(grow, 0, growth), torch.where(grow, cfg.hysteresis, hysteresis),
                                  counts[_OVERFLOWS] + overflow.long(), counts[_BACKOFFS] + backoff.long()]))

    def state_dict(self) -> dict:
        growth, hysteresis, overflows, backoffs = self._counts.tolist()
        return {"scale": float(self._scale) if self.enabled else 1.0, "growth_tracker": growth,
                "hysteresis_left": hysteresis, "overflows": overflows, "backoffs": backoffs}

    def load_state_dict(self, state: dict) -> None:
        self._scale.fill_(float(state["scale"]))
        self._counts.copy_(torch.tensor([int(state[k]) for k in ("growth_tracker", "hysteresis_left", "overflows",
                                                                  "backoffs")], dtype=torch.int64))
