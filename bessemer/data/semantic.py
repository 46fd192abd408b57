"""Semantic deduplication: drop documents that say the same thing as a better one, in other words.

After SemDeDup (Abbas et al. 2023, arXiv:2303.09540): embed every document, cluster the embeddings with
k-means, and within each cluster treat pairs whose cosine similarity is at least `threshold` (SemDeDup's
`1 - epsilon`) as duplicates. Clustering only bounds the cost: comparing all pairs inside clusters of
about sqrt(n) documents is O(n^1.5) instead of O(n^2). See docs/data-semantic.md.
"""

from collections import Counter
from collections.abc import Iterable, Iterator

import numpy as np

from bessemer.data.document import Document
from bessemer.data.step import Reject, Step

EXACT_MAX_DOCS = 4096  # up to this many documents: one cluster, every pair compared, no k-means


def kmeans(x: np.ndarray, k: int, seed: int = 0, iters: int = 20) -> np.ndarray:
    """Spherical k-means on L2-normalized rows (assignment by largest dot product), k-means++ init.

    Returns the cluster of each row. Deterministic for a given `x`, `k` and `seed`.
    """
    n = len(x)
    k = max(1, min(k, n))
    rng = np.random.default_rng(seed)
    centers = np.empty((k, x.shape[1]), dtype=np.float32)
    centers[0] = x[rng.integers(n)]
    dist = 1.0 - x @ centers[0]  # cosine distance to the nearest chosen center
    for c in range(1, k):
        d = np.maximum(dist, 0.0)
        total = float(d.sum())
        pick = rng.choice(n, p=d / total) if total > 0 else rng.integers(n)
        centers[c] = x[pick]
        dist = np.minimum(dist, 1.0 - x @ centers[c])
    labels = np.full(n, -1)
    for _ in range(iters):
        new = np.argmax(x @ centers.T, axis=1)
        if np.array_equal(new, labels):
            break
        labels = new
        for c in range(k):
            members = x[labels == c]
            if len(members):  # an empty cluster keeps its old center
                s = members.sum(0)
                centers[c] = s / max(float(np.linalg.norm(s)), 1e-12)
    return labels


class SemanticDedupStep(Step):
    """Whole-stream step: buffers the documents of a `run` (one shard), embeds the first `max_tokens`
    tokens of each, and at the end yields the kept ones in their input order and rejects the rest
    `semantic-dedup.semantic_duplicate` with `metadata["duplicate_of"]` (the kept document's id) and
    `metadata["similarity"]` (their cosine).

    Which one of a group is kept: the highest `metadata[score_key]` (a quality score, higher is better;
    missing counts as lowest; `score_key=None` ignores scores, as in `dedup`), then the longest text, then
    the smallest id. Walking the documents of a cluster in that order, a document is dropped when its cosine
    with an already *kept* one is at least `threshold`, so `duplicate_of` always names a survivor.

    threshold: 0.8 cosine (SemDeDup's epsilon = 0.2). On our paraphrase set all-MiniLM-L6-v2 puts
        paraphrases at 0.74-0.94 and same-topic-different-claim texts at 0.27-0.74, so 0.8 removes 83% of
        the paraphrases with no false positive and keeps a 0.05 margin above the closest non-duplicate.
        SemDeDup's 1 - epsilon of 0.93-0.99 was for OPT-125M embeddings, whose cosines are not on the
        same scale; see docs/data-semantic.md. `None` turns the step off (every document kept, nothing
        embedded).
    max_tokens: tokens embedded per document (the model's own limit is 256; 512 positions exist).
    clusters: k for k-means; `None` = round(sqrt(n)); with n <= 4096 documents all pairs are compared.
    """

    name = "semantic-dedup"

    def __init__(
        self,
        threshold: float | None = 0.8,
        max_tokens: int = 256,
        clusters: int | None = None,
        seed: int = 0,
        score_key: str | None = "quality_score",
        batch_size: int = 32,
        reject: Reject | None = None,
    ):
        super().__init__(reject)
        if threshold is not None and not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold={threshold}; valid: a cosine in (0, 1], or None to turn the step off")
        if clusters is not None and clusters < 1:
            raise ValueError(f"clusters={clusters}; valid: >= 1, or None for sqrt(n)")
        self.threshold = threshold
        self.max_tokens = max_tokens
        self.clusters = clusters
        self.seed = seed
        self.score_key = score_key
        self.batch_size = batch_size
        self._encoder = None
        self.counts: Counter[str] = Counter()

    @property
    def encoder(self):
        if self._encoder is None:
            from bessemer.data.embed import load_encoder

            self._encoder = load_encoder(self.max_tokens)
        return self._encoder

    def run(
        self, docs: Iterable[Document], rank: int = 0, world_size: int = 1, reject: Reject | None = None
    ) -> Iterator[Document]:
        if self.threshold is None:
            for doc in docs:
                self.docs_in += 1
                self.docs_out += 1
                yield doc
            return
        buffered: list[Document] = []
        chunks: list[np.ndarray] = []
        pending: list[str] = []
        for doc in docs:
            self.docs_in += 1
            buffered.append(doc)
            pending.append(doc.text)
            if len(pending) >= 1024:  # embed as we read: token lists exist for one chunk, not the whole shard
                chunks.append(self.encoder.encode(pending, self.batch_size))
                pending = []
        if pending:
            chunks.append(self.encoder.encode(pending, self.batch_size))
        if not buffered:
            return
        emb = np.concatenate(chunks)  # (n, 384)
        self.counts["embedded"] += len(buffered)

        dropped = self.find_duplicates(buffered, emb)
        for i, doc in enumerate(buffered):
            if i in dropped:
                j, sim = dropped[i]
                doc.metadata["duplicate_of"] = buffered[j].id
                doc.metadata["similarity"] = round(sim, 4)
                self.reject(doc, "semantic_duplicate", reject)
            else:
                self.docs_out += 1
                yield doc

    def find_duplicates(self, docs: list[Document], emb: np.ndarray) -> dict[int, tuple[int, float]]:
        """{index of a dropped document: (index of the kept document it duplicates, cosine)}."""
        n = len(docs)
        if n <= EXACT_MAX_DOCS and self.clusters is None:
            labels = np.zeros(n, dtype=np.int64)
        else:
            k = self.clusters or max(1, round(np.sqrt(n)))
            labels = kmeans(emb, k, seed=self.seed)
        self.counts["clusters"] += len(np.unique(labels))

        def priority(i: int) -> tuple:
            score = docs[i].metadata.get(self.score_key) if self.score_key else None
            score = float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else -np.inf
            return (-score, -len(docs[i].text), docs[i].id, i)

        dropped: dict[int, tuple[int, float]] = {}
        for c in np.unique(labels):
            members = sorted(np.flatnonzero(labels == c).tolist(), key=priority)
            e = emb[members]  # (m, C), best document first
            kept = np.zeros(len(members), dtype=bool)
            for b0 in range(0, len(members), 1024):  # rows in blocks: a 1024 x m block, never m x m
                b1 = min(b0 + 1024, len(members))
                sims = e[b0:b1] @ e[:b1].T  # (rows, b1): each row against every better document
                for pos in range(b0, b1):
                    row = np.where(kept[:pos], sims[pos - b0, :pos], -np.inf)
                    best = int(np.argmax(row)) if pos else 0
                    if pos and row[best] >= self.threshold:
                        dropped[members[pos]] = (members[best], float(row[best]))
                    else:
                        kept[pos] = True
        return dropped

    def stats(self) -> dict:
        return {**super().stats(), **dict(sorted(self.counts.items()))}
