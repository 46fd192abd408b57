"""The base class of data steps that can drop documents, and the rejection protocol.

Rejection protocol (what a pipeline executor can rely on):

- `step.run(docs, rank=0, world_size=1, reject=None)` is a generator. It yields the documents it keeps,
  possibly with rewritten text; a document it drops is never yielded.
- A dropped document gets `doc.metadata["reason"]`, a namespaced string `<step>.<filter>.<rule>`
  (`quality.gopher.too_few_words`, `normalize.empty`), and is passed to `reject(doc)` at the moment it is
  dropped, before the next document is read. Its text is the text the failing rule judged (a quality
  step's boilerplate lines already removed), so the exclusion sink shows what was judged.
- `reject` given to `run` wins over the one given to the constructor. With neither, rejected documents
  are appended to `step.rejected`: fine for tests and small runs; an executor should pass a callback
  (writing to the exclusion sink) so nothing accumulates in memory.
- `step.stats()` is a JSON-ready dict with at least `docs_in`, `docs_out` and `rejected` (count per reason);
  counters accumulate across `run` calls on the same instance.
"""

from collections import Counter
from collections.abc import Callable, Iterable, Iterator

from bessemer.data.document import Document

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

    def process(self, doc: Document) -> str | None:
        raise NotImplementedError

    def reject(self, doc: Document, reason: str, callback: Reject | None = None) -> None:
        """Mark `doc` rejected with `name.reason`, count it and hand it to the callback (or `self.rejected`)."""
        doc.metadata["reason"] = f"{self.name}.{reason}"
        self.rejected_by_reason[doc.metadata["reason"]] += 1
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
        return {
            "docs_in": self.docs_in,
            "docs_out": self.docs_out,
            "rejected": dict(sorted(self.rejected_by_reason.items())),
        }
