"""End-to-end near-duplicate throughput, one process on one core: our `DedupStep` against a datasketch pipeline
and a rensa pipeline on the same generated corpus (`bessemer.data.dedup.synthetic`: clusters of edited copies, hard
negatives sharing 40-60% of a cluster's text, unrelated singletons), with the same parameters: word 5-gram
shingles of the normalized text, 112 permutations, LSH with 16 bands x 7 rows, candidates verified at
estimated Jaccard >= 0.6, clusters by union-find.

- ours: `DedupStep(exact=True, score_key=None)` (exact grouping on; the corpus has no exact copies, so it only
  costs the hashing), numpy-vectorized MinHash.
- datasketch: `MinHash(num_perm=112).update_batch(shingles)` per document, `MinHashLSH(num_perm=112,
  params=(14, 8))` insert then query per document, `MinHash.jaccard` on each candidate pair.
- rensa: `RMinHash(112, seed).update(shingles)` per document, `RMinHashLSH(0.6, 112, 16)` insert then query,
  `RMinHash.jaccard` on each candidate pair.

The other two get the same shingle strings (`shingle_strings(normalize_text(text))`); building them is inside
their timing, as shingling is inside ours. Each pipeline is timed end to end (text in, clusters out), best of
3. Per-line results: docs/s and the pairwise precision/recall against the known clusters. Ends with
`ratio dedup_vs_datasketch X` and `ratio dedup_vs_rensa Y` (our docs/s / theirs; > 1 means ours is faster).
"""

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bessemer.data.dedup.lexical import DedupStep
from bessemer.data.dedup.minhash import normalize_text, shingle_strings
from bessemer.data.dedup.synthetic import corpus, precision_recall
from bessemer.data.document import Document

NUM_BANDS, ROWS, NGRAM, THRESHOLD = 16, 7, 5, 0.6
NUM_PERM = NUM_BANDS * ROWS


def ours(docs: list[Document]) -> list[int]:
    step = DedupStep(exact=True, num_bands=NUM_BANDS, rows_per_band=ROWS, ngram=NGRAM, threshold=THRESHOLD,
                     score_key=None)
    list(step.run(docs))
    row = {d.id: i for i, d in enumerate(docs)}
    out = list(range(len(docs)))
    for d in step.rejected:
        out[row[d.id]] = row[d.metadata["duplicate_of"]]
    return out


def _shingles(doc: Document) -> list[str]:
    return shingle_strings(normalize_text(doc.text), NGRAM)


class UnionFind:
    """A plain union-find for the reference pipelines (ours clusters in numpy: bessemer/data/dedup/graph.py)."""

    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        parent = self.parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(self, x: int, y: int) -> None:
        rx, ry = self.find(x), self.find(y)
        if rx != ry:
            self.parent[max(rx, ry)] = min(rx, ry)

    def roots(self) -> list[int]:
        return [self.find(i) for i in range(len(self.parent))]


def _cluster(n: int, candidates: Callable[[int], list[int]], similar: Callable[[int, int], bool]) -> list[int]:
    uf = UnionFind(n)
    for i in range(n):
        for j in candidates(i):
            if j > i and similar(i, j):
                uf.union(i, j)
    return uf.roots()


def datasketch_pipeline(docs: list[Document]) -> list[int]:
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(num_perm=NUM_PERM, params=(NUM_BANDS, ROWS))
    mh = []
    for i, d in enumerate(docs):
        m = MinHash(num_perm=NUM_PERM, seed=1)
        m.update_batch([s.encode("utf-8", "surrogatepass") for s in _shingles(d)])
        lsh.insert(i, m)
        mh.append(m)
    return _cluster(len(docs), lambda i: lsh.query(mh[i]), lambda i, j: mh[i].jaccard(mh[j]) >= THRESHOLD)


def rensa_pipeline(docs: list[Document]) -> list[int]:
    from rensa import RMinHash, RMinHashLSH

    lsh = RMinHashLSH(THRESHOLD, NUM_PERM, NUM_BANDS)
    mh = []
    for i, d in enumerate(docs):
        m = RMinHash(NUM_PERM, 1)
        m.update(_shingles(d))
        lsh.insert(i, m)
        mh.append(m)
    return _cluster(len(docs), lambda i: lsh.query(mh[i]), lambda i, j: mh[i].jaccard(mh[j]) >= THRESHOLD)


def best_of(fn: Callable[[list[Document]], list[int]], docs: list[Document], repeats: int) -> tuple[float, list[int]]:
    best, result = float("inf"), []
    for _ in range(repeats):
        fresh = [Document(d.id, d.text) for d in docs]  # the step writes metadata on rejects
        t0 = time.perf_counter()
        result = fn(fresh)
        best = min(best, time.perf_counter() - t0)
    return best, result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clusters", type=int, default=400)
    p.add_argument("--hard", type=int, default=400)
    p.add_argument("--singles", type=int, default=800)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    docs, labels = corpus(n_clusters=args.clusters, n_hard=args.hard, n_single=args.singles, seed=args.seed)
    words = [len(d.text.split()) for d in docs]
    print(f"corpus: {len(docs):,} docs ({args.clusters} clusters of 3-6, {args.hard} hard negatives, "
          f"{args.singles} singletons), {min(words)}-{max(words)} words (mean {sum(words) / len(words):.0f}); "
          f"112 perms = 16 bands x 7 rows, word 5-grams, verify >= 0.6; best of {args.repeats}, 1 process")
    rate = {}
    for name, fn in (("dedup (ours, exact on)", ours), ("datasketch", datasketch_pipeline),
                     ("rensa", rensa_pipeline)):
        seconds, clusters = best_of(fn, docs, args.repeats)
        precision, recall = precision_recall(labels, clusters)
        rate[name.split()[0]] = len(docs) / seconds
        print(f"{name:24s} {seconds:7.3f} s  {len(docs) / seconds:9,.0f} docs/s/core  "
              f"precision {precision:.3f}  recall {recall:.3f}")
    print("ratio = our docs/s / their docs/s (> 1: ours is faster)")
    print(f"ratio dedup_vs_datasketch {rate['dedup'] / rate['datasketch']:.3f}")
    print(f"ratio dedup_vs_rensa {rate['dedup'] / rate['rensa']:.3f}")


if __name__ == "__main__":
    main()
