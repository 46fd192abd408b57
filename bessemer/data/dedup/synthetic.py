"""A generated near-duplicate corpus with known clusters, for the dedup tests and bench/dedup_throughput.py.

Each cluster is a base document plus variants: 5-10% of the base's words edited (substituted, inserted or
deleted) in runs of 6-16 words, the way a re-post changes a phrase or a sentence here and there. (Edits
scattered one word at a time destroy up to 5 word 5-grams each: 10% of words edited that way leaves pair
Jaccard near 0.4, below what the 16x7 LSH is built to find.) Hard negatives
copy 40-60% of a cluster's base (whole sentences, in a row) and fill the rest with new text: related
documents that are not duplicates. Singletons are unrelated documents.
"""

import random
from itertools import combinations

from bessemer.data.document import Document

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _vocab(rng: random.Random, n: int = 8000) -> list[str]:
    return ["".join(rng.choice(_LETTERS) for _ in range(rng.randint(2, 9))) for _ in range(n)]


def _sentence(rng: random.Random, vocab: list[str]) -> list[str]:
    # Zipf-like word choice, so common words repeat as in real text.
    return [vocab[min(int(rng.paretovariate(0.9)) - 1, len(vocab) - 1)] if rng.random() < 0.5
            else rng.choice(vocab) for _ in range(rng.randint(8, 20))]


def _text(sentences: list[list[str]]) -> str:
    return " ".join(" ".join(s).capitalize() + "." for s in sentences)


def _edit(rng: random.Random, words: list[str], vocab: list[str], rate: float,
          run_words: tuple[int, int]) -> list[str]:
    words = list(words)
    budget = int(len(words) * rate)
    while budget > 0:
        run = min(budget, rng.randint(*run_words))
        at = rng.randrange(len(words))
        op = rng.random()
        if op < 0.6:
            words[at : at + run] = [rng.choice(vocab) for _ in range(run)]
        elif op < 0.8:
            words[at:at] = [rng.choice(vocab) for _ in range(run)]
        else:
            del words[at : at + run]
        budget -= run
    return words


def corpus(n_clusters: int = 40, variants: tuple[int, int] = (2, 5), n_hard: int = 40, n_single: int = 100,
           edit: tuple[float, float] = (0.05, 0.10), run_words: tuple[int, int] = (6, 16),
           seed: int = 0) -> tuple[list[Document], list[int]]:
    """(documents, cluster label per document); unrelated documents and hard negatives have unique labels.
    The documents are shuffled."""
    rng = random.Random(seed)
    vocab = _vocab(rng)
    docs: list[tuple[str, int]] = []
    bases = []
    for c in range(n_clusters):
        base = [_sentence(rng, vocab) for _ in range(rng.randint(12, 30))]
        bases.append(base)
        docs.append((_text(base), c))
        words = [w for s in base for w in s]
        for _ in range(rng.randint(*variants)):
            edited = _edit(rng, words, vocab, rng.uniform(*edit), run_words)
            docs.append((" ".join(edited).capitalize() + ".", c))
    label = n_clusters
    for _ in range(n_hard):
        base = bases[rng.randrange(n_clusters)]
        share = rng.uniform(0.4, 0.6)
        k = max(1, round(len(base) * share))
        start = rng.randrange(len(base) - k + 1)
        new = [_sentence(rng, vocab) for _ in range(len(base) - k)]
        cut = rng.randint(0, len(new))
        docs.append((_text(new[:cut] + base[start : start + k] + new[cut:]), label))
        label += 1
    for _ in range(n_single):
        docs.append((_text([_sentence(rng, vocab) for _ in range(rng.randint(12, 30))]), label))
        label += 1
    rng.shuffle(docs)
    return [Document(f"doc-{i:05d}", t) for i, (t, _) in enumerate(docs)], [c for _, c in docs]


def true_pairs(labels: list[int]) -> set[tuple[int, int]]:
    by: dict[int, list[int]] = {}
    for i, c in enumerate(labels):
        by.setdefault(c, []).append(i)
    return {p for m in by.values() for p in combinations(m, 2)}


def predicted_pairs(cluster_of: list[int]) -> set[tuple[int, int]]:
    return true_pairs(cluster_of)


def precision_recall(labels: list[int], cluster_of: list[int]) -> tuple[float, float]:
    """Pairwise precision and recall of a clustering (`cluster_of[i]` = any id of row i's cluster)."""
    truth, pred = true_pairs(labels), predicted_pairs(cluster_of)
    hit = len(truth & pred)
    return hit / max(len(pred), 1), hit / max(len(truth), 1)
