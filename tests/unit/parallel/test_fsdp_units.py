"""FSDP2 units as parallel/fsdp.py cuts them, on a one-rank gloo group: one unit per block, the embedding and the
head apart from the root, no norm-only units under the default rules; the replicas' all-reduce only on the
last micro-batch of an accumulation; FP8 weights all-gathered in FP8 with precomputed scales."""

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule

from bessemer.config import load_config
from bessemer.model.llama import RMSNorm, build_model
from bessemer.model.registry import get_model_args
from bessemer.parallel.fsdp import apply_fsdp, set_final_microbatch
from bessemer.precision.fp8 import convert_to_fp8, precompute_fp8_scales
from bessemer.precision.policy import PrecisionPolicy


@pytest.fixture
def one_rank(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def policy(*overrides: str) -> PrecisionPolicy:
    return PrecisionPolicy(load_config(None, ["--precision.dtype=bf16", *overrides]).precision)


def units(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    return {name: m for name, m in model.named_modules() if isinstance(m, FSDPModule)}


def own_params(unit: torch.nn.Module, all_units: dict) -> list[str]:
    """Names of the parameters a unit manages: its own, less those of the units nested in it."""
    nested = [m for m in all_units.values() if m is not unit]
    inner = {id(p) for m in nested if any(m is s for s in unit.modules()) for p in m.parameters()}
    return [n for n, p in unit.named_parameters() if id(p) not in inner]


def test_default_rules_make_no_norm_units(one_rank):
    model = build_model(get_model_args("debug"), 16, "meta")
    apply_fsdp(model, init_device_mesh("cpu", (1,)), policy())
    found = units(model)
    assert sorted(found) == sorted(["", "tok_embeddings", "output", *(f"layers.{i}" for i in range(4))])
    assert not [n for n, m in found.items() if isinstance(m, RMSNorm)]
    assert own_params(found[""], found) == ["norm.weight"]  # embedding and head are not kept by the root
    assert "attention_norm.weight" in own_params(found["layers.0"], found)
    # Norm weights take the unit's dtype; RMSNorm normalises in fp32 itself.
    mp = found["layers.0"]._get_fsdp_state()._mp_policy
    assert mp.param_dtype == torch.bfloat16


def test_an_explicit_param_rule_still_splits_a_norm_off(one_rank):
    model = build_model(get_model_args("debug"), 16, "meta")
    apply_fsdp(model, init_device_mesh("cpu", (1,)), policy('--precision.rules=["*norm: param=fp32"]'))
    norms = [n for n, m in units(model).items() if isinstance(m, RMSNorm)]
    assert len(norms) == 2 * 4 + 1  # two per block and the final one


def test_replicas_all_reduce_once_per_accumulated_step(one_rank, monkeypatch):
    """HSDP (replicate x shard = 1 x 1): with set_final_microbatch, the first micro-batch's backward issues no
    all-reduce and the last one one per unit; the gradients are the sum over both micro-batches all the same."""
    tokens = torch.randint(0, 1024, (2, 2, 16), generator=torch.Generator().manual_seed(0))
    grads, counts = [], []
    for final_only in (False, True):
        model = build_model(get_model_args("debug"), 16, "cpu", seed=0)
        apply_fsdp(model, init_device_mesh("cpu", (1, 1), mesh_dim_names=("dp_replicate", "dp_shard")),
                   PrecisionPolicy(load_config(None, []).precision))
        calls = []
        real = dist.all_reduce
        monkeypatch.setattr(dist, "all_reduce", lambda *a, **k: calls.append(1) or real(*a, **k))
        per_microbatch = []
        for i in range(2):
            if final_only:
                set_final_microbatch([model], is_last=i == 1)
            before = len(calls)
            model(tokens[i]).float().logsumexp(-1).mean().backward()
            per_microbatch.append(len(calls) - before)
        monkeypatch.setattr(dist, "all_reduce", real)
        counts.append(per_microbatch)
        grads.append([p.grad.full_tensor() for p in model.parameters()])
    n_units = len(units(model))
    assert counts == [[n_units, n_units], [0, n_units]]
    for every, final in zip(*grads):
        torch.testing.assert_close(final, every, rtol=1e-6, atol=1e-7)


def test_fp8_weights_all_gather_in_fp8_with_scales_precomputed_after_the_step(one_rank):
    """FSDP2 + tensorwise FP8 (emulated): the weights are wrapped for the FP8 all-gather, and
    precompute_fp8_scales gives each the scale of its current values, which the next forward uses."""
    from torchao.float8.fsdp_utils import WeightWithDynamicFloat8CastTensor

    c = load_config(None, ["--precision.dtype=bf16", "--precision.fp8.enabled=true",
                           "--precision.fp8.emulate=true"]).precision
    model = build_model(get_model_args("debug"), 16, "cpu", seed=0)
    convert_to_fp8(model, PrecisionPolicy(c), c.fp8, sharded=True)
    apply_fsdp(model, init_device_mesh("cpu", (1,)), PrecisionPolicy(c))
    wq = model.layers["0"].attention.wq
    assert isinstance(wq.weight._local_tensor, WeightWithDynamicFloat8CastTensor)
    tokens = torch.randint(0, 1024, (2, 16), generator=torch.Generator().manual_seed(0))
    model(tokens).float().logsumexp(-1).mean().backward()
    with torch.no_grad():
        wq.weight.mul_(3.0)  # as an optimizer step would change it
    precompute_fp8_scales([model])
    amax = wq.weight.full_tensor().abs().max().double()
    expected = (torch.finfo(torch.float8_e4m3fn).max / amax).float()
    torch.testing.assert_close(wq.weight._local_tensor._precomputed_scale, expected)
    assert torch.isfinite(model(tokens).float()).all()

