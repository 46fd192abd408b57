"""The unit every data step reads and yields, and how a rejected one is marked."""

from dataclasses import dataclass, field
from typing import Any

REASON = "reason"  # metadata key of a rejected document's namespaced reason
CUT_FROM = "cut_from"  # metadata key of a part cut out of a kept document: that document's id


@dataclass
class Document:
    id: str
    text: str
    metadata: dict = field(default_factory=dict)


def mark_rejected(doc: Document, reason: str, **detail: Any) -> Document:
    """Mark `doc` as rejected with a namespaced reason (`quality.gopher.too_few_words`); `detail` (e.g. the
    value that failed) is stored in its metadata too. Steps reject through `Step.reject` (bessemer/data/steps.py);
    the readers mark the records they cannot read, and the executor sends those to the exclusion sink."""
    assert "." in reason, f"reasons are namespaced (input.invalid_json), got {reason!r}"
    doc.metadata[REASON] = reason
    doc.metadata.update(detail)
    return doc
