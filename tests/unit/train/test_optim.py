import math

import pytest
import torch

from bessemer.config import TrainConfig
from bessemer.train.optim import LRMultiplier, LRSchedules, Optimizers


def test_warmup_is_linear_to_peak():
    f = LRMultiplier(warmup=4, steps=20, schedule="cosine", min_ratio=0.1)
    assert [f(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]


@pytest.mark.parametrize("schedule, mid, end", [("cosine", 0.55, 0.1), ("linear", 0.55, 0.1), ("constant", 1.0, 1.0)])
def test_decay_shapes(schedule, mid, end):
    f = LRMultiplier(warmup=0, steps=10, schedule=schedule, min_ratio=0.1)
    assert f(0) == 1.0
    assert math.isclose(f(5), mid) and math.isclose(f(10), end) and math.isclose(f(50), end)


def test_cosine_is_monotone_after_warmup():
    f = LRMultiplier(warmup=3, steps=40, schedule="cosine", min_ratio=0.0)
    values = [f(s) for s in range(3, 41)]
    assert all(a >= b for a, b in zip(values, values[1:]))
    assert values[-1] == 0.0


def _parts():
    torch.manual_seed(0)
    return [torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4)), torch.nn.Linear(4, 2)]


def test_schedule_drives_every_optimizer_and_round_trips():
    parts = _parts()
    cfg = TrainConfig(lr=1.0, warmup=2, steps=6, schedule="linear", min_lr_ratio=0.0)
    opts = Optimizers(parts, cfg)
    first = opts.optimizers[0]
    assert [g["weight_decay"] for g in first.param_groups] == [cfg.weight_decay, 0.0]  # no decay on 1-D params
    assert len(first.param_groups[1]["params"]) == 3  # linear bias, norm weight and bias
    sched = LRSchedules(opts, cfg)
    lrs = []
    for _ in range(3):
        lrs.append(opts.lr)
        opts.step()
        sched.step()
    assert lrs == [0.5, 1.0, 1.0]
    assert opts.optimizers[1].param_groups[0]["lr"] == opts.lr
    sched2 = LRSchedules(Optimizers(parts, cfg), cfg)
    sched2.load_state_dict(sched.state_dict())
    assert [s.get_last_lr() for s in sched2.schedules] == [s.get_last_lr() for s in sched.schedules]


def test_optimizer_state_is_keyed_by_parameter_name_and_round_trips():
    parts = _parts()
    cfg = TrainConfig(lr=0.1, warmup=0)
    opts = Optimizers(parts, cfg)
    for p in opts.params:
        p.grad = torch.ones_like(p)
    opts.step()
    opts.zero_grad()  # as after a step; loading needs parameters without gradients
    state = opts.state_dict()
    assert "state.0.weight.exp_avg" in state and "state.weight.exp_avg" in state  # both parts, by name
    fresh = Optimizers(parts, cfg)
    fresh.load_state_dict(state)
    again = fresh.state_dict()
    assert state.keys() == again.keys()
    for k in state:
        if isinstance(state[k], torch.Tensor):
            assert torch.equal(state[k], again[k]), k
