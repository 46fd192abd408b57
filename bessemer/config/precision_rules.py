"""Per-module precision rules, parsed and resolved without torch (config validation and `plan` use them).

A rule is `"PATTERN: key=value, ..."`: PATTERN is an fnmatch glob over module names as `named_modules()`
gives them (`layers.3.attention.wq`, `tok_embeddings`, `norm`); keys are `param`, `compute`, `reduce`
(fp32 | bf16 | fp16) and `fp8` (a recipe name or `none`). Rules apply in order and later ones override
earlier ones key by key, so a user appends exceptions to the defaults.

`param` and `reduce` differing from the enclosing FSDP unit's make the module its own FSDP unit (an all-gather
and a reduce-scatter more per step), so the default norm rule sets only `compute=fp32`: fp32 normalisation,
which RMSNorm does inside itself, with the norm's weight in its unit's dtype (precision/policy.py).
"""

import fnmatch
from dataclasses import dataclass, replace

from bessemer.errors import ConfigError

DTYPE_KEYS = ("param", "compute", "reduce")
DTYPES = ("fp32", "bf16", "fp16")
FP8_RECIPES = ("tensorwise", "tensorwise_e4m3", "rowwise", "rowwise_with_gw_hp")


@dataclass(frozen=True)
class Rule:
    pattern: str
    settings: tuple[tuple[str, str], ...]

    def matches(self, name: str) -> bool:
        return fnmatch.fnmatchcase(name, self.pattern)


@dataclass(frozen=True)
class ModulePrecision:
    """What one module runs in. `fp8` is a recipe name or None."""

    param: str
    compute: str
    reduce: str
    fp8: str | None = None


def parse_rule(text: str) -> Rule:
    where = f"precision.rules: {text!r}"
    if ":" not in text:
        raise ConfigError(f"{where} must look like 'PATTERN: key=value, ...' (e.g. '*norm: compute=fp32')")
    pattern, body = (s.strip() for s in text.split(":", 1))
    if not pattern:
        raise ConfigError(f"{where} has an empty module pattern")
    settings = []
    for item in filter(None, (s.strip() for s in body.split(","))):
        key, sep, value = (s.strip() for s in item.partition("="))
        if not sep:
            raise ConfigError(f"{where}: {item!r} must be key=value")
        if key in DTYPE_KEYS:
            if value not in DTYPES:
                raise ConfigError(f"{where}: {key}={value!r}; choose one of {', '.join(DTYPES)}")
        elif key == "fp8":
            if value not in (*FP8_RECIPES, "none"):
                raise ConfigError(f"{where}: fp8={value!r}; choose one of {', '.join(FP8_RECIPES)}, none")
        else:
            raise ConfigError(f"{where}: unknown key {key!r}; keys are {', '.join(DTYPE_KEYS)}, fp8")
        settings.append((key, value))
    if not settings:
        raise ConfigError(f"{where} sets nothing")
    return Rule(pattern, tuple(settings))


def parse_rules(texts: list[str]) -> list[Rule]:
    return [parse_rule(t) for t in texts]


def resolve(name: str, rules: list[Rule], base: ModulePrecision) -> ModulePrecision:
    """The precision of module `name`: `base` (the run's dtype and FP8 recipe) with every matching rule
    applied in order."""
    out = base
    for rule in rules:
        if rule.matches(name):
            for key, value in rule.settings:
                out = replace(out, **{key: None if value == "none" else value})
    return out
