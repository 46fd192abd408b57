"""train.compile under FSDP2: dp_shard 4 with every block compiled (inductor on CPU) trains the debug model for
20 steps with the losses of the single-process eager run, within fp32 rounding of fused kernels (relative 1e-4).
(Tensor parallelism is left eager: parallel/compile.py.)"""

import functools
import shutil

import pytest

from tests.distributed.runs import train_losses

STEPS = 20
COMMON = ["configs/debug.toml", f"--train.steps={STEPS}", "--train.global_batch=8", "--train.deterministic=true",
          "--metrics.tensorboard=false", "--metrics.peak_tflops=1", "--checkpoint.at_end=false"]


train = functools.partial(train_losses, COMMON, timeout=1200)  # train(run_dir, nproc, extra) -> {step: loss}


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("cc") is None,
                    reason="inductor compiles CPU kernels with a C++ compiler; none is installed")
def test_compiled_dp_shard4_matches_single_process_eager(tmp_path):
    eager = train(tmp_path / "eager", 1, ["--train.micro_batch=4", "--train.compile=false"])
    compiled = train(tmp_path / "compiled", 4, [
        "--parallel.dp_shard=4", "--train.micro_batch=1", "--train.compile=true"])
    assert sorted(compiled) == sorted(eager) == list(range(1, STEPS + 1))
    worst = max(abs(compiled[s] - eager[s]) / abs(eager[s]) for s in eager)
    print(f"\ncompiled dp_shard4: max relative loss difference over {STEPS} steps {worst:.2e}")
    assert worst < 1e-4, f"max relative loss difference {worst:.2e}"
