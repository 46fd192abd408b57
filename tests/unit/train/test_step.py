"""The step keeps its numbers on the device: no host read between log steps, non-finite gradients skipped on
the device, the loss scaler updated from a device flag."""

import math

import pytest
import torch

from bessemer.config import LossScalerConfig, load_config
from bessemer.precision.scaler import LossScaler
from bessemer.report.run_report import read_metrics
from bessemer.train.trainer import Trainer

SMALL = ["--train.seq_len=32", "--train.global_batch=4", "--train.micro_batch=2", "--metrics.tensorboard=false",
         "--metrics.peak_tflops=1", "--metrics.progress=false", "--metrics.telemetry_period_s=0",
         "--checkpoint.at_end=false"]
# The ways Python code makes the host wait for a device tensor's value.
HOST_READS = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__", "cpu", "numpy")


def trainer(run_dir, *overrides) -> Trainer:
    return Trainer(load_config("configs/debug.toml", [f"--run.dir={run_dir}", *SMALL, *overrides]))


def test_no_host_reads_between_log_steps(tmp_path, monkeypatch):
    t = trainer(tmp_path, "--train.steps=9", "--metrics.log_interval=4")
    reads, flushes, flushing = [], [], [False]

    def spy(name, original):
        def read(self, *args, **kwargs):
            if not flushing[0]:
                reads.append((t.state.step, name))
            return original(self, *args, **kwargs)
        return read

    real_flush = t.reporter.flush

    def flush(*args, **kwargs):
        flushing[0] = True
        flushes.append(t.state.step)
        try:
            return real_flush(*args, **kwargs)
        finally:
            flushing[0] = False

    monkeypatch.setattr(t.reporter, "flush", flush)
    for name in HOST_READS:
        monkeypatch.setattr(torch.Tensor, name, spy(name, getattr(torch.Tensor, name)))
    t.train()
    monkeypatch.undo()
    assert reads == []
    assert flushes == [4, 8, 9]  # the log steps and the last one
    records, _ = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(1, 10))  # still a record for every step
    assert all(math.isfinite(r["loss"]) and r["grad_norm"] > 0 and r["step_time_s"] > 0 for r in records)


def test_a_nonfinite_gradient_skips_the_update_on_the_device(tmp_path):
    t = trainer(tmp_path, "--train.steps=4")
    (opt,) = t.optimizers.device_optimizers
    assert opt.param_groups[0]["fused"]  # fused AdamW takes the finite flag as its found_inf
    t.train_step()
    weight = t.model_parts[0].layers["0"].feed_forward.w2.weight
    before = weight.detach().clone()
    state = {k: v.clone() for k, v in opt.state[weight].items()}
    handle = weight.register_hook(lambda g: g * math.inf)
    record = t.train_step()
    handle.remove()
    assert record["skipped"] == 1 and not math.isfinite(record["grad_norm"])
    assert torch.equal(weight, before)  # neither the weights nor AdamW's moments and step count moved
    assert all(torch.equal(opt.state[weight][k], v) for k, v in state.items())
    record = t.train_step()
    assert record["skipped"] == 0 and not torch.equal(weight, before)
    assert opt.state[weight]["step"] == state["step"] + 1


@pytest.mark.parametrize("flags", [[False, False, True, True, True, False], [True] * 5 + [False] * 4])
def test_the_loss_scaler_takes_its_flag_on_the_device(flags):
    cfg = LossScalerConfig(init_scale=64.0, min_scale=8.0, growth_interval=2, hysteresis=2)
    on_host, on_device = LossScaler(cfg, enabled=True), LossScaler(cfg, enabled=True)
    for finite in flags:
        on_host.update(finite)
        on_device.update(torch.tensor(finite))
        assert on_device.state_dict() == on_host.state_dict()
    assert isinstance(on_device.scale, torch.Tensor) and on_device.snapshot().tolist() == [on_host.scale,
                                                                                          on_host.overflows]
