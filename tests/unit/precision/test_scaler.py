from bessemer.config import LossScalerConfig
from bessemer.precision.scaler import LossScaler


def scaler(**kw) -> LossScaler:
    return LossScaler(LossScalerConfig(**kw), enabled=True)


def test_backs_off_after_hysteresis_overflows_and_grows_after_an_interval():
    s = scaler(init_scale=1024.0, growth_interval=3, hysteresis=2)
    s.update(False)
    assert s.scale == 1024 and s.overflows == 1  # first overflow: tolerated (still skipped by the trainer)
    s.update(False)
    assert s.scale == 512 and s.backoffs == 1
    s.update(False)
    assert s.scale == 256  # hysteresis is spent until the scale grows again
    for _ in range(3):
        s.update(True)
    assert s.scale == 512 and s.hysteresis_left == 2


def test_scale_stays_within_its_bounds():
    s = scaler(init_scale=4.0, min_scale=2.0, max_scale=8.0, growth_interval=1, hysteresis=1)
    for _ in range(5):
        s.update(False)
    assert s.scale == 2.0 and s.at_floor
    for _ in range(5):
        s.update(True)
    assert s.scale == 8.0 and not s.at_floor


def test_state_round_trips():
    a = scaler(init_scale=64.0, growth_interval=4)
    for finite in (True, False, True, False, True):
        a.update(finite)
    b = scaler(init_scale=64.0, growth_interval=4)
    b.load_state_dict(a.state_dict())
    for finite in (True, True, True, False, True, True, True, True):
        a.update(finite)
        b.update(finite)
        assert a.state_dict() == b.state_dict()


def test_disabled_scaler_is_one():
    s = LossScaler(LossScalerConfig(), enabled=False)
    s.update(False)
    assert s.scale == 1.0 and not s.at_floor
