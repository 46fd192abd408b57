import dataclasses

import pytest
import torch

from bessemer.config import PrecisionConfig
from bessemer.model.llama import build_model
from bessemer.model.registry import get_model_args
from bessemer.precision.policy import Fp16MatmulEmulation, PrecisionPolicy, compute_context


def test_fp16_emulation_rounds_like_an_fp16_gemm():
    torch.manual_seed(0)
    a, b = torch.randn(64, 96).half(), torch.randn(96, 32).half()
    with Fp16MatmulEmulation():
        got = a @ b
    assert got.dtype == torch.float16
    torch.testing.assert_close(got, (a.float() @ b.float()).half(), rtol=0, atol=0)
    # Beyond 65504 the product overflows to inf, as on a GPU.
    with Fp16MatmulEmulation():
        big = torch.full((2, 2), 300.0).half() @ torch.full((2, 2), 300.0).half()
    assert torch.isinf(big).all()


def test_norms_compute_in_fp32_under_bf16_autocast():
    model = build_model(get_model_args("debug"), 32)
    policy = PrecisionPolicy(PrecisionConfig(dtype="bf16"))
    islands = policy.apply_autocast_islands(model)
    assert "layers.0.attention_norm" in islands and "norm" in islands and "layers.0.attention" not in islands
    seen = {}

    def record(key):
        def hook(module, args, out):
            seen.setdefault(key, (args[0].dtype, out.dtype))
        return hook

    model.layers["0"].attention_norm.register_forward_hook(record("norm"))
    model.layers["0"].attention.wq.register_forward_hook(record("wq"))
    with compute_context(policy, torch.device("cpu"), autocast=True):
        model(torch.randint(0, 1024, (2, 16)))
    assert seen["norm"] == (torch.float32, torch.float32)  # inputs upcast, statistics and output in fp32
    assert seen["wq"][1] == torch.bfloat16


def test_default_norm_rule_makes_no_fsdp_islands():
    """The default asks only fp32 compute of norms (RMSNorm does it): no extra FSDP units."""
    model = build_model(get_model_args("debug"), 32, "meta")
    policy = PrecisionPolicy(PrecisionConfig(dtype="bf16"))
    assert policy.of("layers.0.attention_norm").compute == "fp32"
    assert policy.fsdp_islands(model.layers["0"], "layers.0") == []
    assert policy.fsdp_islands(model, "", skip="layers") == []


def test_an_explicit_param_rule_makes_fsdp_islands():
    model = build_model(get_model_args("debug"), 32, "meta")
    policy = PrecisionPolicy(PrecisionConfig(dtype="bf16", rules=["*norm: param=fp32, compute=fp32"]))
    block = policy.fsdp_islands(model.layers["0"], "layers.0")
    assert [m for m, _ in block] == [model.layers["0"].attention_norm, model.layers["0"].ffn_norm]
    mp = block[0][1]
    assert (mp.param_dtype, mp.reduce_dtype, mp.output_dtype) == (torch.float32, torch.float32, torch.bfloat16)
    root = policy.fsdp_islands(model, "", skip="layers")
    assert [m for m, _ in root] == [model.norm]
    assert policy.mp_policy("layers.0").param_dtype == torch.bfloat16
    fp32 = PrecisionPolicy(PrecisionConfig(dtype="fp32", rules=["*norm: param=fp32, compute=fp32"]))
    assert fp32.fsdp_islands(model.layers["0"], "layers.0") == []


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_mixed_precision_forward_is_close_to_fp32(dtype):
    torch.manual_seed(0)
    model = build_model(get_model_args("debug"), 32)
    tokens = torch.randint(0, 1024, (2, 32))
    ref = model(tokens)
    policy = PrecisionPolicy(PrecisionConfig(dtype=dtype))
    policy.apply_autocast_islands(model)
    with compute_context(policy, torch.device("cpu"), autocast=True):
        out = model(tokens)
    assert out.dtype == policy.dtype
    torch.testing.assert_close(out.float(), ref, rtol=0.05, atol=0.05)


def test_compiled_blocks_with_autocast_islands_share_one_graph():
    """The norms' fp32 islands are one class per (module class, dtype), not a wrapper per module: compiled
    blocks guard on the type, so 12 blocks compile once, within dynamo's recompile limit of 8 (a wrapper object
    per norm recompiled every block and failed at the ninth, as llama3-1b on a GPU showed)."""
    torch._dynamo.reset()
    args = dataclasses.replace(get_model_args("debug"), n_layers=12)
    model = build_model(args, 16)
    policy = PrecisionPolicy(PrecisionConfig(dtype="bf16"))
    policy.apply_autocast_islands(model)
    norms = [block.ffn_norm for block in model.layers.values()]
    assert len({type(n) for n in norms}) == 1 and all("forward" not in vars(n) for n in norms)
    assert set(model.state_dict()) == set(build_model(args, 16).state_dict())  # names unchanged
    torch._dynamo.config.fail_on_recompile_limit_hit = True  # as parallel/compile.py sets it
    for block in model.layers.values():
        block.compile(fullgraph=True, backend="eager")  # dynamo's guards, without inductor's compile time
    with torch.no_grad(), compute_context(policy, torch.device("cpu"), autocast=True):
        out = model(torch.randint(0, 100, (2, 16)))
    assert out.dtype == torch.bfloat16
