import math

import pytest
import torch

from bessemer.config import TrainConfig
from bessemer.train.optim import LRMultiplier, build_lr_schedule, build_optimizer


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


def test_schedule_drives_the_optimizer_and_round_trips():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    cfg = TrainConfig(lr=1.0, warmup=2, steps=6, schedule="linear", min_lr_ratio=0.0)
    opt = build_optimizer(model, cfg)
    assert [g["weight_decay"] for g in opt.param_groups] == [cfg.weight_decay, 0.0]  # no decay on 1-D params
    assert len(opt.param_groups[1]["params"]) == 3  # linear bias, norm weight and bias
    sched = build_lr_schedule(opt, cfg)
    lrs = []
    for _ in range(3):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == [0.5, 1.0, 1.0]
    state = sched.state_dict()
    opt2 = build_optimizer(model, cfg)
    sched2 = build_lr_schedule(opt2, cfg)
    sched2.load_state_dict(state)
    assert sched2.get_last_lr() == sched.get_last_lr()
