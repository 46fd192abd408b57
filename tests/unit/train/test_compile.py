"""train.compile: each block and the loss compiled in place (parallel/compile.py), with the eager model's
names and, over 20 training steps, its losses; the CUDA fast paths (TF32, fused AdamW) where a GPU is."""

import shutil

import pytest
import torch

from bessemer.config import JobConfig, load_config
from bessemer.errors import ConfigError
from bessemer.model.llama import build_model
from bessemer.model.registry import MODEL_SIZES
from bessemer.parallel.compile import apply_compile, compile_enabled
from bessemer.parallel.dims import Launch, ParallelDims
from bessemer.parallel.recompute import apply_activation_checkpointing
from bessemer.precision.policy import PrecisionPolicy, compute_context
from bessemer.train.builders import (
    build_device,
    build_model_parts_for,
    loss_fn,
    pipeline_loss,
)
from bessemer.train.optim import Optimizers, device_adamw
from bessemer.train.trainer import Trainer

DEBUG = MODEL_SIZES["debug"]
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("setting, device, expected", [
    ("auto", "cuda", True), ("auto", "cpu", False), (True, "cpu", True), (False, "cuda", False)])
def test_auto_compiles_on_cuda_only(setting, device, expected):
    assert compile_enabled(setting, device) is expected


def test_config_takes_auto_true_or_false_and_names_the_key_otherwise():
    assert JobConfig().train.compile == "auto"
    assert load_config(None, ["--train.compile=true"]).train.compile is True
    assert load_config(None, ["--train.compile=false"]).train.compile is False
    assert load_config(None, ["--train.compile=auto"]).train.compile == "auto"
    with pytest.raises(ConfigError, match="train.compile"):
        load_config(None, ["--train.compile=fast"])


def test_blocks_compile_in_place_with_unchanged_names():
    eager = build_model(DEBUG, 16, seed=0)
    model = build_model(DEBUG, 16, seed=0)
    assert apply_compile(model) == [f"layers.{i}" for i in range(DEBUG.n_layers)]
    assert all(block._compiled_call_impl is not None for block in model.layers.values())
    assert model._compiled_call_impl is None  # the blocks only: FSDP's hooks stay outside the graphs
    assert list(model.state_dict()) == list(eager.state_dict())  # checkpoints and HF export see the same keys


@pytest.mark.parametrize("mode, save_ops, every", [("full", [], 2), ("selective", [], 2), ("selective", ["mm"], 2)])
def test_a_whole_block_checkpoint_stays_eager_around_the_compiled_forward(mode, save_ops, every):
    """full / every n-th block: the checkpoint wraps the compiled forward (compile_within); op-level selective:
    the block is compiled whole, its checkpoint traced with it."""
    from bessemer.config import ActivationCheckpointConfig
    from bessemer.parallel.recompute import _checkpointed

    model = build_model(DEBUG, 16, seed=0)
    wrapped = apply_activation_checkpointing(model, ActivationCheckpointConfig(mode=mode, save_ops=save_ops,
                                                                               every=every))
    apply_compile(model)
    for name, block in model.layers.items():
        whole_block = f"layers.{name}" in wrapped and not save_ops
        assert (block._compiled_call_impl is None) is whole_block, name
        if whole_block:
            assert block.forward.func is _checkpointed
            assert hasattr(block.forward.args[0], "_torchdynamo_orig_callable")  # what torch.compile returns


def _build(compile_setting, precision: str = "fp32"):
    cfg = load_config(None, [f"--train.compile={str(compile_setting).lower()}", f"--precision.dtype={precision}",
                             "--train.seq_len=32"])
    dims = ParallelDims.from_config(cfg.parallel, 1)
    policy = PrecisionPolicy(cfg.precision)
    build = build_model_parts_for(cfg, DEBUG, dims, Launch(), torch.device("cpu"), 1, pipeline_loss(lambda: 1.0, 1, 1))
    return cfg, build, policy


def test_builders_compile_each_block_and_the_loss_only_when_asked():
    _, eager, _ = _build(False)
    assert eager.loss is loss_fn and all(b._compiled_call_impl is None for b in eager.parts[0].layers.values())
    _, compiled, _ = _build(True)
    assert compiled.loss is not loss_fn
    assert all(b._compiled_call_impl is not None for b in compiled.parts[0].layers.values())


def test_pipeline_loss_scales_the_chosen_loss():
    logits, targets = torch.randn(2, 3, 7), torch.randint(0, 7, (2, 3))
    scaled = pipeline_loss(lambda: 8.0, 2, 2)
    torch.testing.assert_close(scaled(logits, targets), loss_fn(logits, targets) * 2.0)
    doubled = type(scaled)(scaled.scale, 2, 2, loss=lambda lg, tg: 2 * loss_fn(lg, tg))
    torch.testing.assert_close(doubled(logits, targets), loss_fn(logits, targets) * 4.0)


def test_per_sample_losses_average_to_the_loss():
    logits, targets = torch.randn(3, 5, 7), torch.randint(0, 7, (3, 5))
    per_sample = loss_fn(logits, targets, per_sample=True)
    assert per_sample.shape == (3,)
    torch.testing.assert_close(per_sample.mean(), loss_fn(logits, targets))
    torch.testing.assert_close(per_sample[1], loss_fn(logits[1:2], targets[1:2]))


@pytest.mark.parametrize("mixture", [False, True])
def test_the_training_step_computes_the_builds_loss(mixture, tmp_path):
    """The step calls `build.loss` (the compiled loss under train.compile), once per micro-batch; a domain mixture
    takes its per-sample losses from it too."""
    domains = ["--data.domains=code:0.5,prose_en:0.25,prose_zh:0.25"] if mixture else []
    cfg = load_config("configs/debug.toml", [f"--run.dir={tmp_path}", "--train.steps=1", "--train.seq_len=32",
                                             "--train.global_batch=4", "--train.micro_batch=2",
                                             "--metrics.tensorboard=false", "--metrics.peak_tflops=1",
                                             "--metrics.telemetry_period_s=0", "--checkpoint.at_end=false",
                                             *domains])
    t = Trainer(cfg)
    calls, real = [], t.build.loss

    def spy(logits, targets, **kwargs):
        calls.append((tuple(logits.shape), kwargs))
        return real(logits, targets, **kwargs)

    t.build.loss = spy
    t.train()
    kwargs = {"per_sample": True} if mixture else {}
    assert calls == [((2, 32, t.model_args.vocab_size), kwargs)] * 2  # two micro-batches of 2 x 32 tokens


def _losses(compile_setting, steps: int) -> list[float]:
    torch.manual_seed(0)
    cfg, build, policy = _build(compile_setting)
    model, opts = build.parts[0], Optimizers(build.parts, cfg.train)
    data = torch.randint(0, DEBUG.vocab_size, (steps, 4, cfg.train.seq_len + 1),
                         generator=torch.Generator().manual_seed(1))
    losses = []
    for batch in data:
        opts.zero_grad()
        with compute_context(policy, torch.device("cpu"), autocast=True):
            loss = build.loss(model(batch[:, :-1]), batch[:, 1:])
            loss.backward()
        torch.nn.utils.clip_grad_norm_(opts.params, 1.0)
        opts.step()
        losses.append(loss.item())
    return losses


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("cc") is None,
                    reason="inductor compiles CPU kernels with a C++ compiler; none is installed")
def test_compiled_training_matches_eager_for_20_steps():
    eager, compiled = _losses(False, 20), _losses(True, 20)
    assert eager[-1] < eager[0]  # it trains
    for step, (a, b) in enumerate(zip(eager, compiled)):
        assert abs(a - b) <= 1e-4 * abs(a), (step, a, b)


@CUDA
def test_adamw_is_fused_on_cuda():
    opt = device_adamw([torch.nn.Parameter(torch.ones(2, 2, device="cuda"))], JobConfig().train)
    assert opt.defaults["fused"] is True


@CUDA
def test_fp32_matmuls_use_tf32_on_cuda():
    build_device(Launch())
    assert torch.get_float32_matmul_precision() == "high" and torch.backends.cuda.matmul.allow_tf32
