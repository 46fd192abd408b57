"""FP8 training of Linear layers with torchao's Float8Linear, one recipe per module from the policy.

Recipes (the format of each cast, and the granularity of its scale):
- tensorwise: E4M3 inputs and weights (more mantissa, for values), E5M2 output gradients (more range, for
  gradients); one dynamic scale per tensor — torchao's default, the fastest on H100/H200;
- tensorwise_e4m3: E4M3 throughout, one scale per tensor;
- rowwise: E4M3 throughout with one scale per row (axiswise) — robust to outlier rows, slower;
- rowwise_with_gw_hp: rowwise, but the weight gradient computed in high precision.
`emulate` runs the same casts with high-precision matmuls, so FP8 numerics can be tested on CPU.

Under FSDP2, tensorwise layers all-gather their weights in FP8 (`precision.fp8.fsdp_all_gather`): each rank
casts its shard with one scale for the whole weight, so the all-gather moves half the bytes of bf16. The
scales are computed for all layers at once after each optimizer step (`precompute_fp8_scales`, one
all-reduce) rather than per layer inside every forward. Under tensor parallelism the layers use torchao's
Float8 parallel styles (parallel/tensor.py), so the conversion runs before TP.

The token embedding and the output head are refused unless `precision.fp8.force`: an embedding is a lookup,
not a GEMM, and FP8 buys it nothing but error — with one tensorwise scale for the whole table, rows far below
the largest flush to zero and their lookups come back all zeros; the output head feeds the softmax over the
vocabulary, whose logits need more precision than E4M3's 3 mantissa bits.
"""

import dataclasses
import logging
import sys

import torch
from torch import nn

from bessemer.config import Float8Config
from bessemer.errors import ConfigError
from bessemer.precision.policy import PrecisionPolicy

PROTECTED = ("tok_embeddings", "output")
TENSORWISE = ("tensorwise", "tensorwise_e4m3")
MIN_CAPABILITY = (8, 9)  # FP8 tensor cores: Ada (sm_89), Hopper (sm_90) and later


def float8_config(recipe: str, emulate: bool, fsdp_all_gather: bool = False):
    """torchao's config for `recipe`; `fsdp_all_gather` (tensorwise recipes only: one scale per weight lets
    each rank cast its own shard) all-gathers the weights in FP8 under FSDP2."""
    # torchao logs at import that its CUDA-only kernels failed to load; irrelevant to us.
    logging.getLogger("torchao").setLevel(logging.ERROR)
    logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)
    try:
        from torchao.float8 import Float8LinearConfig
        from torchao.float8.config import CastConfig, ScalingGranularity
    except ImportError:
        raise ImportError("FP8 training needs torchao: pip install 'bessemer[fp8]' (or pip install torchao, the "
                          "release built for your torch)") from None

    if recipe == "tensorwise_e4m3":
        e4m3 = CastConfig(scaling_granularity=ScalingGranularity.TENSORWISE, target_dtype=torch.float8_e4m3fn)
        config = Float8LinearConfig(cast_config_grad_output=e4m3)
    elif recipe == "tensorwise":
        config = Float8LinearConfig()
    else:
        config = Float8LinearConfig.from_recipe_name(recipe)
    return dataclasses.replace(config, emulate=emulate,
                               enable_fsdp_float8_all_gather=fsdp_all_gather and recipe in TENSORWISE)


def check_fp8_hardware(emulate: bool) -> None:
    """FP8 GEMMs need FP8 tensor cores (compute capability 8.9 or later); refuse early with what was found,
    rather than failing in the first matmul. `emulate` needs nothing."""
    if emulate:
        return
    if not torch.cuda.is_available():
        raise ConfigError("precision.fp8 needs a GPU with FP8 tensor cores (compute capability >= 8.9: L40S, H100 "
                          "and later); on CPU set precision.fp8.emulate = true to run the FP8 numerics with "
                          "high-precision matmuls")
    capability = torch.cuda.get_device_capability()
    if capability < MIN_CAPABILITY:
        raise ConfigError(f"precision.fp8 needs compute capability >= 8.9 (L40S, H100 and later); "
                          f"{torch.cuda.get_device_name()} has {capability[0]}.{capability[1]}: set "
                          "precision.fp8.enabled = false, or precision.fp8.emulate = true to run the FP8 numerics "
                          "with high-precision matmuls (no speed-up)")


def gemm_ready(module: nn.Linear, divisible_by: int, tp: int) -> bool:
    """Whether both dimensions of the layer's GEMM, per tensor-parallel shard, are multiples of `divisible_by`:
    either dimension may be the split one, so both must be multiples of divisible_by x tp."""
    return all(n % (divisible_by * tp) == 0 for n in (module.in_features, module.out_features))


def fp8_targets(model: nn.Module, policy: PrecisionPolicy, cfg: Float8Config, tp: int = 1) -> dict[str, str]:
    """{module name: recipe} for every module the policy puts in FP8, less the Linear layers whose dimensions
    do not fit an FP8 GEMM (`cfg.divisible_by`); refuses the embedding and the head."""
    targets = {}
    for name, module in model.named_modules():
        recipe = policy.of(name).fp8 if name else None
        if recipe is None:
            continue
        if name in PROTECTED and not cfg.force:
            what = "token embedding" if name == "tok_embeddings" else "output head"
            raise ConfigError(
                f"precision.fp8 with precision.rules puts the {what} ({name!r}) in FP8 ({recipe}); refused: "
                + ("an embedding is a lookup, not a GEMM, and one FP8 scale for the whole table flushes small rows "
                   "to zero (all-zero lookups)" if name == "tok_embeddings" else
                   "the logits feed a softmax over the whole vocabulary and need more than E4M3's 3 mantissa bits")
                + f"; keep it out with the rule '{name}: fp8=none', or set precision.fp8.force = true to insist")
        if isinstance(module, nn.Linear):
            if gemm_ready(module, cfg.divisible_by, tp):
                targets[name] = recipe
        elif isinstance(module, nn.Embedding):
            targets[name] = recipe
    return targets


def convert_to_fp8(model: nn.Module, policy: PrecisionPolicy, cfg: Float8Config, tp: int = 1,
                   sharded: bool = False) -> dict[str, str]:
    """Swap the selected nn.Linear for Float8Linear (and, with force, quantize the embedding table's lookups).
    Works on the meta device, before tensor parallelism (`tp`: its degree) and FSDP (`sharded`: whether FSDP2
    will shard the parameters). Returns {module name: recipe}."""
    targets = fp8_targets(model, policy, cfg, tp)
    if not targets:
        return targets
    check_fp8_hardware(cfg.emulate)
    configs = {r: float8_config(r, cfg.emulate, sharded and cfg.fsdp_all_gather) for r in set(targets.values())}
    from torchao.float8.float8_linear import Float8Linear

    for name, recipe in targets.items():
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        module = getattr(parent, child)
        if isinstance(module, nn.Embedding):
            module.forward = _Fp8Lookup(module)
        else:
            setattr(parent, child, Float8Linear.from_float(module, config=configs[recipe]))
    return targets


def precompute_fp8_scales(model_parts: list[nn.Module]) -> None:
    """Call after each optimizer step. Computes the FP8 scales of every FSDP-sharded tensorwise weight at once
    (one all-reduce of their maxima per part), which the next forward's FP8 all-gathers use; without it each
    unit reduces its weights' maxima itself before its all-gather. Nothing to do when no layer is FP8 (torchao
    then was never imported)."""
    if "torchao.float8" not in sys.modules:
        return
    from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

    for part in model_parts:
        precompute_float8_dynamic_scale_for_fsdp(part)


class _Fp8Lookup:
    """Embedding lookups from an E4M3 copy of the table with one scale (what FP8 storage of the table would
    give), with straight-through gradients. Only under `force`; it shows why the default refuses it."""

    def __init__(self, module: nn.Embedding):
        self.module = module

    def __call__(self, tokens: torch.Tensor) -> torch.Tensor:
        w = self.module.weight
        scale = torch.finfo(torch.float8_e4m3fn).max / w.detach().abs().amax().clamp(min=1e-12)
        q = (w * scale).to(torch.float8_e4m3fn).to(w.dtype) / scale
        w_q = w + (q - w).detach()  # forward uses q, backward flows to w unchanged
        return nn.functional.embedding(tokens, w_q)
