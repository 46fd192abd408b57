"""FP8 with tensor parallelism through torchao's Float8 parallel styles (parallel/tensor.py), emulated on gloo
processes: tp 2 trains the debug model in tensorwise FP8 as one process does.

Why the tolerance: each FP8 cast scales by the amax of the whole tensor — under TP a reduction over the
shards, and a maximum is exact in any order — so the casts see the numbers one process sees, except that
row-parallel outputs are summed in another order. That difference (about 1e-7 relative in fp32) moves an
E4M3 rounding (steps of 2^-3) for the elements sitting near a boundary, and those flips compound over the
steps. Measured with torch 2.13 / torchao 0.18 over 20 steps, per step: tp 2 within 2e-5 of one process up to
step 10 and 8.1e-5 (tp 2) / 1.8e-4 (tp 2 + sequence parallel) at worst, by step 20; FP8 against plain fp32 in
the same runs 2.1e-4 by step 10 and 4.1e-4 at worst. Two checks, then: the worst step within 3e-4 (a broken cast
is off by more than the whole FP8 effect at once), and the median step at least four times closer to FP8 than
fp32 is (measured 5.4e-6 against 1.1e-4): if FP8 were silently off under TP, that fails. The worst step alone
cannot separate the two, because the compounding makes the last steps of both runs drift by similar amounts.
The base is fp32: on bf16 the rounding of partial sums alone moves the losses by about 1e-4, the
size of the whole FP8 effect on this model, and could not tell the two apart.
With sequence parallelism gloo cannot all-gather float8, so that run takes the plain styles (the same casts
inside each layer)."""

import functools
import statistics

import pytest

from tests.distributed.runs import train_losses

STEPS = 20
COMMON = ["configs/debug.toml", f"--train.steps={STEPS}", "--train.global_batch=8", "--train.micro_batch=4",
          "--train.deterministic=true", "--metrics.tensorboard=false", "--metrics.peak_tflops=1",
          "--checkpoint.at_end=false", "--precision.dtype=fp32"]
FP8 = ["--precision.fp8.enabled=true", "--precision.fp8.emulate=true"]
TOLERANCE = 3e-4


train = functools.partial(train_losses, COMMON)  # train(run_dir, nproc, extra) -> {step: loss}


def per_step(a: dict, b: dict) -> list[float]:
    return [abs(a[s] - b[s]) / abs(b[s]) for s in sorted(b)]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The one-process runs: FP8 (the reference) and fp32 alone."""
    root = tmp_path_factory.mktemp("one")
    return train(root / "fp8", 1, FP8), train(root / "fp32", 1, [])


@pytest.mark.distributed
@pytest.mark.parametrize("sequence_parallel", [False, True])
def test_fp8_tp2_matches_one_process_fp8(sequence_parallel, one_process, tmp_path):
    one, plain = one_process
    tp2 = train(tmp_path / "tp2", 2, [*FP8, "--parallel.tp=2", f"--parallel.sequence_parallel={sequence_parallel}"])
    assert sorted(tp2) == list(range(1, STEPS + 1))
    diff, fp8_effect = per_step(tp2, one), per_step(plain, one)
    typical, effect = statistics.median(diff), statistics.median(fp8_effect)
    print(f"\nfp8 tp2 (sp={sequence_parallel}) vs one process: worst {max(diff):.2e}, median {typical:.2e}; "
          f"fp8 vs fp32: worst {max(fp8_effect):.2e}, median {effect:.2e}")
    assert max(diff) < TOLERANCE, f"max relative loss difference {max(diff):.2e}"
    assert typical < effect / 4, f"tp2 (median {typical:.2e}) is not clearly closer to FP8 than fp32 is ({effect:.2e})"
