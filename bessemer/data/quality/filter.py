"""Heuristic quality filtering: the `QualityStep` pipeline step.

Order: boilerplate line removal, Gopher repetition, Gopher quality, C4 (which also drops lines; what it
leaves must still pass Gopher's length floor), FineWeb, then the fastText classifier when a `model` is given
(on the text the heuristics left). A failing rule rejects the document as `quality.<filter>.<rule>`. CJK text
is measured in characters and judged by each filter's `cjk_` thresholds. The filters live beside this file
(boilerplate, gopher, c4, fineweb); thresholds, their sources and the
outside text they were validated on (bench/quality_eval.py): docs/data-steps.md; the classifier:
docs/data-extract-quality.md.
"""

import inspect
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from bessemer.data.document import Document
from bessemer.data.quality.boilerplate import BoilerplateRemover
from bessemer.data.quality.c4 import C4Quality
from bessemer.data.quality.fineweb import FineWebQuality
from bessemer.data.quality.gopher import GopherQuality, GopherRepetition
from bessemer.data.steps import Reject, Step
from bessemer.data.text.measure import TextView

FILTERS: tuple[str, ...] = ("boilerplate", "gopher_repetition", "gopher", "c4", "fineweb")
_BLANK_RUN = re.compile(r"\n{3,}")


def _pick(value, default_cls, name: str):
    """True -> the filter with its defaults, False/None -> off, a dict -> the filter with those options (a
    pipeline TOML's `gopher = {min_doc_words = 50}`), an instance -> that instance."""
    if value is True:
        return default_cls()
    if value is False or value is None:
        return None
    if isinstance(value, dict):
        try:
            return default_cls(**value)
        except TypeError as e:
            valid = ", ".join(inspect.signature(default_cls).parameters)
            raise TypeError(f"{name}: {e}; valid keys: {valid}") from None
    if not isinstance(value, default_cls):
        raise TypeError(f"{name} must be True, False, None, a table of options or a {default_cls.__name__}, "
                        f"not {value!r}")
    return value


def _tidy(text: str) -> str:
    return _BLANK_RUN.sub("\n\n", text).strip("\n")


class QualityStep(Step):
    """Pipeline step. Each filter is on with its defaults (True), off (False), or configured by passing an
    instance (`gopher=GopherQuality(min_doc_words=100)`) or its options (`gopher={"min_doc_words": 100}`,
    a table in a pipeline file). Documents whose `metadata["domain"]` is in `skip_domains` pass untouched:
    these rules were written for web prose, not code.

    `model` (a path written by `bessemer data quality-train`) adds the fastText classifier: every document
    that passes the heuristics gets `metadata["quality_score"]` (probability of high quality) and is
    rejected as `quality.classifier.low_score` below `threshold`; kept documents keep their score. The
    model loads on first use, so the step pickles as its path."""

    name = "quality"

    def __init__(
        self,
        boilerplate: bool | BoilerplateRemover = True,
        gopher_repetition: bool | GopherRepetition = True,
        gopher: bool | GopherQuality = True,
        c4: bool | C4Quality = True,
        fineweb: bool | FineWebQuality = True,
        markdown_aware: bool = True,
        cjk_threshold: float = 0.5,
        skip_domains: Iterable[str] = ("code",),
        model: str = "",
        threshold: float = 0.5,
        reject: Reject | None = None,
    ):
        super().__init__(reject)
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must be a probability in [0, 1], got {threshold}")
        if model and not Path(model).is_file():
            raise FileNotFoundError(f"quality model {model} does not exist (train one: bessemer data quality-train)")
        self.model = model
        self.threshold = threshold
        self._classifier = None
        self.boilerplate = _pick(boilerplate, BoilerplateRemover, "boilerplate")
        self.gopher_repetition = _pick(gopher_repetition, GopherRepetition, "gopher_repetition")
        self.gopher = _pick(gopher, GopherQuality, "gopher")
        self.c4 = _pick(c4, C4Quality, "c4")
        self.fineweb = _pick(fineweb, FineWebQuality, "fineweb")
        self.markdown_aware = markdown_aware
        self.cjk_threshold = cjk_threshold
        self.skip_domains = frozenset(skip_domains)
        self.lines_removed: Counter[str] = Counter()
        self.skipped = 0

    def __repr__(self) -> str:
        on = [f for f in FILTERS if getattr(self, f) is not None]
        model = f", model={self.model!r}, threshold={self.threshold}" if self.model else ""
        return f"QualityStep(filters={on}, markdown_aware={self.markdown_aware}{model})"

    def __getstate__(self) -> dict:
        return self.__dict__ | {"_classifier": None}

    def classifier(self):
        if self._classifier is None:
            from bessemer.data.quality.classifier import (
                QualityModel,  # fastText loads only when a model is set
            )

            self._classifier = QualityModel(self.model)
        return self._classifier

    def process(self, doc: Document) -> str | None:
        if doc.metadata.get("domain") in self.skip_domains:
            self.skipped += 1
            return None
        if self.boilerplate is not None:
            text, removed = self.boilerplate.apply(doc.text)
            if removed:
                self.lines_removed["boilerplate"] += removed
                doc.text = _tidy(text)
                if not doc.text.strip():
                    return "boilerplate.empty"
        view = TextView(doc.text, self.cjk_threshold)
        if self.gopher_repetition is not None and (rule := self.gopher_repetition.check(view)):
            return f"gopher_repetition.{rule}"
        if self.gopher is not None and (rule := self.gopher.check(view)):
            return f"gopher.{rule}"
        if self.c4 is not None:
            text, rule, removed = self.c4.apply(view, self.markdown_aware)
            self.lines_removed.update({f"c4.{k}": v for k, v in removed.items()})
            if rule:
                return f"c4.{rule}"
            if removed:
                doc.text = _tidy(text)
                view = TextView(doc.text, self.cjk_threshold)
                # What C4 left must still be a document: a template page can pass the length floor on
                # the strength of the lines C4 then removes.
                if self.gopher is not None and (rule := self.gopher.check_length(view)):
                    return f"gopher.{rule}"
        if self.fineweb is not None and (rule := self.fineweb.check(view, self.markdown_aware)):
            return f"fineweb.{rule}"
        if self.model:
            score = round(self.classifier().score(doc.text), 4)  # compared as stored, so the two never disagree
            doc.metadata["quality_score"] = score
            if score < self.threshold:
                return "classifier.low_score"
        return None

    def stats(self) -> dict:
        return super().stats() | {"skipped": self.skipped, "lines_removed": dict(sorted(self.lines_removed.items()))}
