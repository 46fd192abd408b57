"""The arithmetic a domain mixture is checked with, shared by the [data] section's validation and the mixture
loader (tokens/composition.py): weights and schedules parsed from config text, the per-batch quotas and the
largest share error they allow. Plain Python."""

import math

from bessemer.errors import ConfigError

EPS = 1e-9  # G x w within this of an integer counts as that integer (0.3 x 50 = 15.000000000000002)


def normalized(weights: list[float]) -> list[float]:
    total = sum(weights)
    assert total > 0, f"weights {weights} sum to {total}"
    return [w / total for w in weights]


def quotas(weights: list[float], global_batch: int) -> tuple[list[int], list[float]]:
    """floor(G w_d) and its fractional part f_d for normalized weights (snapped to integers within EPS)."""
    base, frac = [], []
    for w in weights:
        x = global_batch * w
        n = math.floor(x + EPS)
        base.append(n)
        frac.append(x - n if x - n > EPS else 0.0)
    return base, frac


def max_deviation(weights: dict[str, float], global_batch: int) -> tuple[float, str]:
    """The largest |share - weight| any batch can show under these weights, and the domain that shows it."""
    names = list(weights)
    _, frac = quotas(normalized(list(weights.values())), global_batch)
    worst = [max(f, 1 - f) / global_batch if f else 0.0 for f in frac]
    i = max(range(len(names)), key=worst.__getitem__)
    return worst[i], names[i]


def parse_weights(text: str, names: list[str], where: str) -> dict[str, float]:
    """`name=w, name=w` (or name:w) -> {name: w} over `names` (those left out get 0), validated."""
    out = dict.fromkeys(names, 0.0)
    for item in filter(str.strip, text.split(",")):
        name, sep, value = item.replace(":", "=", 1).partition("=")
        name = name.strip()
        if not sep:
            raise ConfigError(f"{where}: expected name=weight items, got {item.strip()!r}")
        if name not in out:
            raise ConfigError(f"{where}: {name!r} is not a domain of data.domains ({', '.join(names) or 'empty'})")
        try:
            out[name] = float(value)
        except ValueError:
            raise ConfigError(f"{where}: the weight of {name} must be a number, got {value.strip()!r}") from None
        if not (out[name] >= 0 and math.isfinite(out[name])):
            raise ConfigError(f"{where}: the weight of {name} must be >= 0, got {value.strip()}")
    if not sum(out.values()) > 0:
        raise ConfigError(f"{where}: the weights must not all be 0")
    return out


def parse_schedule(entries: list[str], names: list[str]) -> list[tuple[int, dict[str, float]]]:
    """data.weight_schedule entries "STEP: name=w, ..." -> [(step, weights)], sorted by step."""
    out = []
    for entry in entries:
        step, sep, body = entry.partition(":")
        where = f"data.weight_schedule entry {entry!r}"
        try:
            step = int(step.strip().replace("_", ""))
        except ValueError:
            step = -1
        if not sep or step < 0:
            raise ConfigError(f"{where}: expected \"STEP: name=w, name=w\" with STEP >= 0")
        out.append((step, parse_weights(body, names, where)))
    out.sort(key=lambda e: e[0])
    steps = [s for s, _ in out]
    if len(set(steps)) != len(steps):
        raise ConfigError(f"data.weight_schedule: more than one entry for a step ({steps})")
    return out
