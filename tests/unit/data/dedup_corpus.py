"""The dedup tests' corpus generator lives in `bessemer.data.synthetic` (the bench uses it too)."""

from bessemer.data.synthetic import (
    corpus,
    precision_recall,
    predicted_pairs,
    true_pairs,
)

__all__ = ["corpus", "precision_recall", "predicted_pairs", "true_pairs"]
