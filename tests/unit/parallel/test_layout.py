"""Layout checks run before any process group exists: each bad layout names its numbers."""

import dataclasses

import pytest

from bessemer.config import ParallelConfig
from bessemer.errors import ConfigError
from bessemer.model.registry import MODEL_SIZES
from bessemer.parallel.dims import ParallelDims
from bessemer.parallel.layout import check_layout, pipeline_microbatches, stage_layers

DEBUG = MODEL_SIZES["debug"]  # 4 layers, 4 heads, 2 kv heads


def dims(world, **kw):
    return ParallelDims.from_config(ParallelConfig(**kw), world)


def test_dp_shard_fills_the_rest_of_the_world():
    d = dims(8, tp=2, pp=2)
    assert (d.dp_replicate, d.dp_shard, d.tp, d.pp, d.dp) == (1, 2, 2, 2, 2)
    assert dims(8, dp_replicate=2, dp_shard=2, tp=2).dp == 4


@pytest.mark.parametrize("world, kw, message", [
    (8, {"tp": 3}, "world size 8 is not divisible by dp_replicate x tp x pp = 1 x 3 x 1 = 3"),
    (8, {"dp_shard": 2, "tp": 2}, "1 x 2 x 2 x 1 = 4, but the world size is 8"),
    (1, {"tp": 2}, "--nproc N"),
])
def test_product_must_equal_world(world, kw, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        dims(world, **kw)


@pytest.mark.parametrize("kw, micro_batch, message", [
    ({"tp": 4}, 4, r"parallel.tp = 4 does not divide the model's n_kv_heads \(2\)"),
    ({"pp": 8}, 8, "8 pipeline stages .* for a model of 4 layers"),
    ({"pp": 2, "pp_schedule": "interleaved_1f1b", "virtual_stages": 4}, 8, "8 pipeline stages"),
    ({"pp": 2, "microbatches": 3}, 4, r"parallel.microbatches \(3\) must divide .* train.micro_batch \(4\)"),
    ({"pp": 2, "pp_schedule": "gpipe", "virtual_stages": 2}, 4, "runs one stage per rank"),
    ({"pp": 2, "pp_schedule": "interleaved_1f1b", "virtual_stages": 1}, 4, "virtual_stages >= 2"),
    ({"pp": 2, "pp_layers": [1, 2]}, 4, r"pp_layers \[1, 2\] must list 2 .* summing to the model's 4 layers"),
])
def test_bad_layouts_name_their_numbers(kw, micro_batch, message):
    cfg = ParallelConfig(**kw)
    world = cfg.tp * cfg.pp
    with pytest.raises(ConfigError, match=message):
        check_layout(DEBUG, ParallelDims.from_config(cfg, world), cfg, micro_batch)


def test_tied_embeddings_refused_for_tp_but_allowed_under_pp():
    tied = dataclasses.replace(DEBUG, tie_embeddings=True)
    cfg = ParallelConfig(tp=2)
    with pytest.raises(ConfigError, match="tied embeddings"):
        check_layout(tied, ParallelDims.from_config(cfg, 2), cfg, 4)
    cfg = ParallelConfig(pp=2)  # the last stage keeps a copy of the embedding (parallel/pipeline.py)
    assert check_layout(tied, ParallelDims.from_config(cfg, 2), cfg, 4) == 2


def test_stage_split_even_uneven_and_interleaved():
    assert stage_layers(4, 2, []) == [range(0, 2), range(2, 4)]
    assert stage_layers(5, 2, []) == [range(0, 3), range(3, 5)]  # the remainder goes first
    assert stage_layers(4, 2, [1, 3]) == [range(0, 1), range(1, 4)]
    assert stage_layers(4, 4, []) == [range(i, i + 1) for i in range(4)]


def test_default_microbatches_is_the_number_of_stages(caplog):
    assert pipeline_microbatches(ParallelConfig(pp=2), 2, 4) == 2
    assert pipeline_microbatches(ParallelConfig(pp=2, pp_schedule="interleaved_1f1b"), 2, 4) == 4
    pipeline_microbatches(ParallelConfig(pp=4, microbatches=2), 4, 4)
    assert "parallel.microbatches (2) < pp (4)" in caplog.text
