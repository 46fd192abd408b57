"""Which tensor-parallel styles a block gets (parallel/tensor.py): torchao's Float8 styles when every Linear layer
of the block is tensorwise FP8, the plain ones otherwise."""

import pytest
from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, RowwiseParallel

from bessemer.config import load_config
from bessemer.model.llama import build_model
from bessemer.model.registry import get_model_args
from bessemer.parallel.tensor import block_styles
from bessemer.precision.fp8 import convert_to_fp8
from bessemer.precision.policy import PrecisionPolicy

PLAIN = (ColwiseParallel, RowwiseParallel, PrepareModuleInput)


def converted(*overrides: str):
    model = build_model(get_model_args("debug"), 16, "meta")
    c = load_config(None, ["--precision.dtype=bf16", "--precision.fp8.emulate=true", *overrides]).precision
    convert_to_fp8(model, PrecisionPolicy(c), c.fp8, tp=2)
    return model


def test_tensorwise_fp8_blocks_take_the_float8_styles():
    from torchao.float8.float8_tensor_parallel import (Float8ColwiseParallel, Float8RowwiseParallel,
                                                       PrepareFloat8ModuleInput)

    model = converted("--precision.fp8.enabled=true")
    assert block_styles(model.layers["0"]) == (Float8ColwiseParallel, Float8RowwiseParallel, PrepareFloat8ModuleInput)


@pytest.mark.parametrize("overrides", [
    [],  # no FP8
    ["--precision.fp8.enabled=true", "--precision.fp8.recipe=rowwise"],  # one scale per row: plain styles
    ["--precision.fp8.enabled=true", "--precision.fp8.divisible_by=64"],  # wk, wv (32 features per shard) left out
])
def test_other_blocks_keep_the_plain_styles(overrides):
    assert block_styles(converted(*overrides).layers["0"]) == PLAIN
