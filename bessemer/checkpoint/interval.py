"""How often to checkpoint — no torch (`plan` uses it too).

With a save costing δ seconds of training and failures arriving every M seconds on average (the MTBF of the
whole job), checkpointing every τ seconds of work wastes about δ/τ in saves and τ/2 of recomputation per
failure. Daly's higher-order optimum (J. T. Daly, "A higher order estimate of the optimum checkpoint interval
for restart dumps", FGCS 2006), which refines Young's τ = √(2δM) (1974):

    τ = √(2δM) · [1 + ⅓·√(δ/2M) + (δ/2M)/9] − δ      for δ < 2M,   else τ = M.
"""

import math
from dataclasses import dataclass


def young_daly(delta_s: float, mtbf_s: float) -> float:
    """Optimal seconds of work between checkpoints."""
    if delta_s <= 0:
        return 0.0
    if delta_s >= 2 * mtbf_s:
        return mtbf_s
    r = delta_s / (2 * mtbf_s)
    return math.sqrt(2 * delta_s * mtbf_s) * (1 + math.sqrt(r) / 3 + r / 9) - delta_s


def expected_waste(interval_s: float, delta_s: float, restart_s: float, mtbf_s: float) -> float:
    """Fraction of wall time lost to saves, restarts and recomputed work (first-order model: each failure
    costs a restart plus half an interval of recomputation, on average)."""
    if interval_s <= 0:
        return 1.0
    return delta_s / (interval_s + delta_s) + (restart_s + (interval_s + delta_s) / 2) / mtbf_s


@dataclass(frozen=True)
class IntervalAdvice:
    save_s: float
    step_s: float
    mtbf_s: float
    optimum_s: float
    optimum_steps: int
    rule_of_thumb_s: float  # MTBF / 10
    waste_at_optimum: float
    waste_at_rule_of_thumb: float

    def as_event(self) -> dict:
        return {k: round(v, 6) if isinstance(v, float) else v for k, v in self.__dict__.items()}

    def describe(self) -> str:
        return (f"checkpoint interval: save {self.save_s:.2f} s, MTBF {self.mtbf_s / 3600:.1f} h -> Young/Daly "
                f"{self.optimum_s:.0f} s = {self.optimum_steps} steps (waste {self.waste_at_optimum:.2%}); "
                f"MTBF/10 = {self.rule_of_thumb_s:.0f} s (waste {self.waste_at_rule_of_thumb:.2%})")


def advise(save_s: float, step_s: float, mtbf_s: float, restart_s: float = 0.0) -> IntervalAdvice:
    opt = young_daly(save_s, mtbf_s)
    rule = mtbf_s / 10
    return IntervalAdvice(save_s, step_s, mtbf_s, opt, max(1, round(opt / step_s)) if step_s > 0 else 1, rule,
                          expected_waste(opt, save_s, restart_s, mtbf_s),
                          expected_waste(rule, save_s, restart_s, mtbf_s))
