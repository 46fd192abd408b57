"""Semantic deduplication: drop documents that say the same thing as a better one, in other words.

After SemDeDup (Abbas et al. 2023, arXiv:2303.09540): embed every document, cluster the embeddings with
k-means, and within each cluster treat pairs whose cosine similarity is at least `threshold` (SemDeDup's
`1 - epsilon`) as duplicates. Clustering only bounds the cost: comparing all pairs inside clusters of
about sqrt(n) documents is O(n^1.5) instead of O(n^2). See docs/data-semantic.md.
"""

from collections import Counter
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from bessemer.data.dedup.semantic_cluster import (
    EXACT_MAX_DOCS,
    greedy_duplicates,
    kmeans,
    kmeans_fit,
)
from bessemer.data.document import Document
from bessemer.data.steps import Reject, Step

__all__ = ["EXACT_MAX_DOCS", "SemanticDedupStep", "greedy_duplicates", "kmeans", "kmeans_fit"]


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
    global_step = True  # with several shards the executor runs `run_global` over all of them

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
            from bessemer.data.dedup.embed import load_encoder

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
            gone, of, sim = greedy_duplicates(emb[members], self.threshold)  # best document first
            for g, o, v in zip(gone.tolist(), of.tolist(), sim.tolist()):
                dropped[members[g]] = (members[o], v)
        return dropped

    def stats(self) -> dict:
        return {**super().stats(), **dict(sorted(self.counts.items()))}

    def run_global(self, shard_paths: list[str], workdir: str, rejected_dir: str,
                   map_jobs: Callable[[Callable, list], list], sink_pii: dict | None = None) -> dict:
        """The global-step protocol (bessemer/data/phases.py) over the JSONL shards `shard_paths`: embeddings
        per shard, k-means on a sample of the corpus, every document assigned, duplicates removed inside each
        cluster across shards (bessemer.data.dedup.semantic_stages). Resumable."""
        from bessemer.data.dedup.semantic_stages import run_semantic_stages

        r = run_semantic_stages(shard_paths, workdir, threshold=self.threshold, max_tokens=self.max_tokens,
                                clusters=self.clusters, seed=self.seed, score_key=self.score_key,
                                batch_size=self.batch_size, rejected_dir=rejected_dir, map_jobs=map_jobs,
                                sink_pii=sink_pii)
        return {"outputs": r["outputs"], "docs_in": r["docs"], "docs_out": r["docs"] - r["removed"],
                "rejected": r["rejected"], "extra": {"embedded": r["embedded"], "clusters": r["clusters"]}}
