"""Apply the precision configuration to a model part, in torchtitan's order around the parallelisms:
tensor parallel -> FP8 conversion -> activation checkpointing -> FSDP (whose per-unit policies cast the
parameters) or, without FSDP, per-module autocast settings."""

from torch import nn

from bessemer.config import PrecisionConfig
from bessemer.precision.checkpointing import apply_activation_checkpointing
from bessemer.precision.fp8 import convert_to_fp8
from bessemer.precision.policy import PrecisionPolicy


def prepare_model(model: nn.Module, policy: PrecisionPolicy, cfg: PrecisionConfig, tp: int) -> dict:
    """FP8 conversion and activation checkpointing (after tensor parallelism, before FSDP). Returns what
    was applied: {"fp8": {module: recipe}, "checkpointed": [blocks]}."""
    # FP8 with tp > 1 is refused when the config is validated (JobConfig.validate).
    fp8 = convert_to_fp8(model, policy, cfg.fp8) if tp == 1 else {}
    return {"fp8": fp8, "checkpointed": apply_activation_checkpointing(model, cfg.activation_checkpoint)}


def host_offload_fraction(cfg: PrecisionConfig, sharded: bool) -> float:
    """The share of parameters whose AdamW states step on the host (HostAdamW). Full offload of sharded
    parameters is FSDP2's CPUOffloadPolicy instead, so none here."""
    if cfg.offload.mode == "partial":
        return cfg.offload.fraction
    if cfg.offload.mode == "full" and not sharded:
        return 1.0
    return 0.0
