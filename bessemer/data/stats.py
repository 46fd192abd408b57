"""Per-step counters of a pipeline run, their merge over shards, and the conservation check.

stats.json (and each stats/part-<shard>.json):

    {"shards": 2, "docs_in": 1000, "docs_out": 990, "docs_rejected": 10, "conserved": true,
     "rejected": {"input.invalid_json": 3, "quality.gopher.too_few_words": 7},
     "steps": [{"name": "input", "docs_in": 1000, "docs_out": 997, "bytes_in": 5120000, "bytes_out": 5100000,
                "rejected": {"input.invalid_json": 3}, "seconds": 0.41, "extra": {}},
               {"name": "pii", ..., "extra": {"docs": 997, "docs_touched": 40, "counts": {"EMAIL": 12}}}]}

`docs_in` counts the records the readers produced (a blank JSONL line is not a record; a truncated file
adds one `input.truncated` record); conservation is docs_in == docs_out + docs_rejected, for the run and
for every step. Bytes are UTF-8 bytes of the text, except the input step's bytes_in: file sizes on disk.
`seconds` is the time spent in the step itself (its generator, not the steps feeding it).
"""

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


@dataclass
class StepStats:
    name: str
    docs_in: int = 0
    docs_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    rejected: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def n_rejected(self) -> int:
        return sum(self.rejected.values())

    def to_dict(self) -> dict:
        return {
            "name": self.name, "docs_in": self.docs_in, "docs_out": self.docs_out,
            "bytes_in": self.bytes_in, "bytes_out": self.bytes_out,
            "rejected": dict(sorted(self.rejected.items())), "seconds": round(self.seconds, 4), "extra": self.extra,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "StepStats":
        return cls(d["name"], d["docs_in"], d["docs_out"], d["bytes_in"], d["bytes_out"], Counter(d["rejected"]),
                   d["seconds"], d.get("extra", {}))

    def merge(self, other: "StepStats") -> None:
        assert self.name == other.name, (self.name, other.name)
        self.docs_in += other.docs_in
        self.docs_out += other.docs_out
        self.bytes_in += other.bytes_in
        self.bytes_out += other.bytes_out
        self.rejected.update(other.rejected)
        self.seconds += other.seconds
        self.extra = merge_extra(self.extra, other.extra)


def merge_extra(a: Any, b: Any) -> Any:
    """Sum numbers, merge dicts key by key; anything else keeps the first value."""
    if isinstance(a, dict) and isinstance(b, dict):
        return {k: merge_extra(a[k], b[k]) if k in a and k in b else a.get(k, b.get(k)) for k in {**a, **b}}
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return a + b
    return a


def summary(steps: list[StepStats], shards: int) -> dict:
    """The stats.json object for these (merged) step counters."""
    rejected: Counter = Counter()
    for s in steps:
        rejected.update(s.rejected)
    docs_in, docs_out = steps[0].docs_in, steps[-1].docs_out
    return {
        "shards": shards, "docs_in": docs_in, "docs_out": docs_out, "docs_rejected": sum(rejected.values()),
        "conserved": not conservation_errors(steps), "rejected": dict(sorted(rejected.items())),
        "steps": [s.to_dict() for s in steps],
    }


def conservation_errors(steps: list[StepStats]) -> list[str]:
    """One message per step whose documents in != out + rejected (a step that dropped a document without
    marking it, or made new ones)."""
    errors = []
    for s in steps:
        if s.docs_in != s.docs_out + s.n_rejected:
            errors.append(f"step {s.name!r}: {s.docs_in} documents in, {s.docs_out} out + {s.n_rejected} rejected "
                          f"({s.docs_in - s.docs_out - s.n_rejected:+d} unaccounted)")
    return errors


def merge_shards(shard_stats: list[dict]) -> dict:
    """Merge per-shard stats objects (same steps, in the same order) into the run's stats.json object."""
    assert shard_stats, "no shard stats to merge"
    merged = [StepStats.from_dict(d) for d in shard_stats[0]["steps"]]
    for other in shard_stats[1:]:
        for mine, theirs in zip(merged, other["steps"], strict=True):
            mine.merge(StepStats.from_dict(theirs))
    out = summary(merged, shards=len(shard_stats))
    routes: Counter = Counter()
    for d in shard_stats:
        routes.update(d.get("routes", {}))
    if routes:
        out["routes"] = dict(sorted(routes.items()))  # documents written to <dir>/<route>/ (in docs_out)
    return out
