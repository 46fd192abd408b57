"""The one place for checks that involve more than one section of the job config (each section checks its own
fields in its `validate()`): run once when a config is loaded, and again with the data-parallel degree once the
world size is known. No torch."""

import math

from bessemer.config.mixture import max_deviation, parse_schedule
from bessemer.config.sections import DataConfig, JobConfig, TrainConfig
from bessemer.errors import ConfigError


def validate_job(cfg: JobConfig, dp: int | None = None) -> None:
    """Every section's own checks, then the cross-section ones; with `dp` (data-parallel ranks) also that the
    global batch splits over them."""
    for name in ("run", "model", "data", "train", "parallel", "precision", "checkpoint", "fault", "metrics",
                 "eval", "plan"):
        section = getattr(cfg, name)
        if hasattr(section, "validate"):
            section.validate()
    _check_mixture_batch(cfg.data, cfg.train.global_batch)
    _check_hang_timeout(cfg)
    if dp is not None:
        check_data_parallel(cfg.train, dp)


def check_data_parallel(train: TrainConfig, dp: int) -> None:
    """The global batch must split evenly into micro-batches over `dp` data-parallel ranks."""
    per_pass = train.micro_batch * dp
    if train.global_batch % per_pass:
        raise ConfigError(f"train.global_batch ({train.global_batch}) must be a multiple of train.micro_batch "
                          f"({train.micro_batch}) x data-parallel ranks ({dp}) = {per_pass}")


def _check_hang_timeout(cfg: JobConfig) -> None:
    """The watchdog must name a hung rank before the collectives that wait for it time out (the waiting ranks
    would fail first, with nothing saying which rank they waited for)."""
    hang, timeout = cfg.fault.hang_timeout_s, cfg.parallel.timeout_s
    if hang != "auto" and hang > 0 and hang >= timeout:
        raise ConfigError(f"fault.hang_timeout_s ({hang:g} s) must be below parallel.timeout_s ({timeout:g} s): the "
                          f"collectives waiting for a hung rank would time out before it is found; lower "
                          f"fault.hang_timeout_s or raise parallel.timeout_s")


def _check_mixture_batch(data: DataConfig, global_batch: int) -> None:
    """Whether a batch of `global_batch` sequences can hold every domain within data.tolerance of its weight:
    each domain gets the floor or the ceiling of global_batch x weight sequences (config/mixture.py)."""
    if not data.domains:
        return
    always = math.ceil(1 / data.tolerance - 1e-9)  # a batch this large meets the tolerance for any weights
    if data.reweight == "loss" and global_batch < always:
        raise ConfigError(f"data.tolerance {data.tolerance} with data.reweight = loss (weights that can take "
                          f"any value) needs train.global_batch >= 1 / tolerance = {always} sequences, got "
                          f"{global_batch}: raise train.global_batch or data.tolerance to {1 / global_batch:.4g}")
    sets = [("data.domains", data.domains)] + [(f"data.weight_schedule step {step}", w) for step, w in
                                               parse_schedule(data.weight_schedule, list(data.domains))]
    for where, weights in sets:
        worst, name = max_deviation(weights, global_batch)
        if worst > data.tolerance + 1e-9:
            needed = math.ceil(worst * 1e4 - 1e-6) / 1e4
            raise ConfigError(
                f"data.tolerance {data.tolerance} cannot be met with train.global_batch {global_batch}: a "
                f"domain's share moves in steps of 1/{global_batch}, and {where} gives {name} "
                f"{global_batch * weights[name] / sum(weights.values()):.3g} sequences of {global_batch}, {worst:.4g} "
                f"off its weight in some batches; raise data.tolerance to {needed:g} or "
                f"train.global_batch (any batch of {always} or more sequences meets it)")
