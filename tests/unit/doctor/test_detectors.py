"""The detectors on recorded and synthetic sequences, and the leak detector on real training loops."""

import json
import os
import random
import subprocess
import sys

import pytest

from bessemer.doctor.detectors import (GpuSample, LeakDetector, StarvationDetector, StragglerDetector,
                                       ThrottleDetector, linear_fit)


def node(clocks, reasons=None, util=95.0, max_mhz=1800):
    """One sampling round of a node: GPU i at clocks[i] MHz."""
    reasons = reasons or {}
    return [GpuSample(i, c, max_mhz, reasons.get(i, []), util if not isinstance(util, dict) else util[i])
            for i, c in enumerate(clocks)]


def run(detector, rounds):
    return [a for r in rounds for a in detector.update(r)]


def test_one_gpu_thermally_throttled_raises_exactly_one_alert_naming_it():
    healthy = [node([1800] * 8) for _ in range(5)]
    # GPU 5 slows down over a few samples, then stays at 1200 MHz with HwThermalSlowdown while its peers run on.
    ramp = [node([1800] * 5 + [c] + [1800] * 2, {5: ["HwThermalSlowdown"]}) for c in (1600, 1400, 1200)]
    throttled = [node([1800] * 5 + [1200] + [1800] * 2, {5: ["HwThermalSlowdown"]}) for _ in range(30)]
    alerts = run(ThrottleDetector(), healthy + ramp + throttled)
    assert len(alerts) == 1
    a = alerts[0]
    assert a["kind"] == "throttle" and a["gpu"] == 5
    assert "GPU 5" in a["message"] and "1200 MHz" in a["message"] and "HwThermalSlowdown" in a["message"]


def test_a_new_episode_after_the_clock_recovers_alerts_again():
    bad = [node([1800, 1100], {1: ["SwPowerCap"]}) for _ in range(5)]
    good = [node([1800, 1800]) for _ in range(5)]
    alerts = run(ThrottleDetector(samples=3), bad + good + bad)
    assert [a["gpu"] for a in alerts] == [1, 1]


def test_idle_clock_drops_do_not_alert():
    idle_all = [node([210] * 8, {i: ["GpuIdle"] for i in range(8)}, util=0.0) for _ in range(30)]
    idle_one = [node([1800] * 3 + [210] + [1800] * 4, {3: ["GpuIdle"]}, util={i: 0.0 if i == 3 else 97.0
                                                                                 for i in range(8)})
                for _ in range(30)]
    # No reason reported at all, but utilization 0: still idle.
    idle_no_reason = [node([1800, 300], util={0: 90.0, 1: 0.0}) for _ in range(30)]
    for rounds in (idle_all, idle_one, idle_no_reason):
        assert run(ThrottleDetector(), rounds) == []


def test_a_gpu_slower_than_its_peers_without_a_reason_alerts_after_the_window():
    rounds = [node([1800] * 3 + [1500] + [1800] * 4) for _ in range(10)]
    alerts = run(ThrottleDetector(peer_window=6), rounds)
    assert len(alerts) == 1 and alerts[0]["gpu"] == 3 and "peers" in alerts[0]["message"]
    # A few samples below the peers (a short dip) is not enough.
    assert run(ThrottleDetector(peer_window=6), rounds[:5]) == []


def test_throttle_detector_reads_telemetry_dicts():
    sample = {"gpu": 0, "sm_clock_mhz": 900, "sm_clock_max_mhz": 1980, "throttle_reasons": ["HwPowerBrakeSlowdown"],
              "utilization_pct": 100}
    assert GpuSample.from_telemetry(sample).max_clock_mhz == 1980
    assert GpuSample.from_telemetry({**sample, "sm_clock_mhz": None}) is None
    alerts = run(ThrottleDetector(samples=2), [[sample]] * 3)
    assert len(alerts) == 1 and "HwPowerBrakeSlowdown" in alerts[0]["message"]


def steps(n, ranks=8, slow=None, factor=1.5, noise=0.05, seed=0):
    rng = random.Random(seed)
    for _ in range(n):
        times = [0.1 * (1 + rng.uniform(-noise, noise)) for _ in range(ranks)]
        if slow is not None:
            times[slow] *= factor
        yield times


def test_straggler_alert_names_the_slow_rank_once():
    det = StragglerDetector(margin=1.2, window=10, fraction=0.75)
    alerts = [a for i, t in enumerate(steps(60, slow=6), 1) for a in det.update(i, t)]
    assert len(alerts) == 1
    a = alerts[0]
    assert a["kind"] == "straggler" and a["rank"] == 6 and a["ranks"] == [6]
    assert "rank 6" in a["message"] and 0.6 < a["score"] < 0.7
    assert det.scores()[6] < 0.7 < min(s for r, s in enumerate(det.scores()) if r != 6)


def test_straggler_alert_comes_within_the_window_and_says_which_section():
    det = StragglerDetector(margin=1.2, window=10, fraction=0.75, warmup=2)
    first = None
    for i, t in enumerate(steps(30, slow=2, factor=2.0), 1):
        sections = {"data": [0.001] * 8, "forward_backward": [x * 0.8 for x in t], "optimizer": [0.01] * 8}
        alerts = det.update(i, t, sections)
        if alerts and first is None:
            first = (i, alerts[0])
    step, alert = first
    assert step <= 2 + 10 and alert["rank"] == 2 and "forward_backward" in alert["message"]


def test_noise_and_one_off_spikes_raise_no_straggler_alert():
    det = StragglerDetector(margin=1.2, window=10, fraction=0.75)
    rng = random.Random(1)
    for i, times in enumerate(steps(300, noise=0.15, seed=2), 1):
        if rng.random() < 0.2:  # a random rank hiccups (GC, page cache) on one step
            times[rng.randrange(8)] *= 2.0
        assert det.update(i, times) == []


LOOP = """
import json, sys
import psutil, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8192))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
leak, kept, series = sys.argv[1] == "1", [], []
for step in range(1, 61):
    out = model(torch.randn(64, 16))  # (64, 8192) floats: 2 MiB
    loss = out.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    kept.append(out if leak else loss.item())  # the leaky loop keeps every output (and its autograd node)
    series.append((step, psutil.Process().memory_info().rss))
print(json.dumps(series))
"""


def training_loop(leak: bool) -> list[tuple[int, int]]:
    """A real CPU training loop, in a fresh process: in this one, memory freed by earlier tests would be
    reused and hide the growth from the resident-set size the detector reads."""
    proc = subprocess.run([sys.executable, "-c", LOOP, "1" if leak else "0"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    return [tuple(x) for x in json.loads(proc.stdout)]


@pytest.mark.parametrize("leak", [True, False])
def test_leak_detector_on_real_training_loops(leak):
    det = LeakDetector(window=30, warmup=5, min_bytes=16 * 2 ** 20)
    series = training_loop(leak)
    alerts = [a for step, mem in series for a in det.update(step, mem, rank=0)]
    grew = (series[-1][1] - series[5][1]) / 2 ** 20
    if leak:
        assert len(alerts) == 1, f"grew {grew:.1f} MiB"
        assert alerts[0]["kind"] == "memory_leak" and alerts[0]["rank"] == 0 and alerts[0]["r2"] > 0.9
    else:
        assert alerts == [], f"grew {grew:.1f} MiB: {alerts}"


def test_leak_detector_is_quiet_on_noise_and_a_single_jump():
    rng = random.Random(0)
    base = 2 ** 30
    noisy = [(s, base + rng.uniform(-50, 50) * 2 ** 20) for s in range(1, 300)]
    jump = [(s, base + (200 * 2 ** 20 if s > 100 else 0) + rng.uniform(-2, 2) * 2 ** 20) for s in range(1, 300)]
    for series in (noisy, jump):
        det = LeakDetector(window=50, warmup=20)
        assert [a for s, m in series for a in det.update(s, m)] == []
    slope, r2 = linear_fit([(x, 3 * x + 1) for x in range(10)])
    assert slope == pytest.approx(3) and r2 == pytest.approx(1)


def test_starvation_detector():
    det = StarvationDetector(fraction=0.3, window=10)
    fed = [a for _ in range(40) for a in det.update(0.005, 0.1)]
    assert fed == []
    starved = [a for _ in range(40) for a in det.update(0.08, 0.12, rank=2)]
    assert len(starved) == 1
    assert starved[0]["kind"] == "dataloader_starved" and starved[0]["data_wait_fraction"] > 0.3
    assert "rank 2" in starved[0]["message"]
