"""The step contract (the `Step` base class every pipeline step derives from) and the step registry.

The contract (what a pipeline executor can rely on):

- `step.run(docs, rank=0, world_size=1, reject=None)` is a generator (`rank`/`world_size` = this shard and
  the shard count). It yields the documents it keeps, possibly with rewritten text; a document it drops is
  never yielded.
- A dropped document gets `doc.metadata["reason"]`, a namespaced string `<step>.<filter>.<rule>`
  (`quality.gopher.too_few_words`, `normalize.empty`), and is passed to `reject(doc)` at the moment it is
  dropped, before the next document is read. Its text is the text the failing rule judged (a quality
  step's boilerplate lines already removed), so the exclusion sink shows what was judged.
- `reject` given to `run` wins over the one given to the constructor. With neither, rejected documents
  are appended to `step.rejected`: fine for tests and small runs; an executor passes a callback (writing
  to the exclusion sink) so nothing accumulates in memory.
- Every document comes out exactly once, kept or rejected: the executor checks it (conservation).
- A step that keeps a document but cuts part of its text out (`decontaminate` with `action = "cut"`) may hand
  each removed part to `reject` as a record of its own (`Step.cut`): its text is the part, its reason the
  step's, `metadata["cut_from"]` the kept document's id. The executor writes it to the exclusion sink and does
  not count it as a document (the document went on); the step counts it in `stats()["cut"]`.
- `step.stats()` is a JSON-ready dict, merged into stats.json; the base class's has at least `docs_in`,
  `docs_out` and `rejected` (count per reason), and `cut` (parts per reason) once it has cut any; counters
  accumulate across `run` calls on the same instance.
- A *global* step (class attribute `global_step = True`, e.g. `dedup`) must see every shard at once; in a
  pipeline with several shards the executor calls its `run_global` instead (bessemer/data/phases.py).

The registry maps a `[[steps]] name = "..."` to its class (bessemer/data/pipeline_toml.py reads the TOML).
"""

import difflib
import importlib
import inspect
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from bessemer.data.document import CUT_FROM, REASON, Document, mark_rejected
from bessemer.errors import ConfigError

Reject = Callable[[Document], None]


class Step:
    """Subclasses set `name` and implement `process(doc)`: rewrite `doc` in place and return None to keep
    it, or return the rejection reason (without the `name.` prefix) to drop it."""

    name = "step"

    def __init__(self, reject: Reject | None = None):
        self._reject = reject
        self.rejected: list[Document] = []
        self.docs_in = 0
        self.docs_out = 0
        self.rejected_by_reason: Counter[str] = Counter()
        self.cut_by_reason: Counter[str] = Counter()

    def process(self, doc: Document) -> str | None:
        raise NotImplementedError

    def reject(self, doc: Document, reason: str, callback: Reject | None = None) -> None:
        """Mark `doc` rejected with `name.reason`, count it and hand it to the callback (or `self.rejected`)."""
        mark_rejected(doc, f"{self.name}.{reason}")
        self.rejected_by_reason[doc.metadata[REASON]] += 1
        self._hand_over(doc, callback)

    def cut(self, doc: Document, start: int, end: int, reason: str, callback: Reject | None = None,
            **detail: Any) -> None:
        """Hand `doc.text[start:end]`, about to be cut out of the kept `doc`, to the callback (or `self.rejected`)
        as a record of its own with the reason `name.reason` and `detail` in its metadata (module doc)."""
        part = Document(f"{doc.id}#{start}-{end}", doc.text[start:end], {CUT_FROM: doc.id, "span": [start, end]})
        mark_rejected(part, f"{self.name}.{reason}", **detail)
        self.cut_by_reason[part.metadata[REASON]] += 1
        self._hand_over(part, callback)

    def _hand_over(self, doc: Document, callback: Reject | None) -> None:
        """To the callback given to `run`, else the constructor's, else `self.rejected`."""
        callback = callback or self._reject
        if callback is None:
            self.rejected.append(doc)
        else:
            callback(doc)

    def run(
        self, docs: Iterable[Document], rank: int = 0, world_size: int = 1, reject: Reject | None = None
    ) -> Iterator[Document]:
        for doc in docs:
            self.docs_in += 1
            reason = self.process(doc)
            if reason is None:
                self.docs_out += 1
                yield doc
            else:
                self.reject(doc, reason, reject)

    def stats(self) -> dict:
        out = {
            "docs_in": self.docs_in,
            "docs_out": self.docs_out,
            "rejected": dict(sorted(self.rejected_by_reason.items())),
        }
        if self.cut_by_reason:
            out["cut"] = dict(sorted(self.cut_by_reason.items()))
        return out


# Step name -> class, or "module:Class" so that registering costs no import (the PII step loads jieba).
STEPS: dict[str, type | str] = {
    "pii": "bessemer.data.pii.redact:PiiStep",
    "normalize": "bessemer.data.text.normalize:NormalizeStep",
    "quality": "bessemer.data.quality.filter:QualityStep",
    "url": "bessemer.data.web.url:UrlStep",
    "extract": "bessemer.data.web.extract:ExtractStep",
    "lang": "bessemer.data.text.lang:LangStep",
    "dedup": "bessemer.data.dedup.lexical:DedupStep",
    "semantic-dedup": "bessemer.data.dedup.semantic:SemanticDedupStep",
    "decontaminate": "bessemer.data.decont.step:DecontaminateStep",
}


def register_step(name: str, target: type | str) -> None:
    """Make `[[steps]] name = "<name>"` build `target` (a class or "module:Class"). Worker processes get
    the registry as "module:Class" strings, so the class must be importable by that path."""
    STEPS[name] = target


def step_class(name: str) -> type:
    if name not in STEPS:
        raise ConfigError(f"unknown step {name!r}; valid steps: {', '.join(sorted(STEPS))}")
    target = STEPS[name]
    if isinstance(target, str):
        module, _, qualname = target.partition(":")
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        STEPS[name] = target = obj
    return target


def registry_paths() -> dict[str, str]:
    """The registry as "module:Class" strings, to hand to worker processes."""
    return {n: t if isinstance(t, str) else f"{t.__module__}:{t.__qualname__}" for n, t in STEPS.items()}


def build_step(spec: dict, where: str = "steps") -> Step:
    """`{"name": "pii", "action": "mask"}` -> PiiStep(action="mask"), with errors that name the key."""
    if "name" not in spec:
        raise ConfigError(f"{where}: missing 'name'; valid steps: {', '.join(sorted(STEPS))}")
    name, kwargs = spec["name"], {k: v for k, v in spec.items() if k != "name"}
    cls = step_class(name)
    params = [p for p in inspect.signature(cls).parameters.values() if p.kind is p.KEYWORD_ONLY
              or p.kind is p.POSITIONAL_OR_KEYWORD]
    valid = [p.name for p in params]
    for key in kwargs:
        if key not in valid:
            close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
            hint = f"did you mean '{close[0]}'?" if close else f"valid keys: name, {', '.join(valid)}"
            raise ConfigError(f"{where} ({name}): unknown key '{key}'; {hint}")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where} ({name}): {e}") from None
