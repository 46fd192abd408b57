import math

import pytest

from bessemer.checkpoint.interval import advise, expected_waste, young_daly


def test_young_daly_matches_the_formula_and_its_limits():
    delta, mtbf = 60.0, 3 * 3600.0
    r = delta / (2 * mtbf)
    assert young_daly(delta, mtbf) == pytest.approx(math.sqrt(2 * delta * mtbf) * (1 + math.sqrt(r) / 3 + r / 9) - delta)
    assert young_daly(delta, mtbf) == pytest.approx(math.sqrt(2 * delta * mtbf), rel=0.05)  # Young's first order
    assert young_daly(10_000.0, 3600.0) == 3600.0  # a save longer than 2 MTBF: checkpoint once per MTBF
    assert young_daly(0.0, mtbf) == 0.0


def test_the_optimum_wastes_less_than_neighbouring_intervals_and_the_rule_of_thumb():
    delta, mtbf = 30.0, 4 * 3600.0
    best = young_daly(delta, mtbf)
    waste = expected_waste(best, delta, 0.0, mtbf)
    for factor in (0.25, 0.5, 2.0, 4.0):
        assert expected_waste(best * factor, delta, 0.0, mtbf) > waste
    advice = advise(delta, 2.0, mtbf)
    assert advice.optimum_steps == round(best / 2.0)
    assert advice.waste_at_optimum < advice.waste_at_rule_of_thumb
    assert "Young/Daly" in advice.describe() and advice.as_event()["optimum_steps"] == advice.optimum_steps
