"""Detectors that turn sequences of measurements into alerts: a throttled GPU, a straggling rank, memory that
grows step after step, a data loader that starves the step. Each is fed one observation at a time and returns
the alerts it raises (dicts with `kind`, `message` and the fields that point at the culprit: `gpu`, `rank`,
`ranks`), at most one per episode: a condition that persists raises one alert, and a new alert needs the
condition to clear first. Pure Python, no torch: they are tested on recorded sequences.
"""

import math
import statistics
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

Alert = dict

# Reasons that mean the clock is cut to protect the GPU or the power budget (not idling, not a clock setting).
THERMAL_POWER_REASONS = ("HwThermalSlowdown", "SwThermalSlowdown", "HwPowerBrakeSlowdown", "HwSlowdown",
                         "SwPowerCap")


class Episode:
    """Debounces a boolean condition: `update` returns True once, when the condition has held for `on`
    consecutive observations; the episode ends after `off` consecutive observations without it."""

    def __init__(self, on: int, off: int):
        assert on >= 1 and off >= 1, (on, off)
        self.on, self.off = on, off
        self.held = self.cleared = 0
        self.active = False

    def update(self, condition: bool) -> bool:
        if condition:
            self.held, self.cleared = self.held + 1, 0
        else:
            self.held, self.cleared = 0, self.cleared + 1
            if self.cleared >= self.off:
                self.active = False
        if not self.active and self.held >= self.on:
            self.active = True
            return True
        return False


# ---------------------------------------------------------------------------------------------- throttle

@dataclass
class GpuSample:
    """One GPU at one sampling instant. `utilization_pct` None = unknown (counts as busy unless GpuIdle)."""

    gpu: int
    sm_clock_mhz: float
    max_clock_mhz: float
    reasons: list[str] = field(default_factory=list)
    utilization_pct: float | None = None

    @classmethod
    def from_telemetry(cls, d: Mapping) -> "GpuSample | None":
        """From a telemetry sample's per-GPU dict; None when NVML could not read the clocks."""
        if d.get("sm_clock_mhz") is None or not d.get("sm_clock_max_mhz"):
            return None
        return cls(d["gpu"], d["sm_clock_mhz"], d["sm_clock_max_mhz"], list(d.get("throttle_reasons") or []),
                   d.get("utilization_pct"))

    def busy(self, min_util: float) -> bool:
        if "GpuIdle" in self.reasons:
            return False
        return self.utilization_pct is None or self.utilization_pct >= min_util


class ThrottleDetector:
    """A GPU running below its maximum SM clock while busy, for one of two reasons:

    - its clock is more than `margin` below its maximum with a thermal or power reason set
      (THERMAL_POWER_REASONS) for `samples` consecutive samples;
    - its clock stays below `peer_ratio` x the median clock of the other busy GPUs for `peer_window`
      consecutive samples (a GPU that is slower than its peers, whatever the driver says).

    An idle GPU (GpuIdle, or utilization below `min_util_pct`) dropping its clock is normal and never alerts.
    One alert per GPU per episode, whichever rule fires first; the episode ends after `samples` clean samples.
    """

    def __init__(self, samples: int = 3, margin: float = 0.1, peer_ratio: float = 0.9, peer_window: int = 6,
                 min_util_pct: float = 10.0):
        assert samples >= 1 and peer_window >= 1 and 0 <= margin < 1 and 0 < peer_ratio <= 1
        self.samples, self.margin, self.peer_ratio, self.peer_window = samples, margin, peer_ratio, peer_window
        self.min_util = min_util_pct
        self._reason: dict[int, int] = {}  # gpu -> consecutive samples throttled with a reason
        self._peer: dict[int, int] = {}  # gpu -> consecutive samples below its peers
        self._episode: dict[int, Episode] = {}

    def update(self, gpus: Iterable[GpuSample | Mapping]) -> list[Alert]:
        """One sampling round: every GPU of the node at one instant."""
        round_ = [g if isinstance(g, GpuSample) else GpuSample.from_telemetry(g) for g in gpus]
        round_ = [g for g in round_ if g is not None]
        busy = {g.gpu: g.sm_clock_mhz for g in round_ if g.busy(self.min_util)}
        alerts = []
        for g in round_:
            is_busy = g.gpu in busy
            cut = [r for r in g.reasons if r in THERMAL_POWER_REASONS]
            low = g.sm_clock_mhz < (1 - self.margin) * g.max_clock_mhz
            self._reason[g.gpu] = self._reason.get(g.gpu, 0) + 1 if is_busy and low and cut else 0
            peers = [c for i, c in busy.items() if i != g.gpu]
            peer_median = statistics.median(peers) if peers else None
            slower = is_busy and peer_median is not None and g.sm_clock_mhz < self.peer_ratio * peer_median
            self._peer[g.gpu] = self._peer.get(g.gpu, 0) + 1 if slower else 0
            by_reason, by_peers = self._reason[g.gpu] >= self.samples, self._peer[g.gpu] >= self.peer_window
            episode = self._episode.setdefault(g.gpu, Episode(on=1, off=self.samples))
            if episode.update(by_reason or by_peers):
                alerts.append(self._alert(g, cut, peer_median, by_reason))
        return alerts

    def _alert(self, g: GpuSample, cut: list[str], peer_median: float | None, by_reason: bool) -> Alert:
        pct = 100 * g.sm_clock_mhz / g.max_clock_mhz
        peers = f", peers' median {peer_median:.0f} MHz" if peer_median is not None else ""
        if by_reason:
            why = (f"reason {', '.join(cut)} for {self._reason[g.gpu]} samples")
        else:
            why = (f"below {100 * self.peer_ratio:.0f}% of its peers for {self._peer[g.gpu]} samples"
                   + (f" (reasons: {', '.join(g.reasons)})" if g.reasons else " (no throttle reason reported)"))
        return {"kind": "throttle", "gpu": g.gpu, "sm_clock_mhz": g.sm_clock_mhz, "max_clock_mhz": g.max_clock_mhz,
                "peer_median_mhz": peer_median, "reasons": list(g.reasons),
                "message": f"GPU {g.gpu} throttled: SM clock {g.sm_clock_mhz:.0f} MHz of max "
                           f"{g.max_clock_mhz:.0f} MHz ({pct:.0f}%){peers}; {why}"}


# ---------------------------------------------------------------------------------------------- straggler

class StragglerDetector:
    """A rank slower than the others, from every rank's step time.

    Each step, rank r's relative performance score is median(step times) / its step time (1.0 = typical,
    0.5 = twice as slow; the score nvidia-resiliency-ext's straggler detection reports). A rank is slow on a
    step when its time exceeds `margin` x the median; it is a straggler when it was slow on at least
    `fraction` of the last `window` steps. One alert per step that finds new stragglers (`rank`: the slowest
    of them, `ranks`: all); a rank's episode ends after `window` steps below that share. The first `warmup`
    steps (allocation, compilation) are ignored.
    """

    def __init__(self, margin: float = 1.2, window: int = 20, fraction: float = 0.75, warmup: int = 2):
        assert margin > 1 and window >= 1 and 0 < fraction <= 1 and warmup >= 0, (margin, window, fraction)
        self.margin, self.window, self.fraction, self.warmup = margin, window, fraction, warmup
        self.needed = max(1, math.ceil(fraction * window))
        self._seen = 0
        self._slow: list[deque[bool]] = []
        self._scores: list[deque[float]] = []
        self._episode: list[Episode] = []

    def update(self, step: int, times: Sequence[float],
               sections: Mapping[str, Sequence[float]] | None = None) -> list[Alert]:
        """`times[r]`: rank r's step time in seconds; `sections` (optional): name -> per-rank seconds (data,
        forward_backward, optimizer, ...), used to say where a straggler loses its time."""
        self._seen += 1
        if self._seen <= self.warmup or len(times) < 2:
            return []
        if not self._slow:
            self._slow = [deque(maxlen=self.window) for _ in times]
            self._scores = [deque(maxlen=self.window) for _ in times]
            self._episode = [Episode(on=1, off=self.window) for _ in times]
        median = statistics.median(times)
        new = []
        for r, t in enumerate(times):
            self._slow[r].append(t > self.margin * median)
            self._scores[r].append(median / t if t > 0 else 1.0)
            # The episode counts slow steps inside the window, not consecutive ones: noise may interrupt a run.
            if self._episode[r].update(sum(self._slow[r]) >= self.needed):
                new.append(r)
        if not new:
            return []
        worst = max(new, key=lambda r: times[r])
        score = statistics.median(self._scores[worst])
        n_slow = sum(self._slow[worst])
        message = (f"rank {worst} is a straggler: step {step} took {times[worst]:.3f} s vs the median "
                   f"{median:.3f} s ({times[worst] / median:.2f}x); slower than {self.margin:g}x the median on "
                   f"{n_slow} of the last {len(self._slow[worst])} steps (score {score:.2f})")
        if len(new) > 1:
            message += f"; also slow: ranks {', '.join(map(str, (r for r in new if r != worst)))}"
        where = _slowest_section(worst, times, sections)
        if where:
            message += f"; {where}"
        return [{"kind": "straggler", "rank": worst, "ranks": new, "score": round(score, 3),
                 "step_time_s": times[worst], "median_step_time_s": median, "message": message}]

    def scores(self) -> list[float]:
        """Every rank's median score over the window (1.0 = typical)."""
        return [statistics.median(s) if s else 1.0 for s in self._scores]


def _slowest_section(rank: int, times: Sequence[float], sections: Mapping[str, Sequence[float]] | None) -> str:
    """The section in which `rank` lost most of its time against the median rank, if one explains at least half."""
    if not sections:
        return ""
    lost = times[rank] - statistics.median(times)
    excess = {name: t[rank] - statistics.median(t) for name, t in sections.items() if len(t) == len(times)}
    name = max(excess, key=excess.get) if excess else None
    if name is None or excess[name] < lost / 2:
        return "no timed section explains it (the time is lost outside them)"
    return (f"most of it in {name} ({sections[name][rank]:.3f} s vs median "
            f"{statistics.median(sections[name]):.3f} s)")


# ---------------------------------------------------------------------------------------------- memory leak

class LeakDetector:
    """Memory that grows linearly with the step: a least-squares line through the last `window` (step, bytes)
    points; it alerts when the line rises by more than `min_bytes` and by more than `min_relative` of the
    window's mean over the window, and fits well (r^2 > `min_r2`), so that a flat series with noise or one
    jump (a cache filling once) stays quiet. The first `warmup` steps (allocator and caches settling) are
    ignored. The line is fitted every `every` steps (default window / 10): rank 0 runs one detector per rank."""

    def __init__(self, window: int = 50, warmup: int = 20, min_bytes: float = 64 * 2 ** 20,
                 min_relative: float = 0.01, min_r2: float = 0.9, name: str = "memory", every: int = 0):
        assert window >= 3 and warmup >= 0, (window, warmup)
        self.window, self.warmup, self.min_bytes, self.min_relative = window, warmup, min_bytes, min_relative
        self.min_r2, self.name = min_r2, name
        self.every = every or max(1, window // 10)
        self._points: deque[tuple[float, float]] = deque(maxlen=window)
        self._seen = 0
        self._episode = Episode(on=1, off=math.ceil(window / self.every))

    def update(self, step: int, memory_bytes: float, **fields) -> list[Alert]:
        """`fields` are copied into the alert (e.g. rank=3)."""
        self._seen += 1
        if self._seen <= self.warmup:
            return []
        self._points.append((float(step), float(memory_bytes)))
        if len(self._points) < self.window or (self._seen - self.warmup) % self.every:
            return []
        slope, r2 = linear_fit(self._points)
        span = self._points[-1][0] - self._points[0][0]
        rise = slope * span
        mean = sum(b for _, b in self._points) / len(self._points)
        leaking = rise > self.min_bytes and rise > self.min_relative * mean and r2 > self.min_r2
        if not self._episode.update(leaking):
            return []
        who = f"rank {fields['rank']}: " if "rank" in fields else ""
        return [{"kind": "memory_leak", "slope_bytes_per_step": round(slope, 1), "r2": round(r2, 4),
                 "memory_bytes": int(memory_bytes), **fields,
                 "message": f"{who}{self.name} grows linearly: +{rise / 2 ** 20:.1f} MiB over steps "
                            f"{self._points[0][0]:.0f}..{self._points[-1][0]:.0f} "
                            f"({slope / 2 ** 10:.1f} KiB/step, r^2 {r2:.3f}), now {memory_bytes / 2 ** 30:.3f} GiB"}]


def linear_fit(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares slope of y on x and the fit's r^2 (0 when y is constant)."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    syy = sum((y - my) ** 2 for _, y in points)
    sxy = sum((x - mx) * (y - my) for x, y in points)
    if sxx == 0:
        return 0.0, 0.0
    slope = sxy / sxx
    r2 = sxy * sxy / (sxx * syy) if syy > 0 else 0.0
    return slope, r2


# ---------------------------------------------------------------------------------------------- starvation

class StarvationDetector:
    """The step waits on the data loader: over the last `window` steps, the time spent waiting for batches is
    more than `fraction` of the step time. The episode ends after a whole window below it."""

    def __init__(self, fraction: float = 0.3, window: int = 20):
        assert 0 < fraction <= 1 and window >= 1, (fraction, window)
        self.fraction, self.window = fraction, window
        self._waits: deque[tuple[float, float]] = deque(maxlen=window)
        self._episode = Episode(on=1, off=window)

    def update(self, data_wait_s: float, step_time_s: float, **fields) -> list[Alert]:
        self._waits.append((data_wait_s, step_time_s))
        if len(self._waits) < self.window:
            return []
        waited = sum(w for w, _ in self._waits)
        total = sum(t for _, t in self._waits)
        share = waited / total if total > 0 else 0.0
        if not self._episode.update(share > self.fraction):
            return []
        who = f" (rank {fields['rank']} waits longest)" if "rank" in fields else ""
        return [{"kind": "dataloader_starved", "data_wait_fraction": round(share, 3), **fields,
                 "message": f"the data loader starves training: {100 * share:.0f}% of the last {len(self._waits)} "
                            f"steps' time ({waited:.2f} s of {total:.2f} s) was spent waiting for batches{who}; "
                            f"more loader workers, faster storage or pre-tokenized shards help"}]
