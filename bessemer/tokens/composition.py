"""How a domain mixture composes each global batch: counts per domain, their order, weight schedules and
online reweighting. Plain Python and NumPy (no torch); the quotas and the parsing of weights are the
config's (config/mixture.py), which checks a mixture with them.

Counts. A global batch of G sequences gives domain d either floor(G w_d) or ceil(G w_d) sequences, so its
share is never further than max(f_d, 1 - f_d) / G < 1/G from its weight (f_d the fractional part of G w_d).
Which domains get the ceiling is decided by a carried rounding error, the lag: lag_d is how many sequences
domain d is owed (ideal count so far minus actual count). Each batch adds f_d to every lag and rounds up the
G - sum floor(G w_d) eligible domains (f_d > 0) that are owed most, which then owe one. The sum of the lags
stays 0, each lag stays bounded, and so the long-run share of every domain converges to its weight.

Order. Within the batch, domain d's n_d sequences sit at evenly spaced positions (j + phase_d) / n_d with a
random phase per step, so every contiguous run of the batch — a data-parallel rank's slice, a micro-batch —
holds each domain's share to within about one sequence.
"""

import math

import numpy as np

from bessemer.config.mixture import normalized, quotas


def compose(weights: list[float], global_batch: int, lag: list[float]) -> tuple[list[int], list[float]]:
    """Sequences per domain for one batch (summing to global_batch), and the lag carried to the next batch."""
    base, frac = quotas(weights, global_batch)
    lag = [a + f for a, f in zip(lag, frac)]
    extra = global_batch - sum(base)
    eligible = [d for d, f in enumerate(frac) if f > 0]
    assert 0 <= extra <= len(eligible), f"{extra} sequences to round up among {len(eligible)} domains ({weights})"
    counts = list(base)
    for d in sorted(eligible, key=lambda d: (-lag[d], d))[:extra]:  # the domains owed most; ties by index
        counts[d] += 1
        lag[d] -= 1.0
    return counts, lag


def interleave(counts: list[int], seed: int, step: int) -> np.ndarray:
    """The domain of each position of the batch (int64, length sum(counts)), spread evenly and seeded by step."""
    rng = np.random.default_rng([seed % 2 ** 63, step])
    phase, tie = rng.random(len(counts)), rng.permutation(len(counts))
    keys = [((j + phase[d]) / n, tie[d], d) for d, n in enumerate(counts) for j in range(n)]
    return np.array([d for _, _, d in sorted(keys)], dtype=np.int64)


def reweight(weights: list[float], losses: dict[int, float], eta: float, floor: float) -> list[float]:
    """One exponentiated-gradient step: w_d *= exp(eta (loss_d - mean loss)), renormalized, with every domain
    of positive weight kept at `floor` or above. Domains without a (finite) loss this step count as the mean;
    a weight of 0 stays 0 (leaving a domain out is the user's choice)."""
    seen = {d: v for d, v in losses.items() if weights[d] > 0 and math.isfinite(v)}
    if not seen:
        return list(weights)
    mean = sum(seen.values()) / len(seen)
    new = normalized([w * math.exp(eta * (seen.get(d, mean) - mean)) for d, w in enumerate(weights)])
    return _floor(new, floor)


def _floor(weights: list[float], floor: float) -> list[float]:
    """Raise positive weights below `floor` to it, taking the mass from the others in proportion."""
    fixed: set[int] = set()
    while True:
        free = [d for d, w in enumerate(weights) if w > 0 and d not in fixed]
        mass = 1.0 - floor * len(fixed)
        total = sum(weights[d] for d in free)
        low = {d for d in free if weights[d] / total * mass < floor}
        if not low or len(low) == len(free):
            break
        fixed |= low
    return [floor if d in fixed else (w / total * mass if w > 0 else 0.0) for d, w in enumerate(weights)]
