import pytest
import torch
from torch import nn

from bessemer.config import PrecisionConfig, load_config
from bessemer.errors import ConfigError
from bessemer.model.llama import TokenEmbedding, build_model
from bessemer.model.registry import get_model_args
from bessemer.precision.fp8 import check_fp8_hardware, convert_to_fp8, float8_config, fp8_targets
from bessemer.precision.policy import PrecisionPolicy


def cfg(*overrides: str) -> PrecisionConfig:
    return load_config(None, ["--precision.dtype=bf16", "--precision.fp8.enabled=true",
                              "--precision.fp8.emulate=true", *overrides]).precision


def test_every_block_linear_becomes_float8_and_the_ends_stay_high_precision():
    from torchao.float8.float8_linear import Float8Linear

    model = build_model(get_model_args("debug"), 32)
    c = cfg('--precision.rules=["*norm: param=fp32, compute=fp32", "tok_embeddings: fp8=none", "output: fp8=none", '
            '"layers.*.feed_forward.*: fp8=rowwise"]')
    targets = convert_to_fp8(model, PrecisionPolicy(c), c.fp8)
    assert len(targets) == 4 * 7 and targets["layers.0.feed_forward.w1"] == "rowwise"
    assert targets["layers.0.attention.wq"] == "tensorwise"
    assert isinstance(model.layers["1"].attention.wo, Float8Linear)
    assert type(model.output) is nn.Linear and type(model.tok_embeddings) is TokenEmbedding  # an nn.Embedding
    loss = model(torch.randint(0, 1024, (2, 32))).float().mean()
    loss.backward()
    assert torch.isfinite(model.layers["0"].attention.wq.weight.grad).all()


@pytest.mark.parametrize("module, words", [("tok_embeddings", "all-zero lookups"), ("output", "softmax")])
def test_fp8_embedding_or_head_is_refused_without_force(module, words):
    model = build_model(get_model_args("debug"), 32)
    other = "output" if module == "tok_embeddings" else "tok_embeddings"
    c = cfg(f'--precision.rules=["{other}: fp8=none", "{module}: fp8=tensorwise"]')
    with pytest.raises(ConfigError, match="precision.fp8.force") as e:
        convert_to_fp8(model, PrecisionPolicy(c), c.fp8)
    assert words in str(e.value)


def test_forced_fp8_embedding_loses_small_rows():
    """Why the refusal exists: with one E4M3 scale for the table, rows far below the largest come back zero."""
    model = build_model(get_model_args("debug"), 32)
    with torch.no_grad():
        model.tok_embeddings.weight[7] *= 1e-9
        model.tok_embeddings.weight[8] *= 1e4
    c = cfg('--precision.rules=["layers.*: fp8=none", "output: fp8=none", "tok_embeddings: fp8=tensorwise"]',
            "--precision.fp8.force=true")
    convert_to_fp8(model, PrecisionPolicy(c), c.fp8)
    looked_up = model.tok_embeddings(torch.tensor([[7, 3]]))
    assert (looked_up[0, 0] == 0).all() and (looked_up[0, 1] != 0).any()


def test_recipes_pick_the_formats():
    assert float8_config("tensorwise", True).cast_config_grad_output.target_dtype == torch.float8_e5m2
    assert float8_config("tensorwise_e4m3", True).cast_config_grad_output.target_dtype == torch.float8_e4m3fn
    rowwise = float8_config("rowwise", True)
    assert rowwise.emulate and rowwise.cast_config_input.scaling_granularity.value == "axiswise"


def test_fp8_without_emulation_needs_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    model = build_model(get_model_args("debug"), 32)
    c = cfg("--precision.fp8.emulate=false")
    with pytest.raises(ConfigError, match="emulate = true"):
        convert_to_fp8(model, PrecisionPolicy(c), c.fp8)


def test_fp8_on_a_gpu_without_fp8_tensor_cores_is_refused_with_what_was_found(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA A100-SXM4-80GB")
    model = build_model(get_model_args("debug"), 32, "meta")
    c = cfg("--precision.fp8.emulate=false")
    with pytest.raises(ConfigError, match=r"compute capability >= 8\.9.*A100-SXM4-80GB has 8\.0"):
        convert_to_fp8(model, PrecisionPolicy(c), c.fp8)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    check_fp8_hardware(emulate=False)  # an H100/H200 passes
    check_fp8_hardware(emulate=True)


@pytest.mark.parametrize("divisible_by, tp, left_out", [
    (16, 1, []),
    (128, 1, ["wk", "wv"]),  # their outputs are 2 kv heads x 32 = 64 features
    (32, 4, ["wk", "wv"]),  # per shard of 4: 64 / 4 = 16
    (1, 1, []),
])
def test_layers_whose_gemm_dims_do_not_fit_stay_high_precision(divisible_by, tp, left_out):
    model = build_model(get_model_args("debug"), 32, "meta")
    c = cfg(f"--precision.fp8.divisible_by={divisible_by}")
    targets = fp8_targets(model, PrecisionPolicy(c), c.fp8, tp)
    block = {n.rsplit(".", 1)[-1] for n in targets if n.startswith("layers.0.")}
    assert block == {"wq", "wk", "wv", "wo", "w1", "w2", "w3"} - set(left_out)
    assert len(targets) == 4 * len(block)


def test_divisible_by_must_be_positive():
    with pytest.raises(ConfigError, match="precision.fp8.divisible_by must be >= 1"):
        cfg("--precision.fp8.divisible_by=0")


def test_fsdp_fp8_all_gather_is_for_tensorwise_recipes_only():
    assert float8_config("tensorwise", True, fsdp_all_gather=True).enable_fsdp_float8_all_gather
    assert float8_config("tensorwise_e4m3", True, fsdp_all_gather=True).enable_fsdp_float8_all_gather
    assert not float8_config("rowwise", True, fsdp_all_gather=True).enable_fsdp_float8_all_gather
    assert not float8_config("tensorwise", True).enable_fsdp_float8_all_gather
