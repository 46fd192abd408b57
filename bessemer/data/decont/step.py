"""The `decontaminate` step: documents that share an n-gram with a benchmark item are dropped, or the shared
spans cut out (docs/decontamination.md).

    [[steps]]
    name = "decontaminate"
    tasks = ["evals/"]          # task files of `bessemer eval` (docs/eval.md), or directories of them
    n = 13                      # words per n-gram
    cjk_n = 13                  # Han/kana characters per n-gram
    action = "drop"             # or "cut"
    choices = "gold"            # what follows an item's prompt in the indexed text: gold | all | none

A hit is a window of `n` words (or `cjk_n` characters) of the document, normalised (ngrams.py), equal to one
of a benchmark item's (index.py). Each hit counts for its benchmark, the task's `name`:

- `drop`: the document is rejected as `decontaminate.<benchmark>` (the benchmark with the most hits in it;
  ties go to the first task), with `metadata["decontaminate"]` = the first matched n-gram (normalised), the
  item it belongs to, where it lies in the text (`span`) and the hit count per benchmark.
- `cut`: every run of overlapping hit windows is cut out of the text; each removed part goes to the exclusion
  sink as its own record (`Step.cut`: reason `decontaminate.<benchmark>`, `cut_from` the document's id, `span`,
  `item`, `ngram`) and the document goes on with `metadata["decontaminate"]` = the spans cut and the
  benchmarks. A document with no word or character left is rejected as under `drop`.

Defaults. n = 13 words: GPT-3's decontamination (Brown et al. 2020, appendix C: N is a task's 5th-percentile
item length, at least 8, at most 13) and the Pile's 13-gram tooling in lm-evaluation-harness; datatrove uses 12
(with jieba words for Chinese). cjk_n = 13 characters: GPT-3's rule on the XCOPA-zh items of
../shared/eval-bench counted in characters (premise + connective + answer: 13 at the 5th percentile), which
leaves 98% of them findable (20 characters: 36%); a Chinese word is 1.5-2 characters (1.95 per jieba word on
bessemer/demo/zh.txt), so 13 characters are 7-9 words.
"""

from collections import Counter
from collections.abc import Iterable, Iterator

from bessemer.benchmarks.tasks import expand
from bessemer.data.decont.index import CHOICES, Match, NGramIndex, load_index
from bessemer.data.decont.ngrams import is_char_unit
from bessemer.data.document import Document
from bessemer.data.steps import Reject, Step
from bessemer.errors import BessemerError

ACTIONS = ("drop", "cut")


def _merge(text: str, matches: list[Match]) -> list[tuple[int, int, list[Match]]]:
    """Hit windows joined when they overlap or only spaces and punctuation lie between them: (start, end, the
    matches inside), in text order."""
    spans: list[tuple[int, int, list[Match]]] = []
    for m in sorted(matches, key=lambda m: (m.window.start, m.window.end)):
        if spans and (m.window.start <= spans[-1][1]
                      or not any(c.isalnum() for c in text[spans[-1][1]:m.window.start])):
            s, e, ms = spans[-1]
            spans[-1] = (s, max(e, m.window.end), ms + [m])
        else:
            spans.append((m.window.start, m.window.end, [m]))
    return spans


def _join(left: str, right: str) -> str:
    """The pieces around a cut: one space between two words that would otherwise run together (none between Han
    or kana characters, which have none), not two where both pieces bring one."""
    a, b = left[-1:], right[:1]
    if a.isalnum() and b.isalnum() and not (is_char_unit(a) or is_char_unit(b)):
        return left + " " + right
    if a == "\n" and b == "\n":  # a cut line: no blank line left in its place
        return left + right[1:]
    if a.isspace() and b.isspace():
        return left + right.lstrip(" \t")
    return left + right


class DecontaminateStep(Step):
    """Pipeline step (module doc). The task files are read when the step is built, so a bad path or item fails
    then; the index is built once per process and never pickled (its hashes are salted per process)."""

    name = "decontaminate"

    def __init__(self, tasks: str | list[str], *, n: int = 13, cjk_n: int = 13, action: str = "drop",
                 choices: str = "gold", reject: Reject | None = None):
        super().__init__(reject)
        paths = [tasks] if isinstance(tasks, str) else tasks
        if not isinstance(paths, list) or not paths or not all(isinstance(p, str) and p for p in paths):
            raise ValueError(f"tasks: task files or directories of them (the files `bessemer eval` reads, "
                             f"docs/eval.md), got {tasks!r}")
        for key, value in (("n", n), ("cjk_n", cjk_n)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{key}: a whole number >= 1, got {value!r}")
        if action not in ACTIONS:
            raise ValueError(f"action: {action!r} is not one of {', '.join(ACTIONS)}")
        if choices not in CHOICES:
            raise ValueError(f"choices: {choices!r} is not one of {', '.join(CHOICES)}")
        self.paths, self.n, self.cjk_n, self.action, self.choices = paths, n, cjk_n, action, choices
        try:
            self.tasks = expand(paths)
            self._index: NGramIndex | None = load_index(self.tasks, n, cjk_n, choices)
        except BessemerError as e:
            raise ValueError(f"tasks: {e}") from None
        self.docs_hit: Counter[str] = Counter()  # documents with at least one hit, per benchmark
        self.ngram_hits: Counter[str] = Counter()  # hit windows, per benchmark
        self.chars_cut = 0

    @property
    def index(self) -> NGramIndex:
        if self._index is None:
            self._index = load_index(self.tasks, self.n, self.cjk_n, self.choices)
        return self._index

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_index": None}  # rebuilt where it is used: hashes are salted per process

    def run(self, docs: Iterable[Document], rank: int = 0, world_size: int = 1,
            reject: Reject | None = None) -> Iterator[Document]:
        index = self.index
        for doc in docs:
            self.docs_in += 1
            reason = self._decontaminate(doc, index.matches(doc.text), reject) if index.hit(doc.text) else None
            if reason is None:
                self.docs_out += 1
                yield doc
            else:
                self.reject(doc, reason, reject)

    def _decontaminate(self, doc: Document, matches: list[Match], callback: Reject | None) -> str | None:
        """Count the hits; drop (return the reason) or cut (return None with the text cut)."""
        if not matches:
            return None
        per_bench = Counter(m.benchmark for m in matches)
        self.ngram_hits.update(per_bench)
        self.docs_hit.update(per_bench.keys())
        order = {b.name: i for i, b in enumerate(self.index.benchmarks)}
        main = min(per_bench, key=lambda b: (-per_bench[b], order[b]))
        spans = _merge(doc.text, matches)
        if self.action == "cut":
            text, pieces, last = doc.text, [], 0
            for s, e, _ in spans:
                pieces.append(text[last:s])
                last = e
            pieces.append(text[last:])
            kept = pieces[0]
            for piece in pieces[1:]:
                kept = _join(kept, piece)
            if any(c.isalnum() for c in kept):
                for s, e, ms in spans:
                    first = ms[0]
                    self.cut(doc, s, e, first.benchmark, callback, benchmark=first.benchmark, item=first.item,
                             ngram=first.window.ngram)
                    self.chars_cut += e - s
                doc.text = kept
                doc.metadata["decontaminate"] = {"spans_cut": len(spans), "hits": dict(per_bench)}
                return None
        first = min((m for m in matches if m.benchmark == main), key=lambda m: m.window.start)
        doc.metadata["decontaminate"] = {"benchmark": main, "item": first.item, "ngram": first.window.ngram,
                                         "span": [first.window.start, first.window.end], "hits": dict(per_bench)}
        return main

    def stats(self) -> dict:
        return {**super().stats(),
                "benchmarks": {b.name: {"docs": self.docs_hit[b.name], "ngrams": self.ngram_hits[b.name]}
                               for b in self.index.benchmarks},
                "chars_cut": self.chars_cut,
                # strings: merged over shards by keeping the first (numbers would be summed)
                "index": {b.name: b.describe() for b in self.index.benchmarks},
                "settings": f"n = {self.n} words, cjk_n = {self.cjk_n} characters, choices = {self.choices}, "
                            f"action = {self.action}"}
