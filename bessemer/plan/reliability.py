"""Reliability: cluster MTBF, expected failures over the run, the checkpoint interval (the checkpointer's
own Young/Daly function, checkpoint/interval.py) and the goodput that follows. No torch.

Failures of independent components add up: a job on N GPUs with per-GPU MTBF M fails every M/N on average
(exponential model). Llama 3's 405B run saw 419 unexpected interruptions in 54 days on 16,384 GPUs
(Grattafiori et al. 2024, §3.3.4), about 50,000 GPU-hours per failure, the default here as in the
checkpoint config.
"""

from dataclasses import asdict, dataclass

from bessemer.checkpoint.interval import expected_waste, young_daly


@dataclass(frozen=True)
class ReliabilityPlan:
    gpu_mtbf_hours: float
    cluster_mtbf_hours: float
    run_hours: float  # wall time including the waste
    expected_failures: float
    save_s: float
    restart_s: float
    interval_s: float  # Young/Daly
    interval_steps: int
    goodput: float  # useful fraction of wall time

    def as_dict(self) -> dict:
        return asdict(self)


def reliability_plan(gpus: int, gpu_mtbf_hours: float, compute_hours: float, save_s: float, restart_s: float,
                     step_s: float) -> ReliabilityPlan:
    mtbf_s = gpu_mtbf_hours * 3600 / gpus
    interval = young_daly(save_s, mtbf_s)
    waste = min(0.99, expected_waste(interval, save_s, restart_s, mtbf_s))
    wall_h = compute_hours / (1 - waste)
    return ReliabilityPlan(gpu_mtbf_hours, mtbf_s / 3600, wall_h, wall_h * 3600 / mtbf_s, save_s, restart_s,
                           interval, max(1, round(interval / step_s)), 1 - waste)
