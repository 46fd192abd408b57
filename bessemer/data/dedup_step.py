"""The dedup step: exact + MinHash near-duplicate removal as a pipeline step (maths in dedup.py; the
file-based global stages that run it over a whole corpus in dedup_stages.py)."""

from collections.abc import Callable, Iterable, Iterator

import numpy as np

from bessemer.data.dedup import MinHashConfig, Signatures, find_duplicates
from bessemer.data.dedup_stages import run_dedup_stages
from bessemer.data.document import Document
from bessemer.data.step import Reject, Step


class DedupStep(Step):
    """Exact + MinHash near-duplicate removal over the whole stream it is given (module docstring).

    Holds every document until the stream ends, then yields the kept ones in input order; memory grows with
    the stream, so for a corpus use `run_dedup_stages`. `exact=False` turns exact grouping off (only
    near-duplicates are found, exact copies still land in the same LSH buckets); `near=False` leaves exact
    dedup only. `score_key=None` ignores quality scores.
    """

    name = "dedup"
    global_step = True  # the executor runs `run_global` over all shards (phases: bessemer/data/phases.py)

    def __init__(self, *, exact: bool = True, near: bool = True, num_bands: int = 14, rows_per_band: int = 8,
                 ngram: int = 5, threshold: float | None = 0.6, seed: int = 1,
                 score_key: str | None = "quality_score", batch_docs: int = 512, reject: Reject | None = None):
        super().__init__(reject)
        if not (exact or near):
            raise ValueError("dedup: exact and near are both off; turn on at least one")
        self.cfg = MinHashConfig(num_bands, rows_per_band, ngram, threshold, seed)
        self.cfg.validate()
        self.exact, self.near, self.score_key, self.batch_docs = exact, near, score_key, batch_docs
        self._perms = self.cfg.permutations()
        self.candidate_pairs = 0

    def signatures(self, docs: list[Document]) -> Signatures:
        s = Signatures.of(docs, self.cfg, self._perms, self.score_key, self.near)
        if not self.exact:  # every row its own exact group
            s.exact = np.arange(len(docs), dtype=np.uint64) + np.uint64(len(self._held))
        return s

    def run(self, docs: Iterable[Document], rank: int = 0, world_size: int = 1,
            reject: Reject | None = None) -> Iterator[Document]:
        self._held: list[Document] = []
        parts, batch = [], []
        for doc in docs:
            self.docs_in += 1
            batch.append(doc)
            if len(batch) >= self.batch_docs:
                parts.append(self.signatures(batch))
                self._held += batch
                batch = []
        if batch:
            parts.append(self.signatures(batch))
            self._held += batch
        s = Signatures.concat(parts, self.cfg.num_perm)
        removed, n_pairs = find_duplicates(s.exact, s.sig, s.score, s.length, s.ids, self.cfg, self.near)
        self.candidate_pairs += n_pairs
        held, self._held = self._held, []
        for i, doc in enumerate(held):
            if i in removed:
                reason, of = removed[i]
                doc.metadata["duplicate_of"] = of
                self.reject(doc, reason, reject)
            else:
                self.docs_out += 1
                yield doc

    def stats(self) -> dict:
        return {**super().stats(), "candidate_pairs": self.candidate_pairs}

    def run_global(self, shard_paths: list[str], workdir: str, rejected_dir: str,
                   map_jobs: Callable[[Callable, list], None], sink_pii: dict | None = None) -> dict:
        """The global-step protocol (bessemer/data/phases.py): dedup the JSONL shards `shard_paths` together,
        writing shard i's kept documents to `outputs[i]` and its rejected ones to `rejected_dir` (redacted by
        the pii step `sink_pii` when given: bessemer/data/sink.py); resumable.
        Returns {"outputs", "docs_in", "docs_out", "rejected" (count per reason), "extra"}."""
        c = self.cfg
        r = run_dedup_stages(shard_paths, workdir, num_bands=c.num_bands, rows_per_band=c.rows_per_band,
                             ngram=c.ngram, threshold=c.threshold, seed=c.seed, score_key=self.score_key,
                             exact=self.exact, near=self.near, rejected_dir=rejected_dir, map_jobs=map_jobs,
                             sink_pii=sink_pii)
        return {"outputs": [f"{workdir.rstrip('/')}/output/{i:05d}.jsonl.zst" for i in range(len(shard_paths))],
                "docs_in": r["docs"], "docs_out": r["docs"] - r["removed"], "rejected": r["rejected"],
                "extra": {"candidate_pairs": r["pairs"]}}
