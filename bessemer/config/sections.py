"""The job config's sections: one plain dataclass per TOML table (`[run]`, `[model]`, `[data]`, `[train]`,
`[parallel]`, `[precision]`, `[checkpoint]`, `[fault]`, `[metrics]`, `[eval]`, `[plan]`). Every field carries its
documentation (`opt(default, doc)`), which `bessemer train --help` prints; a section's `validate()` checks its
own fields only — checks that involve two sections are in validate.py. Each component receives only its own
section.
No torch: `plan` and `doctor` read configs too.
"""

import math
from dataclasses import dataclass
from typing import Literal

from bessemer.config.engine import opt, section
from bessemer.config.mixture import parse_schedule
from bessemer.config.precision_rules import FP8_RECIPES, parse_rules
from bessemer.errors import ConfigError
from bessemer.model.registry import MODEL_SIZES


@dataclass
class RunConfig:
    dir: str = opt("runs/default", "Output directory: metrics.jsonl, config.toml, checkpoints/, tb/, report/.")
    seed: int = opt(0, "Seed for weight init and every RNG (Python, NumPy, torch).")
    name: str = opt("", "Name shown in the report; empty = the run directory's name.")


@dataclass
class ModelConfig:
    name: str = opt("debug", "Size from the registry: debug, tiny, llama3-1b, llama3-3b, llama3-8b, llama3-70b, "
                          "llama3-405b.")
    vocab_size: int = opt(0, "Vocabulary size; 0 = the data's vocabulary (index.json), else the registry's.")

    def validate(self) -> None:
        if self.name not in MODEL_SIZES:
            raise ConfigError(f"model.name: unknown size {self.name!r}; choose one of {', '.join(MODEL_SIZES)}")
        if self.vocab_size < 0:
            raise ConfigError(f"model.vocab_size must be >= 0 (0 = from the data), got {self.vocab_size}")


@dataclass
class DataConfig:
    path: str = opt("data/debug", "Directory of token shards (index.json + shard_*.bin), relative paths from the "
                    "current directory.")
    paths: list[str] = opt([], "More token shard directories whose documents join the mixture's per-domain pools "
                           "(same vocabulary and EOS as data.path); needs data.domains.")
    domains: dict[str, float] = opt({}, "Domain mixture: domain name -> weight (TOML table [data.domains], or "
                                    "--data.domains=web:0.45,code:0.3); weights >= 0, normalized to sum 1. Every "
                                    "global batch holds each domain's share of sequences within data.tolerance. "
                                    "Empty = no mixture: the shards are read in order as one stream.")
    weight_schedule: list[str] = opt([], "Mixture weights over time: entries \"STEP: name=w, name=w\" that replace "
                                     "the weights once STEP optimizer steps are done (the record of step STEP+1 is "
                                     "the first trained on them); domains an entry leaves out get weight 0.")
    reweight: Literal["none", "loss"] = opt("none", "Online reweighting. loss: after every step each domain's "
                                            "weight is multiplied by exp(reweight_eta x (its mean loss - the mean "
                                            "over domains)), floored at reweight_min and renormalized "
                                            "(exponentiated gradient, as in DoReMi).")
    reweight_eta: float = opt(0.01, "reweight = loss: step size, per nat of loss above the domains' mean, per step.")
    reweight_min: float = opt(0.01, "reweight = loss: the least weight a domain with a positive weight keeps.")
    tolerance: float = opt(0.02, "Most a domain's share of a global batch's tokens may differ from its weight "
                           "(0.02 = 2 percentage points); checked against train.global_batch at start.")

    def validate(self) -> None:
        if self.paths and not self.domains:
            raise ConfigError("data.paths joins shard directories into a domain mixture: set data.domains too")
        for name, weight in self.domains.items():
            if not (weight >= 0 and math.isfinite(weight)):
                raise ConfigError(f"data.domains.{name}: a weight must be a number >= 0, got {weight}")
        if self.domains and not sum(self.domains.values()) > 0:
            raise ConfigError(f"data.domains: the weights must not all be 0 ({_weights_text(self.domains)})")
        if not self.domains:
            for key, unset in (("weight_schedule", not self.weight_schedule), ("reweight", self.reweight == "none")):
                if not unset:
                    raise ConfigError(f"data.{key} changes a domain mixture: set data.domains too")
        parse_schedule(self.weight_schedule, list(self.domains))
        if not 0 < self.tolerance < 1:
            raise ConfigError(f"data.tolerance must be in (0, 1) (a share of the batch), got {self.tolerance}")
        if not (self.reweight_eta > 0 and math.isfinite(self.reweight_eta)):
            raise ConfigError(f"data.reweight_eta must be a positive number, got {self.reweight_eta}")
        active = sum(w > 0 for w in self.domains.values())
        if not 0 <= self.reweight_min * max(active, 1) <= 1:
            raise ConfigError(f"data.reweight_min ({self.reweight_min}) must be >= 0 and at most 1 / the number of "
                              f"domains with a positive weight ({active})")


def _weights_text(weights: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in weights.items())


@dataclass
class TrainConfig:
    steps: int = opt(100, "Optimizer steps to run (the total, also when resuming).")
    global_batch: int = opt(8, "Sequences per optimizer step over all data-parallel ranks; reached by gradient "
                            "accumulation when larger than micro_batch x data-parallel ranks.")
    micro_batch: int = opt(8, "Sequences per forward/backward pass on one rank.")
    seq_len: int = opt(128, "Tokens per sequence; the loader packs seq_len+1 tokens (inputs + shifted targets).")
    lr: float = opt(3e-4, "Peak learning rate.")
    min_lr_ratio: float = opt(0.1, "Final learning rate of cosine/linear decay as a fraction of train.lr.")
    warmup: int = opt(10, "Steps of linear warmup from 0 to train.lr.")
    schedule: Literal["cosine", "linear", "constant"] = opt("cosine", "Learning-rate shape after warmup.")
    weight_decay: float = opt(0.1, "AdamW decoupled weight decay (not applied to norms and biases).")
    beta1: float = opt(0.9, "AdamW beta1.")
    beta2: float = opt(0.95, "AdamW beta2.")
    eps: float = opt(1e-8, "AdamW epsilon.")
    grad_clip: float = opt(1.0, "Clip the global gradient L2 norm to this value; 0 = no clipping (still logged).")
    deterministic: bool = opt(False, "Seeded, deterministic kernels: two runs with one seed give identical losses.")
    override_schedule: bool = opt(False, "On resume, when steps, warmup, schedule, lr or min_lr_ratio differ from the "
                                  "checkpoint's: rebuild the learning-rate schedule from this config at the saved "
                                  "step (as Megatron's --override-opt_param-scheduler). false = stop and name each "
                                  "difference.")
    compile: bool | Literal["auto"] = opt(
        "auto", "torch.compile each transformer block and the loss (fused kernels, one graph per block shape); "
        "\"auto\" = on CUDA only, true = also on CPU (inductor needs a C++ compiler), false = eager.")
    gc_interval: int = opt(50, "Python's garbage collector is off while training and collects on every rank at the "
                           "same steps, every N steps: its pauses would otherwise hit ranks at random (stragglers).")

    def validate(self) -> None:
        if self.gc_interval < 1:
            raise ConfigError(f"train.gc_interval must be >= 1, got {self.gc_interval}")
        for key in ("steps", "global_batch", "micro_batch", "seq_len"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"train.{key} must be > 0, got {getattr(self, key)}")
        if self.global_batch % self.micro_batch:
            raise ConfigError(f"train.global_batch ({self.global_batch}) must be a multiple of train.micro_batch "
                              f"({self.micro_batch})")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ConfigError(f"train.lr must be a positive number, got {self.lr}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError(f"train.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if self.warmup < 0 or self.grad_clip < 0:
            raise ConfigError(f"train.warmup ({self.warmup}) and train.grad_clip ({self.grad_clip}) must be >= 0")


@dataclass
class ParallelConfig:
    dp_replicate: int = opt(1, "Data-parallel replica groups (each holds a full copy of what dp_shard shards); "
                            "with dp_shard > 1 this is HSDP.")
    dp_shard: int = opt(-1, "Data-parallel ranks that shard parameters, gradients and optimizer states (FSDP2 / "
                        "ZeRO-3); -1 = what the world size leaves after dp_replicate x tp x pp.")
    tp: int = opt(1, "Tensor-parallel degree: attention heads and FFN columns split across this many ranks.")
    pp: int = opt(1, "Pipeline-parallel degree: the layers split into this many stages.")
    pp_schedule: Literal["gpipe", "1f1b", "interleaved_1f1b", "zero_bubble"] = opt(
        "1f1b", "Pipeline schedule. interleaved_1f1b and zero_bubble run parallel.virtual_stages stages per rank.")
    virtual_stages: int = opt(0, "Pipeline stages per rank; 0 = 1 for gpipe/1f1b, 2 for interleaved_1f1b and "
                              "zero_bubble.")
    pp_layers: list[int] = opt([], "Layers per pipeline stage, first to last (uneven splits); empty = even split.")
    microbatches: int = opt(0, "Pipeline micro-batches per train.micro_batch (must divide it); 0 = the number of "
                            "pipeline stages.")
    sequence_parallel: bool = opt(False, "With tp > 1: shard norms and residual activations along the sequence.")
    loss_parallel: bool = opt(False, "With tp > 1: keep logits sharded over the vocabulary and compute the loss "
                              "without gathering them.")
    timeout_s: float = opt(600.0, "Timeout of every collective, on every process group, and of every operation on "
                           "the rendezvous store, in seconds: a rank that waits longer for its peers fails (and, "
                           "with --max-restarts, the job restarts) instead of hanging.")

    def validate(self) -> None:
        if not self.timeout_s > 0:
            raise ConfigError(f"parallel.timeout_s must be > 0 seconds, got {self.timeout_s}")
        for key in ("dp_replicate", "tp", "pp", "virtual_stages", "microbatches"):
            if getattr(self, key) < (0 if key in ("virtual_stages", "microbatches") else 1):
                raise ConfigError(f"parallel.{key} must be >= {0 if key in ('virtual_stages', 'microbatches') else 1}"
                                  f", got {getattr(self, key)}")
        if self.dp_shard == 0 or self.dp_shard < -1:
            raise ConfigError(f"parallel.dp_shard must be >= 1 or -1 (the rest of the world), got {self.dp_shard}")

    @property
    def world_size(self) -> int:
        """The ranks this layout asks for (dp_shard = -1 counts as 1)."""
        return self.dp_replicate * max(self.dp_shard, 1) * self.tp * self.pp

    @property
    def stages_per_rank(self) -> int:
        if self.virtual_stages:
            return self.virtual_stages
        return 2 if self.pp_schedule in ("interleaved_1f1b", "zero_bubble") else 1


@dataclass
class LossScalerConfig:
    init_scale: float = opt(2.0 ** 16, "Loss scale at the first step (fp16 only).")
    growth_factor: float = opt(2.0, "Multiply the scale by this after growth_interval steps without overflow.")
    backoff_factor: float = opt(0.5, "Multiply the scale by this when the gradients overflow (after hysteresis).")
    growth_interval: int = opt(1000, "Overflow-free steps before the scale grows.")
    hysteresis: int = opt(2, "Overflowing steps tolerated before the scale backs off (each one still skips its "
                          "update); 1 = back off at every overflow.")
    min_scale: float = opt(1.0, "Floor of the scale; a scale stuck here raises a loss_scale_floor alert.")
    max_scale: float = opt(2.0 ** 24, "Ceiling of the scale.")

    def validate(self) -> None:
        if not 0 < self.min_scale <= self.init_scale <= self.max_scale:
            raise ConfigError(f"precision.scaler needs 0 < min_scale ({self.min_scale}) <= init_scale "
                              f"({self.init_scale}) <= max_scale ({self.max_scale})")
        if self.growth_factor < 1 or not 0 < self.backoff_factor < 1:
            raise ConfigError(f"precision.scaler: growth_factor ({self.growth_factor}) must be >= 1 and "
                              f"backoff_factor ({self.backoff_factor}) in (0, 1)")
        if self.growth_interval < 1 or self.hysteresis < 1:
            raise ConfigError(f"precision.scaler: growth_interval ({self.growth_interval}) and hysteresis "
                              f"({self.hysteresis}) must be >= 1")


@dataclass
class Float8Config:
    enabled: bool = opt(False, "Train the Linear layers that the rules select in FP8 (torchao Float8Linear).")
    recipe: str = opt("tensorwise", "Default recipe: tensorwise (E4M3 inputs and weights, E5M2 gradients), "
                      "tensorwise_e4m3 (E4M3 throughout), rowwise (E4M3, one scale per row), rowwise_with_gw_hp "
                      "(rowwise, weight gradient in high precision). Rules may pick another per module.")
    emulate: bool = opt(False, "Run the FP8 numerics with high-precision matmuls (CPU, or GPUs without FP8).")
    force: bool = opt(False, "Allow FP8 on the token embedding and the output head (refused otherwise).")
    fsdp_all_gather: bool = opt(True, "Under FSDP2, all-gather the weights of tensorwise FP8 layers in FP8 (half "
                                "the bytes of bf16), with their scales precomputed once after each optimizer "
                                "step. Rowwise recipes all-gather in high precision.")
    divisible_by: int = opt(16, "Linear layers whose input or output features (per tensor-parallel shard) are not "
                            "multiples of this stay in high precision: FP8 GEMMs need multiples of 16. 1 keeps "
                            "every layer the rules select.")

    def validate(self) -> None:
        if self.recipe not in FP8_RECIPES:
            raise ConfigError(f"precision.fp8.recipe: unknown recipe {self.recipe!r}; choose one of "
                              f"{', '.join(FP8_RECIPES)}")
        if self.divisible_by < 1:
            raise ConfigError(f"precision.fp8.divisible_by must be >= 1 (16 for FP8 GEMMs), got {self.divisible_by}")


@dataclass
class OffloadConfig:
    mode: Literal["none", "full", "partial"] = opt(
        "none", "Optimizer-state offload to host memory. full: every AdamW state steps on the host (FSDP2 "
        "CPUOffloadPolicy when parameters are sharded); partial: offload.fraction of the parameters do.")
    fraction: float = opt(0.5, "partial: share of the parameters (by element count, in model order) whose AdamW "
                          "states live and step on the host.")

    def validate(self) -> None:
        if not 0 < self.fraction <= 1:
            raise ConfigError(f"precision.offload.fraction must be in (0, 1], got {self.fraction}")


@dataclass
class ActivationCheckpointConfig:
    mode: Literal["none", "full", "selective"] = opt(
        "none", "Recompute activations in backward instead of keeping them. full: every block; selective: every "
        "n-th block (activation_checkpoint.every), or op-level when save_ops is set.")
    every: int = opt(2, "selective: checkpoint every n-th block.")
    save_ops: list[str] = opt([], "selective, op-level: outputs of these ops are kept and the rest recomputed, in "
                              "every block. Names: mm, sdpa, silu (e.g. [\"mm\", \"sdpa\"]).")

    def validate(self) -> None:
        if self.every < 1:
            raise ConfigError(f"precision.activation_checkpoint.every must be >= 1, got {self.every}")
        bad = [op for op in self.save_ops if op not in SAVE_OPS]
        if bad:
            raise ConfigError(f"precision.activation_checkpoint.save_ops: unknown op(s) {', '.join(bad)}; choose "
                              f"from {', '.join(SAVE_OPS)}")


SAVE_OPS = ("mm", "sdpa", "silu")


@dataclass
class GuardConfig:
    enabled: bool = opt(True, "Raise alert events (metrics.jsonl, console) for numeric failures.")
    skipped_steps: int = opt(3, "Alert when this many consecutive steps are skipped (non-finite gradients).")
    trace_nonfinite: bool = opt(True, "After a non-finite value, hook every module's forward for one step and "
                                "name the first module whose output is not finite.")

    def validate(self) -> None:
        if self.skipped_steps < 1:
            raise ConfigError(f"precision.guards.skipped_steps must be >= 1, got {self.skipped_steps}")


DEFAULT_RULES = ["*norm: compute=fp32", "tok_embeddings: fp8=none", "output: fp8=none"]


@dataclass
class PrecisionConfig:
    dtype: Literal["fp32", "bf16", "fp16"] = opt(
        "fp32", "Compute dtype. bf16/fp16: forward and backward in 16 bits (FSDP2 parameter casts when parameters "
        "are sharded, autocast otherwise); parameters and optimizer states stay fp32. fp16 adds dynamic loss "
        "scaling.")
    reduce_dtype: Literal["fp32", "bf16", "fp16"] = opt("fp32", "Dtype of the data-parallel gradient "
                                                        "reduce-scatter / all-reduce.")
    rules: list[str] = opt(DEFAULT_RULES, "Per-module overrides, 'PATTERN: key=value, ...' with keys param, "
                           "compute, reduce (fp32|bf16|fp16) and fp8 (a recipe or none); PATTERN is an fnmatch glob "
                           "over module names (layers.3.attention.wq). Later rules override earlier ones key by "
                           "key. The default computes norms in fp32 (RMSNorm does it inside; under FSDP2 their "
                           "weights stay in their unit's dtype) and keeps the embedding and output head out of FP8.")
    scaler: LossScalerConfig = section(LossScalerConfig, "Dynamic loss scaling (fp16).")
    fp8: Float8Config = section(Float8Config, "FP8 training of Linear layers (torchao).")
    offload: OffloadConfig = section(OffloadConfig, "Optimizer-state offload to host memory.")
    activation_checkpoint: ActivationCheckpointConfig = section(ActivationCheckpointConfig,
                                                                "Activation recomputation.")
    guards: GuardConfig = section(GuardConfig, "Silent-failure and non-finite guards.")

    def validate(self) -> None:
        for sub in (self.scaler, self.fp8, self.offload, self.activation_checkpoint, self.guards):
            sub.validate()
        parse_rules(self.rules)
        if self.fp8.enabled and self.dtype == "fp16":
            raise ConfigError("precision.fp8 runs on a bf16 or fp32 base (precision.dtype), not fp16: FP8 keeps "
                              "its own per-tensor scales, and fp16 loss scaling on top of them is not supported")


def _check_tier(tier: str, interval: int, keep: int) -> None:
    if interval < 0 or keep < 0:
        raise ConfigError(f"checkpoint.{tier}.interval ({interval}) and .keep ({keep}) must be >= 0")


@dataclass
class MicroTierConfig:
    interval: int | Literal["auto"] = opt(0, "Steps between micro checkpoints (fast local disk); 0 = off; \"auto\" "
                                          "= the Young/Daly optimum from the measured save cost and the MTBF, "
                                          "re-estimated after every save.")
    dir: str = opt("", "Where micro checkpoints go; empty = <run.dir>/checkpoints/micro. May be node-local: "
                   "\"{node}\" is replaced by the node's rank (torchrun's GROUP_RANK), e.g. /local_nvme/run/{node}.")
    keep: int = opt(2, "How many micro checkpoints to keep; 0 = all.")

    def validate(self) -> None:
        _check_tier("micro", 0 if self.interval == "auto" else self.interval, self.keep)


@dataclass
class MacroTierConfig:
    interval: int = opt(0, "Steps between macro checkpoints (shared storage, with the resolved config and layout); "
                        "0 = off. Training's end and Ctrl-C/SIGTERM also save here.")
    dir: str = opt("", "Where macro checkpoints go (a path on shared storage); empty = <run.dir>/checkpoints/macro.")
    keep: int = opt(2, "How many macro checkpoints to keep; 0 = all.")

    def validate(self) -> None:
        _check_tier("macro", self.interval, self.keep)


@dataclass
class ColdTierConfig:
    interval_hours: float = opt(0.0, "Hours of wall time between cold backups of the newest macro checkpoint; "
                                "0 = off.")
    url: str = opt("", "Object-storage location, any fsspec URL (s3://bucket/prefix, or a local path).")
    endpoint_url: str = opt("", "S3-compatible endpoint (MinIO, Ceph, ...); empty = AWS. Credentials come from the "
                            "environment or the AWS config files, never from this file.")
    key_env: str = opt("BESSEMER_BACKUP_KEY", "Environment variable holding the AES-256 key (64 hex characters or "
                       "base64).")
    key_file: str = opt("", "File holding the key instead (mode 600); takes precedence over key_env.")
    keep: int = opt(3, "How many cold backups to keep; 0 = all.")

    def validate(self) -> None:
        if self.interval_hours < 0 or self.keep < 0:
            raise ConfigError(f"checkpoint.cold.interval_hours ({self.interval_hours}) and .keep ({self.keep}) must "
                              f"be >= 0")
        if self.interval_hours > 0 and not self.url:
            raise ConfigError("checkpoint.cold.interval_hours is set but checkpoint.cold.url is empty")


@dataclass
class CheckpointConfig:
    micro: MicroTierConfig = section(MicroTierConfig, "Frequent checkpoints to fast local disk.")
    macro: MacroTierConfig = section(MacroTierConfig, "Durable checkpoints to shared storage.")
    cold: ColdTierConfig = section(ColdTierConfig, "Compressed, encrypted backups to object storage.")
    at_end: bool = opt(True, "Save (macro tier) when training ends.")
    async_save: bool = opt(False, "Write the sharded model and optimizer in the background (at most one save in "
                           "flight). The copy to host memory (staging) runs beside the next step's forward and "
                           "backward; the next optimizer step waits for it to finish, so training stalls only for "
                           "what is left of the copy then.")
    checksum: Literal["xxh3", "sha256"] = opt("xxh3", "Per-file checksum in each checkpoint's manifest.")
    on_error: Literal["continue", "stop"] = opt("continue", "When a save fails (disk full, I/O error): remove the "
                                                "partial save, raise an alert, then continue training or stop.")
    mtbf_hours: float = opt(0.0, "Mean time between failures of the whole job, for the Young/Daly interval; 0 = "
                            "checkpoint.gpu_mtbf_hours / number of ranks.")
    gpu_mtbf_hours: float = opt(50_000.0, "MTBF of one GPU with its share of the node (Llama 3's 54-day run: 419 "
                                "interruptions on 16,384 GPUs, about 50,000 GPU-hours per failure).")
    initial_load_hf: str = opt("", "Start a new run from Hugging Face Llama weights in this directory "
                               "(config.json + safetensors); ignored when resuming.")

    def validate(self) -> None:
        for sub in (self.micro, self.macro, self.cold):
            sub.validate()
        if self.mtbf_hours < 0 or self.gpu_mtbf_hours <= 0:
            raise ConfigError(f"checkpoint.mtbf_hours ({self.mtbf_hours}) must be >= 0 and "
                              f"checkpoint.gpu_mtbf_hours ({self.gpu_mtbf_hours}) > 0")


@dataclass
class FaultConfig:
    hang_timeout_s: float | Literal["auto"] = opt(
        "auto", "Hang detection: a rank that makes no progress for this many seconds (no step, no completed "
        "collective, no file I/O of its training thread; or no heartbeat at all: a stopped process) is a hang: every "
        "rank dumps its stacks and last collectives to <run.dir>/logs/hang/, the hung rank is killed and the "
        "attempt ends (--max-restarts restarts it). \"auto\" = max(120 s, 10 x the measured step time), at most "
        "half of parallel.timeout_s; 0 = off. Watched from the first completed step on.")
    kill_rank: int = opt(-1, "Fault injection: this rank kills itself with SIGKILL (-1 = off). Only in the first "
                         "attempt, so an automatic restart (--max-restarts) recovers.")
    kill_at_step: int = opt(0, "The step after which kill_rank dies (during its save with kill_during_save).")
    kill_during_save: bool = opt(False, "Die halfway through the checkpoint save at kill_at_step instead.")
    hang_rank: int = opt(-1, "Fault injection: this rank stops making progress for good, its process alive (-1 = "
                         "off), after step hang_at_step, or inside that step's checkpoint save with "
                         "hang_during_save (a stuck write). Only in the first attempt.")
    hang_at_step: int = opt(0, "The step after which hang_rank hangs (during its save with hang_during_save).")
    hang_during_save: bool = opt(False, "Hang halfway through the checkpoint save at hang_at_step instead.")
    slow_rank: int = opt(-1, "Fault injection: this rank becomes a straggler, sleeping fault.slow_ms at the end of "
                         "every step (-1 = off). In every attempt, restarts included: a slow node stays slow.")
    slow_ms: float = opt(0.0, "Milliseconds slow_rank sleeps per step, after the step's last collective so that "
                         "the delay is its own and the other ranks wait for it at the end-of-step exchange.")

    def validate(self) -> None:
        if self.kill_rank >= 0 and self.kill_at_step <= 0:
            raise ConfigError(f"fault.kill_rank = {self.kill_rank} needs fault.kill_at_step > 0")
        if self.hang_rank >= 0 and self.hang_at_step <= 0:
            raise ConfigError(f"fault.hang_rank = {self.hang_rank} needs fault.hang_at_step > 0")
        if self.hang_timeout_s != "auto" and not (self.hang_timeout_s >= 0 and math.isfinite(self.hang_timeout_s)):
            raise ConfigError(f"fault.hang_timeout_s must be \"auto\", 0 (off) or a number of seconds > 0, got "
                              f"{self.hang_timeout_s}")
        if self.slow_rank < -1 or self.slow_ms < 0 or (self.slow_rank >= 0 and not self.slow_ms > 0):
            raise ConfigError(f"fault.slow_rank ({self.slow_rank}) must be a rank or -1 (off), and a slow rank needs "
                              f"fault.slow_ms > 0 (got {self.slow_ms})")


@dataclass
class MetricsConfig:
    log_interval: int = opt(10, "Steps between the host reading the training numbers (loss, gradient norm, "
                            "per-rank times: kept on the device in between), writing them (metrics.jsonl still gets "
                            "every step) and acting on a stop signal; a console line every N steps when not on a "
                            "terminal.")
    tensorboard: bool = opt(True, "Write the step scalars to <run.dir>/tb as TensorBoard events.")
    progress: bool = opt(True, "Show a progress bar (loss, tokens/s, ETA) when stderr is a terminal.")
    peak_tflops: float = opt(0.0, "Peak dense TFLOP/s of one device, the MFU denominator; 0 = auto (the catalog "
                             "value for a known GPU, a measured fp32 matmul rate on CPU).")
    runtime_checks: bool = opt(False, "Before the first step, run the doctor's runtime checks over the job's mesh "
                               "(bus bandwidth per dimension, RNG and initial-weight consistency, clock skew): "
                               "`runtime_check` events, and an alert for each that warns or fails.")
    prometheus_port: int = opt(0, "Serve Prometheus metrics (step, loss, tokens/s, MFU, per-rank step times, "
                               "telemetry, alert counts) from rank 0 at http://prometheus_addr:PORT/metrics; 0 = off.")
    prometheus_addr: str = opt("127.0.0.1", "Address the Prometheus endpoint binds; 0.0.0.0 exposes it to the "
                               "network.")
    telemetry_period_s: float = opt(5.0, "Seconds between hardware telemetry samples (NVML per GPU, psutil for the "
                                    "host), taken by local rank 0 of each node and written to metrics.jsonl as "
                                    "telemetry events; 0 = off.")
    straggler_margin: float = opt(1.2, "A rank is slow on a step when its step time exceeds this multiple of the "
                                  "median rank's; 0 = no straggler detection.")
    straggler_window: int = opt(20, "Steps over which a rank must be slow on straggler_fraction of them to raise a "
                                "straggler alert.")
    straggler_fraction: float = opt(0.75, "Share of straggler_window's steps on which a rank must be slow.")
    throttle_samples: int = opt(3, "Consecutive telemetry samples a busy GPU must run >10% below its maximum clock "
                                "with a thermal or power reason before a throttle alert.")
    throttle_peer_ratio: float = opt(0.9, "A busy GPU whose clock stays below this fraction of its peers' median for "
                                     "2 x throttle_samples samples raises a throttle alert too.")
    leak_window: int = opt(50, "Steps in the linear fit of each rank's memory (CUDA allocated, or the process's "
                           "resident set on CPU) that detects a leak; 0 = no leak detection.")
    leak_warmup: int = opt(20, "Steps after the start (or a restart) that the leak detector ignores.")
    leak_min_mib: float = opt(64.0, "Least growth over leak_window steps, in MiB, that counts as a leak (and at "
                              "least 1% of the memory in use).")
    starved_fraction: float = opt(0.3, "Raise a dataloader_starved alert when waiting for batches takes more than "
                                  "this share of the step time over starved_window steps; 0 = off.")
    starved_window: int = opt(20, "Steps over which the data-wait share is measured.")

    def validate(self) -> None:
        if self.log_interval <= 0:
            raise ConfigError(f"metrics.log_interval must be > 0, got {self.log_interval}")
        if self.peak_tflops < 0:
            raise ConfigError(f"metrics.peak_tflops must be >= 0 (0 = auto), got {self.peak_tflops}")
        if not 0 <= self.prometheus_port <= 65535:
            raise ConfigError(f"metrics.prometheus_port must be a TCP port, 1..65535, or 0 (off), got "
                              f"{self.prometheus_port}")
        if self.telemetry_period_s < 0:
            raise ConfigError(f"metrics.telemetry_period_s must be >= 0 (0 = off), got {self.telemetry_period_s}")
        if self.straggler_margin != 0 and self.straggler_margin <= 1:
            raise ConfigError(f"metrics.straggler_margin must be > 1 (a multiple of the median step time) or 0 "
                              f"(off), got {self.straggler_margin}")
        if not 0 < self.straggler_fraction <= 1:
            raise ConfigError(f"metrics.straggler_fraction must be in (0, 1], got {self.straggler_fraction}")
        if not 0 <= self.starved_fraction <= 1:
            raise ConfigError(f"metrics.starved_fraction must be in [0, 1] (0 = off), got {self.starved_fraction}")
        if not 0 < self.throttle_peer_ratio <= 1:
            raise ConfigError(f"metrics.throttle_peer_ratio must be in (0, 1], got {self.throttle_peer_ratio}")
        for key in ("straggler_window", "throttle_samples", "starved_window"):
            if getattr(self, key) < 1:
                raise ConfigError(f"metrics.{key} must be >= 1, got {getattr(self, key)}")
        if self.leak_window != 0 and self.leak_window < 3 or self.leak_warmup < 0 or self.leak_min_mib < 0:
            raise ConfigError(f"metrics.leak_window must be >= 3 or 0 (off) (got {self.leak_window}), leak_warmup "
                              f"({self.leak_warmup}) and leak_min_mib ({self.leak_min_mib}) >= 0")


@dataclass
class EvalConfig:
    interval: int = opt(0, "Steps between evaluations on the held-out shards (and eval.tasks), and one at the end "
                        "of training; 0 = none. Each writes a `validation` event to metrics.jsonl: val_loss and "
                        "val_perplexity per domain.")
    paths: list[str] = opt([], "Held-out token shard directories; empty = the heldout/ directory beside data.path "
                           "and each data.paths (what `bessemer tokenizer encode --heldout` writes).")
    max_tokens: int = opt(65536, "Tokens scored per domain: the first max_tokens of the domain's held-out stream "
                          "(every token once, with up to train.seq_len tokens of context), as `bessemer eval` "
                          "scores a perplexity task over shards with the same max_tokens and domain.")
    tasks: list[str] = opt([], "Benchmark task files (or directories of them; docs/eval.md) scored every "
                           "eval.interval steps: acc and acc_norm per task in the validation event.")

    def validate(self) -> None:
        if self.interval < 0:
            raise ConfigError(f"eval.interval must be >= 0 (0 = no evaluation), got {self.interval}")
        if self.max_tokens < 1:
            raise ConfigError(f"eval.max_tokens must be >= 1, got {self.max_tokens}")


@dataclass
class PlanConfig:
    """What `bessemer plan --emit-config` predicted for this run; informational, the run report compares it with
    what the run measures. Empty (zeros) when the config was not written by the planner."""

    gpu: str = opt("", "Catalog name of the GPU the prediction is for (h100-sxm, ...); empty = no prediction.")
    gpus: int = opt(0, "GPUs the prediction is for (the planned world size).")
    layout: str = opt("", "The planned layout in words (tp, pp, dp, micro-batch, recompute).")
    step_time_s: float = opt(0.0, "Predicted seconds per optimizer step.")
    tokens_per_s: float = opt(0.0, "Predicted tokens per second over the whole job.")
    mfu: float = opt(0.0, "Predicted model FLOPs utilization, a fraction of the GPU's peak (0.45 = 45%).")
    memory_gib_per_rank: float = opt(0.0, "Predicted device memory of the largest rank, GiB.")

    def validate(self) -> None:
        for key in ("gpus", "step_time_s", "tokens_per_s", "memory_gib_per_rank"):
            if getattr(self, key) < 0:
                raise ConfigError(f"plan.{key} must be >= 0 (0 = not predicted), got {getattr(self, key)}")
        if not 0 <= self.mfu <= 1:
            raise ConfigError(f"plan.mfu must be a fraction in [0, 1], got {self.mfu}")


@dataclass
class JobConfig:
    run: RunConfig = section(RunConfig, "Where outputs go and the seed.")
    model: ModelConfig = section(ModelConfig, "Which model to build.")
    data: DataConfig = section(DataConfig, "Where the token shards are, and the domain mixture.")
    train: TrainConfig = section(TrainConfig, "Steps, batch, sequence length, optimizer and schedule.")
    parallel: ParallelConfig = section(ParallelConfig, "How the model and batch are split over ranks (3D).")
    precision: PrecisionConfig = section(PrecisionConfig, "Numeric formats.")
    checkpoint: CheckpointConfig = section(CheckpointConfig, "When and where state is saved: micro, macro and "
                                           "cold tiers.")
    fault: FaultConfig = section(FaultConfig, "Hang detection, and fault injection for tests and the demo.")
    metrics: MetricsConfig = section(MetricsConfig, "What is logged where.")
    eval: EvalConfig = section(EvalConfig, "Validation on held-out shards and benchmark tasks during training.")
    plan: PlanConfig = section(PlanConfig, "The planner's prediction for this run (written by bessemer plan).")
