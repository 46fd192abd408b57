"""train.compile across ranks: every block compiled (inductor on CPU) under tp 2 x dp_shard 2 — FSDP2 and tensor
parallelism together; plain, and with sequence parallelism, the loss over vocabulary shards and full activation
checkpointing — trains the debug model for 20 steps with the losses of the single-process eager run, within fp32
rounding of fused kernels (relative 1e-4; measured ~1e-7)."""

import functools
import shutil

import pytest

from tests.distributed.runs import train_losses

STEPS = 20
COMMON = ["configs/debug.toml", f"--train.steps={STEPS}", "--train.global_batch=8", "--train.deterministic=true",
          "--metrics.tensorboard=false", "--metrics.peak_tflops=1", "--checkpoint.at_end=false"]
TP = ["--parallel.dp_shard=2", "--parallel.tp=2", "--train.micro_batch=2", "--train.compile=true"]
LAYOUTS = {
    "tp2_dp_shard2": TP,
    "tp2_dp_shard2_sp_full_ac": [*TP, "--parallel.sequence_parallel=true", "--parallel.loss_parallel=true",
                                 "--precision.activation_checkpoint.mode=full"],
}

train = functools.partial(train_losses, COMMON, timeout=1200)  # train(run_dir, nproc, extra) -> {step: loss}


@pytest.fixture(scope="module")
def eager(tmp_path_factory):
    return train(tmp_path_factory.mktemp("eager"), 1, ["--train.micro_batch=4", "--train.compile=false"])


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("cc") is None,
                    reason="inductor compiles CPU kernels with a C++ compiler; none is installed")
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_compiled_layout_matches_single_process_eager(layout, eager, tmp_path):
    compiled = train(tmp_path / "compiled", 4, LAYOUTS[layout])
    assert sorted(compiled) == sorted(eager) == list(range(1, STEPS + 1))
    worst = max(abs(compiled[s] - eager[s]) / abs(eager[s]) for s in eager)
    print(f"\ncompiled {layout}: max relative loss difference over {STEPS} steps {worst:.2e}")
    assert worst < 1e-4, f"max relative loss difference {worst:.2e}"
