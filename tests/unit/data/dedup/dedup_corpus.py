"""Helpers of the dedup tests. The corpus generator lives in `bessemer.data.dedup.synthetic` (the bench uses it too)."""

from pathlib import Path

from bessemer.data.dedup.synthetic import (
    corpus,
    precision_recall,
    predicted_pairs,
    true_pairs,
)
from bessemer.data.document import Document
from bessemer.data.writers import JsonlWriter

__all__ = ["corpus", "precision_recall", "predicted_pairs", "true_pairs", "write_shards"]


def write_shards(root: Path, docs: list[Document], n: int) -> list[str]:
    """`docs` dealt round-robin into n JSONL.zst shards under `root` (copies: the documents stay as they are)."""
    paths = []
    for i in range(n):
        p = str(root / f"part-{i}.jsonl.zst")
        with JsonlWriter(p) as w:
            for d in docs[i::n]:
                w.write(Document(d.id, d.text, dict(d.metadata)))
        paths.append(p)
    return paths
