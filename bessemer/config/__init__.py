"""Job configuration: the sections (sections.py, plain dataclasses), the engine that loads them from TOML and
`--section.key=value` overrides (engine.py), and the cross-section checks (validate.py). No torch.

    cfg = load_config("configs/debug.toml", ["--train.steps=50"])   # defaults <- file <- overrides, validated
"""

import typing
from pathlib import Path

from bessemer.config import engine
from bessemer.config.engine import all_keys, parse_override, read_toml, split_overrides, to_toml
from bessemer.config.sections import (DEFAULT_RULES, SAVE_OPS, ActivationCheckpointConfig, CheckpointConfig,
                                      ColdTierConfig, DataConfig, EvalConfig, FaultConfig, Float8Config, GuardConfig, JobConfig,
                                      LossScalerConfig, MacroTierConfig, MetricsConfig, MicroTierConfig,
                                      ModelConfig, OffloadConfig, ParallelConfig, PlanConfig, PrecisionConfig,
                                      RunConfig, TrainConfig)
from bessemer.config.validate import check_data_parallel, validate_job

__all__ = ["DEFAULT_RULES", "SAVE_OPS", "ActivationCheckpointConfig", "CheckpointConfig", "ColdTierConfig",
           "DataConfig", "EvalConfig", "FaultConfig", "Float8Config", "GuardConfig", "JobConfig", "LossScalerConfig",
           "MacroTierConfig", "MetricsConfig", "MicroTierConfig", "ModelConfig", "OffloadConfig", "ParallelConfig",
           "PlanConfig", "PrecisionConfig", "RunConfig", "TrainConfig", "all_keys", "check_data_parallel", "describe",
           "load_config", "parse_override", "read_toml", "split_overrides", "to_toml", "validate_job"]


def load_config(path: str | Path | None, overrides: typing.Sequence[str] = ()) -> JobConfig:
    """Defaults, then the TOML file, then `--section.key=value` overrides, then validation."""
    cfg = engine.load(JobConfig, path, overrides)
    validate_job(cfg)
    return cfg


def describe() -> str:
    """Every section and key with type, default and doc — the body of `bessemer train --help`."""
    return engine.describe(JobConfig)
