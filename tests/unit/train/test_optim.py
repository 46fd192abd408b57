import copy
import dataclasses
import math
import re

import pytest
import torch

from bessemer.config import TrainConfig
from bessemer.errors import BessemerError
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


def _trained(cfg, steps):
    """Optimizers and schedules after `steps` steps (no gradients: only the learning rate moves)."""
    opts = Optimizers(_parts(), cfg)
    sched = LRSchedules(opts, cfg)
    for _ in range(steps):
        opts.step()
        sched.step()
    return opts, sched


def _resume(cfg, state):
    opts = Optimizers(_parts(), cfg)
    sched = LRSchedules(opts, cfg)
    sched.load_state_dict(copy.deepcopy(state))
    return opts, sched


OLD = TrainConfig(lr=1.0, warmup=10, steps=100, schedule="cosine", min_lr_ratio=0.1)


def test_resume_with_the_same_schedule_continues_it_exactly():
    _, sched = _trained(OLD, 40)
    resumed_opts, resumed = _resume(OLD, sched.state_dict())
    assert resumed.state_dict() == sched.state_dict() and not resumed.overridden
    resumed_opts.step()
    resumed.step()
    assert resumed_opts.lr == OLD.lr * LRMultiplier(10, 100, "cosine", 0.1)(41)


def test_changed_schedule_settings_stop_with_every_difference_named():
    _, sched = _trained(OLD, 40)
    new = dataclasses.replace(OLD, steps=200, warmup=5)
    with pytest.raises(BessemerError) as e:
        _resume(new, sched.state_dict())
    assert str(e.value) == ("checkpoint step 40 was trained with train.steps=100, train.warmup=10; this config says "
                            "train.steps=200, train.warmup=5: set train.override_schedule=true to continue on the new "
                            "schedule from step 40, or restore the old values")
    for change, words in [({"schedule": "linear"}, "train.schedule=cosine; this config says train.schedule=linear"),
                          ({"lr": 0.5}, "train.lr=1.0; this config says train.lr=0.5"),
                          ({"min_lr_ratio": 0.0}, "train.min_lr_ratio=0.1; this config says train.min_lr_ratio=0.0")]:
        with pytest.raises(BessemerError, match=re.escape(words)):
            _resume(dataclasses.replace(OLD, **change), sched.state_dict())


def test_under_a_constant_schedule_only_warmup_and_lr_matter():
    old = dataclasses.replace(OLD, schedule="constant")
    _, sched = _trained(old, 20)
    _resume(dataclasses.replace(old, steps=500, min_lr_ratio=0.0), sched.state_dict())  # no difference
    with pytest.raises(BessemerError, match="train.warmup=10; this config says train.warmup=4"):
        _resume(dataclasses.replace(old, warmup=4), sched.state_dict())


@pytest.mark.parametrize("change", [{"steps": 200, "warmup": 5}, {"schedule": "linear", "lr": 0.5},
                                    {"min_lr_ratio": 0.0, "steps": 60}])
def test_override_continues_on_the_new_schedule_from_the_saved_step(change):
    _, sched = _trained(OLD, 40)
    new = dataclasses.replace(OLD, override_schedule=True, **change)
    opts, resumed = _resume(new, sched.state_dict())
    formula = LRMultiplier(new.warmup, new.steps, new.schedule, new.min_lr_ratio)
    assert resumed.overridden and all(o.startswith("train.") and " -> " in o for o in resumed.overridden)
    for step in range(40, 45):  # the lr each next step is taken with, in every optimizer and group
        for opt in opts.optimizers:
            for group in opt.param_groups:
                assert group["lr"] == pytest.approx(new.lr * formula(step), rel=1e-12)
                assert group["initial_lr"] == new.lr
        assert resumed.schedules[0].get_last_lr()[0] == pytest.approx(new.lr * formula(step), rel=1e-12)
        opts.step()
        resumed.step()
    # Saved again, the schedule is the new one: a later resume with the new config needs no override.
    state = resumed.state_dict()
    assert state["last_epoch"] == 45
    _resume(dataclasses.replace(new, override_schedule=False), state)


def test_override_after_restored_optimizer_state_still_sets_the_new_lr():
    """The optimizer's state (with its param_groups' lr) loads before the schedule, as in a checkpoint."""
    opts, sched = _trained(OLD, 40)
    new = dataclasses.replace(OLD, steps=200, override_schedule=True)
    fresh = Optimizers(_parts(), new)
    schedules = LRSchedules(fresh, new)
    fresh.load_state_dict(opts.state_dict())
    assert fresh.lr == opts.lr  # the old schedule's lr came back with the optimizer
    schedules.load_state_dict(copy.deepcopy(sched.state_dict()))
    assert fresh.lr == pytest.approx(LRMultiplier(10, 200, "cosine", 0.1)(40), rel=1e-12) != opts.lr


def test_a_checkpoint_written_before_the_check_is_read_alike():
    """Checkpoints from before the schedule check hold LambdaLR's own state dict, multiplier fields included;
    a state without them (a plain function's) compares the peak lr only."""
    legacy = {"base_lrs": [1.0, 1.0], "last_epoch": 40, "_step_count": 41, "_is_initial": False,
              "_get_lr_called_within_step": False, "_last_lr": [0.8, 0.8],
              "lr_lambdas": [{"warmup": 10, "steps": 100, "schedule": "cosine", "min_ratio": 0.1}] * 2}
    with pytest.raises(BessemerError, match="checkpoint step 40 was trained with train.steps=100;"):
        _resume(dataclasses.replace(OLD, steps=150), legacy)
    opts, _ = _resume(dataclasses.replace(OLD, steps=150, override_schedule=True), legacy)
    assert opts.lr == pytest.approx(LRMultiplier(10, 150, "cosine", 0.1)(40), rel=1e-12)
    anonymous = {**legacy, "lr_lambdas": [None, None]}
    _resume(dataclasses.replace(OLD, steps=150), anonymous)  # nothing to compare but the lr
    with pytest.raises(BessemerError, match="train.lr=1.0; this config says train.lr=2.0"):
        _resume(dataclasses.replace(OLD, lr=2.0), anonymous)
