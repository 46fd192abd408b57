"""Apply the precision configuration to a model part, in torchtitan's order around the parallelisms:
FP8 conversion -> tensor parallel (with torchao's Float8 styles for the converted layers) -> activation
checkpointing -> FSDP (whose per-unit policies cast the parameters) or, without FSDP, per-module autocast
settings."""

from torch import nn

from bessemer.config import PrecisionConfig
from bessemer.precision.checkpointing import apply_activation_checkpointing
from bessemer.precision.fp8 import convert_to_fp8
from bessemer.precision.policy import PrecisionPolicy


def prepare_model(model: nn.Module, policy: PrecisionPolicy, cfg: PrecisionConfig, tp: int = 1) -> dict:
    """FP8 conversion and activation checkpointing of a model without tensor parallelism (with it, TP goes
    between the two: parallel/apply.py). Returns what was applied: {"fp8": {module: recipe}, "checkpointed":
    [blocks]}."""
    assert tp == 1, f"tensor parallelism (tp={tp}) goes between FP8 conversion and checkpointing"
    fp8 = convert_to_fp8(model, policy, cfg.fp8)
    return {"fp8": fp8, "checkpointed": apply_activation_checkpointing(model, cfg.activation_checkpoint)}


def host_offload_fraction(cfg: PrecisionConfig, sharded: bool) -> float:
    """The share of parameters whose AdamW states step on the host (HostAdamW). Full offload of sharded
    parameters is FSDP2's CPUOffloadPolicy instead, so none here."""
    if cfg.offload.mode == "partial":
        return cfg.offload.fraction
    if cfg.offload.mode == "full" and not sharded:
        return 1.0
    return 0.0
