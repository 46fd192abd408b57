"""The `dedup` pipeline step: exact + MinHash near-duplicate removal (docs/data-dedup.md).

Exact: two documents are exact duplicates when their *normalized* text (NFKC, lowercased, punctuation and
symbols removed, whitespace folded) has the same xxh3_128. Near: MinHash over word 5-grams (CJK: character
5-grams), `num_bands` x `rows_per_band` permutations; documents whose hash of some band is equal are a
candidate pair, kept when their estimated Jaccard is >= `threshold`; clusters are the connected components
of exact groups and kept pairs. Each cluster keeps one member: highest `metadata[score_key]`, then longest
text, then smallest id. The others are rejected `dedup.exact_duplicate` (same normalized text as the kept
one) or `dedup.near_duplicate`, with `metadata["duplicate_of"]` = the kept document's id.

`DedupStep` must see the whole stream (it yields only after the last document). It is a *global step*: in a
pipeline with several shards the executor calls `run_global`, which runs the file-based stages of
`bessemer.data.dedup.stages` over all shards (the same answer as the step over the concatenated stream).
"""

from collections.abc import Callable, Iterable, Iterator

import numpy as np

from bessemer.data.dedup import graph
from bessemer.data.dedup.minhash import (
    DedupConfig,
    DocArrays,
    MinHashConfig,
    estimated_jaccard,
)
from bessemer.data.document import Document
from bessemer.data.steps import Reject, Step


def find_duplicates(a: DocArrays, cfg: DedupConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Everything after the signatures, in memory: (removed rows, keeper rows, reason codes, kept pairs)."""
    n = len(a.ids)
    exact, near = cfg.exact, cfg.near
    rows = np.arange(n, dtype=np.int64)
    edges = []
    if exact:
        order = np.lexsort((rows, a.exact_lo, a.exact_hi))
        edges.append(graph.exact_pairs(a.exact_hi[order], a.exact_lo[order], rows[order]))
    n_pairs = 0
    if near:
        live = rows[a.has_shingles]
        tag = (a.exact_lo[live] & np.uint64(0xFFFFFFFF)).astype(np.uint32) if exact else None
        for b in range(cfg.num_bands):
            order = np.argsort(a.bands[live, b], kind="stable")  # stable: rows stay ascending within a bucket
            pairs = graph.candidate_pairs(a.bands[live, b][order], live[order],
                                          None if tag is None else tag[order])
            if cfg.threshold is not None and len(pairs):
                pairs = pairs[estimated_jaccard(a.sig, pairs) >= cfg.threshold - 1e-9]
            n_pairs += len(pairs)
            edges.append(pairs)
    edges = np.concatenate(edges) if edges else np.empty((0, 2), np.int64)
    nodes = np.unique(edges)
    removed, keeper, reason = graph.cluster(edges, nodes, a.score[nodes], a.length[nodes],
                                            np.asarray(a.ids, dtype=object)[nodes].astype(str),
                                            a.exact_hi[nodes], a.exact_lo[nodes], exact)
    return removed, keeper, reason, n_pairs


class DedupStep(Step):
    """Exact + MinHash near-duplicate removal over the whole stream it is given (module docstring).

    Holds every document until the stream ends, then yields the kept ones in input order; memory grows with
    the stream, so for a corpus the executor runs `run_global`. `exact=False` turns exact grouping off (only
    near-duplicates are found, exact copies still land in the same LSH buckets); `near=False` leaves exact
    dedup only. `score_key=None` ignores quality scores.
    """

    name = "dedup"
    global_step = True  # the executor runs `run_global` over all shards (phases: bessemer/data/phases.py)

    def __init__(self, *, exact: bool = True, near: bool = True, num_bands: int = MinHashConfig.num_bands,
                 rows_per_band: int = MinHashConfig.rows_per_band,
                 ngram: int = 5, threshold: float | None = 0.6, seed: int = 1,
                 score_key: str | None = "quality_score", batch_docs: int = 512, reject: Reject | None = None):
        super().__init__(reject)
        self.cfg = DedupConfig(num_bands, rows_per_band, ngram, threshold, seed, exact, near, score_key)
        self.cfg.validate()
        self.batch_docs = batch_docs
        self._perms = self.cfg.permutations()
        self.candidate_pairs = 0

    def run(self, docs: Iterable[Document], rank: int = 0, world_size: int = 1,
            reject: Reject | None = None) -> Iterator[Document]:
        held: list[Document] = []
        parts, batch = [], []
        for doc in docs:
            self.docs_in += 1
            batch.append(doc)
            if len(batch) >= self.batch_docs:
                parts.append(DocArrays.of(batch, self.cfg, self._perms, self.cfg.score_key, self.cfg.near))
                held += batch
                batch = []
        if batch:
            parts.append(DocArrays.of(batch, self.cfg, self._perms, self.cfg.score_key, self.cfg.near))
            held += batch
        a = DocArrays.concat(parts, self.cfg)
        removed, keeper, reason, n_pairs = find_duplicates(a, self.cfg)
        self.candidate_pairs += n_pairs
        gone = dict(zip(removed.tolist(), zip(keeper.tolist(), reason.tolist())))
        for i, doc in enumerate(held):
            if i in gone:
                k, r = gone[i]
                doc.metadata["duplicate_of"] = held[k].id
                self.reject(doc, graph.REASONS[r], reject)
            else:
                self.docs_out += 1
                yield doc

    def stats(self) -> dict:
        return {**super().stats(), "candidate_pairs": self.candidate_pairs}

    def run_global(self, shard_paths: list[str], workdir: str, rejected_dir: str,
                   map_jobs: Callable[[Callable, list], list], sink_pii: dict | None = None) -> dict:
        """The global-step protocol (bessemer/data/phases.py): dedup the JSONL shards `shard_paths` together,
        writing shard i's kept documents to `<workdir>/output/<i>.jsonl.zst` and its rejected ones to
        `rejected_dir` (redacted by the pii step `sink_pii` when given: bessemer/data/sink.py); resumable.
        Returns {"outputs", "docs_in", "docs_out", "rejected" (count per reason), "extra"}."""
        from bessemer.data.dedup.stages import run_dedup_stages

        r = run_dedup_stages(shard_paths, workdir, self.cfg, rejected_dir=rejected_dir, map_jobs=map_jobs,
                             sink_pii=sink_pii)
        return {"outputs": r["outputs"], "docs_in": r["docs"], "docs_out": r["docs"] - r["removed"],
                "rejected": r["rejected"], "extra": {"candidate_pairs": r["pairs"]}}
