"""FP8 training with real FP8 kernels under FSDP2 (torchao Float8Linear, tensorwise): the GEMMs run through
torch._scaled_mm, the weights are all-gathered in FP8 with scales precomputed after each optimizer step, and
the debug model trains to within a few percent of its bf16 losses. Needs FP8 tensor cores (compute capability
8.9: L40S, H100, H200 and later) and torchao."""

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from bessemer.precision.fp8 import MIN_CAPABILITY

STEPS = 8


def fp8_capable() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= MIN_CAPABILITY


pytestmark = pytest.mark.skipif(
    not fp8_capable(),
    reason=f"FP8 tensor cores need compute capability >= {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]}"
           + (f"; {torch.cuda.get_device_name()} has {torch.cuda.get_device_capability()}"
              if torch.cuda.is_available() else ""))


def test_fp8_under_fsdp2_runs_scaled_mm_gathers_in_fp8_and_tracks_bf16(build_sharded, train_steps):
    pytest.importorskip("torchao.float8", reason="torchao is not installed (carry its wheel: docs/performance.md)")
    from torchao.float8.float8_linear import Float8Linear
    from torchao.float8.fsdp_utils import WeightWithDynamicFloat8CastTensor

    cfg, model, optimizers = build_sharded("--precision.fp8.enabled=true")
    layers = [m for m in model.modules() if isinstance(m, Float8Linear)]
    assert layers and not any(m.config.emulate for m in layers)
    assert all(isinstance(m.weight.to_local(), WeightWithDynamicFloat8CastTensor) for m in layers)

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        train_steps(cfg, model, optimizers, 1, seed=3)
    assert any(e.name == "aten::_scaled_mm" for e in prof.events()), "no FP8 GEMM ran"

    fp8 = train_steps(cfg, model, optimizers, STEPS)
    bf16_cfg, bf16_model, bf16_optimizers = build_sharded()
    train_steps(bf16_cfg, bf16_model, bf16_optimizers, 1, seed=3)
    bf16 = train_steps(bf16_cfg, bf16_model, bf16_optimizers, STEPS)
    assert all(torch.isfinite(torch.tensor(fp8))) and fp8[-1] < fp8[0]
    worst = max(abs(a - b) / b for a, b in zip(fp8, bf16))
    assert worst < 0.05, f"FP8 losses {fp8} vs bf16 {bf16}: {worst:.3f} relative"
