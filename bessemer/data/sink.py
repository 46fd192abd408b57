"""The exclusion sink: rejected documents with their reason, one JSONL .zst file per shard.

No raw personal data at rest: when the pipeline has a `pii` step, a document rejected before it (by the
reader, normalize, quality, dedup ...) has not been redacted yet, so the sink runs that step's detectors, with
its action, types and salt, on the document before writing it (`metadata["pii"]` says what was found), and on
the reader's preview of a record it could not read (`metadata["raw"]`, the repr of its first bytes: non-ASCII
text there is escaped, so only emails, phones and other ASCII-shaped values are found in it). A
document rejected after the pii step already carries `metadata["pii"]` and is written as it is. With
`action = "tag"` the text stays as it was, as it does in the output; a pipeline without a pii step writes
rejected documents unchanged.
"""

from typing import Self

from bessemer.data.document import Document
from bessemer.data.steps import build_step
from bessemer.data.writers import JsonlWriter


class Sink:
    """A JsonlWriter at `path` that redacts with the pii step `pii` (its [[steps]] table) when given."""

    def __init__(self, path: str, pii: dict | None = None):
        self._pii = build_step(pii, "steps (pii)") if pii else None
        self._writer = JsonlWriter(path)

    @property
    def count(self) -> int:
        return self._writer.count

    def write(self, doc: Document) -> None:
        if self._pii is not None and "pii" not in doc.metadata:
            self._pii.redact(doc)
            if isinstance(doc.metadata.get("raw"), str):  # a reader's preview of a record it could not read
                doc.metadata["raw"] = self._pii.redact_text(doc.metadata["raw"])
        self._writer.write(doc)

    def close(self) -> None:
        self._writer.close()

    def abort(self) -> None:
        self._writer.abort()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._writer.__exit__(exc_type, exc, tb)
