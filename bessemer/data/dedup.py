"""Exact and near-duplicate removal: the `DedupStep` pipeline step and the MinHash/LSH pieces it is made of.

Exact: two documents are exact duplicates when their *normalized* text (NFKC, lowercased, punctuation and
symbols removed, whitespace folded) has the same xxhash64.

Near: MinHash over shingles of the normalized text (word 5-grams; CJK text: character 5-grams; mixed text:
both), `num_bands` x `rows_per_band` permutations (14 x 8 = 112 by default). Two documents become a
candidate pair when all rows of one band agree; a candidate pair is kept when the signatures' estimated
Jaccard is >= `threshold`; clusters are the connected components of exact groups and kept pairs
(union-find). Each cluster keeps one member: highest `metadata[score_key]`, then longest text, then
smallest id. The others are rejected `dedup.exact_duplicate` (same normalized text as the kept one) or
`dedup.near_duplicate`, with `metadata["duplicate_of"]` = the kept document's id.

`DedupStep` must see the whole stream (it yields only after the last document). It is a *global step*
(`global_step = True`): in a pipeline with several shards the executor does not run it per shard but
calls `run_global`, which dedups across all shards with `bessemer.data.dedup_stages.run_dedup_stages`
(four resumable stages, the same answer as the step over the concatenated stream; docs/data-cli.md,
"Global steps"). With one shard the step runs in the shard, as any other. Algorithm, parameters and measured numbers: docs/data-dedup.md.
"""

import math
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import numpy as np
import xxhash

from bessemer.data.document import Document
from bessemer.data.script import CJK

MERSENNE = np.uint64((1 << 61) - 1)
EMPTY = np.uint64(np.iinfo(np.uint64).max)  # signature of a document without shingles; never a real value
_NONWORD = re.compile(r"[\W_]+")
# Rows of the (shingles, permutations) matrix hashed at once: 1024 x 112 x 8 B = 896 KiB, so the temporaries
# stay in a core's L2. At 8192 (7 MiB) the same signatures took 2.7x longer (bench/dedup_throughput.py).
_SHINGLES_PER_CHUNK = 1024


@dataclass(frozen=True)
class MinHashConfig:
    num_bands: int = 14
    """LSH bands. With `rows_per_band` r, a pair with Jaccard s is a candidate with probability
    1 - (1 - s^r)^b (b=14, r=8: 0.05 at s=0.5, 0.56 at s=0.7, 0.92 at s=0.8)."""
    rows_per_band: int = 8
    """Permutations per band; num_bands * rows_per_band permutations in all."""
    ngram: int = 5
    """Shingle length: words for non-CJK text, characters for CJK text."""
    threshold: float | None = 0.6
    """Keep a candidate pair only if the signatures agree on >= this fraction of permutations (estimated
    Jaccard); None keeps every candidate pair. 0.6 is ~2 standard errors of the estimate (0.044 at s=0.68,
    112 permutations) below the 14x8 S-curve's 50% point (s=0.68): it drops pairs that met in one band by
    chance far below the curve and leaves the pairs the curve is built to find. 0.7 or 0.8 cost recall
    (docs/data-dedup.md)."""
    seed: int = 1
    """Seeds the permutations; signatures are only comparable under the same seed and sizes."""

    def validate(self) -> None:
        for key in ("num_bands", "rows_per_band", "ngram"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
        if self.threshold is not None and not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1] or None, got {self.threshold}")

    @property
    def num_perm(self) -> int:
        return self.num_bands * self.rows_per_band

    def permutations(self) -> tuple[np.ndarray, np.ndarray]:
        """(a, b), each (num_perm,) uint64 in [1, p), p = 2^61 - 1: permutation k is
        h(x) = (a[k]*x + b[k]) mod p over 32-bit shingle hashes x."""
        rng = np.random.default_rng(self.seed)
        a = rng.integers(1, (1 << 61) - 1, size=self.num_perm, dtype=np.uint64)
        b = rng.integers(0, (1 << 61) - 1, size=self.num_perm, dtype=np.uint64)
        return a, b

    def as_dict(self) -> dict:
        return asdict(self)


def normalize_text(text: str) -> str:
    """NFKC, lowercase, punctuation and symbols to spaces, whitespace folded: what "the same text" means."""
    return " ".join(_NONWORD.sub(" ", unicodedata.normalize("NFKC", text).lower()).split())


def exact_hash(normalized: str) -> int:
    return xxhash.xxh64_intdigest(normalized.encode("utf-8", "surrogatepass"))


def shingle_strings(normalized: str, ngram: int = 5) -> list[str]:
    """The shingles as strings (for comparing against other MinHash libraries); `shingle_hashes` hashes
    the same shingles without building the strings."""
    cjk = CJK.findall(normalized)
    words = CJK.sub(" ", normalized).split()
    out = []
    for units, sep, tag in ((words, " ", "w:"), (cjk, "", "c:")):
        n = min(ngram, len(units))
        out += [tag + sep.join(units[i : i + n]) for i in range(len(units) - n + 1)] if n else []
    return out


# Odd multipliers that make the n-gram combination order-sensitive (position k gets _POS[k]).
_POS = np.random.default_rng(0x5EED).integers(1, 1 << 63, size=64, dtype=np.uint64) | np.uint64(1)


def _ngram_hashes(unit_hashes: list[int], ngram: int) -> np.ndarray:
    """32-bit hashes of the n-grams of a sequence of 64-bit unit hashes, vectorized over positions."""
    h = np.array(unit_hashes, dtype=np.uint64)
    n = min(ngram, len(h))
    if n == 0:
        return np.empty(0, np.uint64)
    m = len(h) - n + 1
    with np.errstate(over="ignore"):
        g = h[:m] * _POS[0]
        for k in range(1, n):
            g += h[k : k + m] * _POS[k]
        # splitmix64 finalizer, so every output bit depends on every unit; keep the high 32 bits.
        g ^= g >> np.uint64(30)
        g *= np.uint64(0xBF58476D1CE4E5B9)
        g ^= g >> np.uint64(27)
        g *= np.uint64(0x94D049BB133111EB)
        g ^= g >> np.uint64(31)
    return g >> np.uint64(32)


def shingle_hashes(normalized: str, ngram: int = 5) -> np.ndarray:
    """(shingles,) uint64 < 2^32: each word (or CJK character) is hashed with xxhash64 once, n-grams are
    combined from those in numpy. Word and character shingles use different seeds, so they never match."""
    cjk = CJK.findall(normalized)
    words = CJK.sub(" ", normalized).split()
    parts = []
    if words:
        parts.append(_ngram_hashes([xxhash.xxh64_intdigest(w.encode("utf-8", "surrogatepass"), 0) for w in words], ngram))
    if cjk:
        parts.append(_ngram_hashes([xxhash.xxh64_intdigest(c.encode("utf-8", "surrogatepass"), 1) for c in cjk], ngram))
    if not parts:
        return np.empty(0, np.uint64)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


_LOW29 = np.uint64((1 << 29) - 1)
_LOW32 = np.uint64((1 << 32) - 1)


def _fold(v: np.ndarray) -> np.ndarray:
    """v mod 2^61-1 up to one fold: v = hi*2^61 + lo == hi + lo, since 2^61 == 1 (mod p)."""
    return (v & MERSENNE) + (v >> np.uint64(61))


def _minhash_rows(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(S,) shingle hashes < 2^32 -> (S, P) values (a*x + b) mod p, p = 2^61 - 1, a and b < p.

    a*x needs 93 bits, so a = a_hi*2^32 + a_lo: a_lo*x < 2^64, and a_hi*x*2^32 is reduced with
    2^61 == 1 (mod p): y*2^32 == (y >> 29) + ((y mod 2^29) << 32). Values end <= p + 3, which is fine
    for a hash (a value and its residue never both occur). Small a (or a < 2^32 with no reduction) makes
    the permutations nearly monotone in x and strongly correlated with each other, and the Jaccard
    estimate useless."""
    x = x[:, None]
    y = x * (a >> np.uint64(32))[None, :]  # (S, P), < 2^61
    v = _fold(x * (a & _LOW32)[None, :])
    v += (y >> np.uint64(29)) + ((y & _LOW29) << np.uint64(32))
    v += b[None, :]  # < 2^63
    return _fold(v)


def minhash(shingles: list[np.ndarray], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Signatures (docs, P) uint64 of several documents' shingle hashes, vectorized over shingles: docs are
    packed into chunks of ~1k shingles and each chunk's per-document minimum taken with reduceat. A document
    without shingles gets EMPTY everywhere."""
    out = np.full((len(shingles), len(a)), EMPTY, dtype=np.uint64)
    group: list[int] = []
    size = 0

    def flush() -> None:
        nonlocal group, size
        if group:
            lens = [len(shingles[i]) for i in group]
            starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
            rows = _minhash_rows(np.concatenate([shingles[i] for i in group]), a, b)
            out[group] = np.minimum.reduceat(rows, starts, axis=0)
        group, size = [], 0

    for i, s in enumerate(shingles):
        if len(s) == 0:
            continue
        if len(s) >= _SHINGLES_PER_CHUNK:  # a long document alone, in chunks
            for lo in range(0, len(s), _SHINGLES_PER_CHUNK):
                out[i] = np.minimum(out[i], _minhash_rows(s[lo : lo + _SHINGLES_PER_CHUNK], a, b).min(axis=0))
            continue
        if size + len(s) > _SHINGLES_PER_CHUNK:
            flush()
        group.append(i)
        size += len(s)
    flush()
    return out


def estimated_jaccard(sig: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """(m,) fraction of permutations on which each pair's signatures agree."""
    if len(pairs) == 0:
        return np.empty(0)
    return (sig[pairs[:, 0]] == sig[pairs[:, 1]]).mean(axis=1)


def bucket_pairs(band: np.ndarray, rows: np.ndarray, all_pairs_up_to: int = 32) -> np.ndarray:
    """Candidate pairs (m, 2) of `rows` (global row numbers) whose band values (n, r) are all equal.
    A bucket of k <= `all_pairs_up_to` yields all k(k-1)/2 pairs (so verification can keep any of them);
    a larger one links each member to the first and to the previous one (2k pairs), enough to connect it."""
    if len(band) < 2:
        return np.empty((0, 2), np.int64)
    keys = np.ascontiguousarray(band).view(np.dtype((np.void, band.dtype.itemsize * band.shape[1]))).ravel()
    _, inverse = np.unique(keys, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    ordered = inverse[order]
    bounds = np.flatnonzero(np.diff(ordered)) + 1
    starts = np.concatenate([[0], bounds])
    ends = np.concatenate([bounds, [len(ordered)]])
    out = []
    for s, e in zip(starts[ends - starts > 1], ends[ends - starts > 1]):
        members = rows[order[s:e]]
        k = len(members)
        if k <= all_pairs_up_to:
            i, j = np.triu_indices(k, 1)
        else:
            i = np.concatenate([np.zeros(k - 1, np.int64), np.arange(1, k - 1)])
            j = np.concatenate([np.arange(1, k), np.arange(2, k)])
        out.append(np.stack([members[i], members[j]], axis=1))
    return np.concatenate(out).astype(np.int64) if out else np.empty((0, 2), np.int64)


def band_candidates(sig: np.ndarray, rows: np.ndarray, band: int, cfg: MinHashConfig) -> np.ndarray:
    """Candidate pairs from one band of the signatures `sig` (n, P) of global rows `rows`, verified by
    estimated Jaccard when `cfg.threshold` is set. Documents without shingles never pair."""
    live = sig[:, 0] != EMPTY
    sig, rows = sig[live], rows[live]
    r = cfg.rows_per_band
    pairs = bucket_pairs(sig[:, band * r : (band + 1) * r], np.arange(len(rows)))
    if cfg.threshold is not None and len(pairs):
        pairs = pairs[estimated_jaccard(sig, pairs) >= cfg.threshold - 1e-9]
    return rows[pairs]


class UnionFind:
    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        parent = self.parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]  # path halving
            x = parent[x]
        return x

    def union(self, x: int, y: int) -> None:
        rx, ry = self.find(x), self.find(y)
        if rx != ry:
            # The smaller root wins, so the components' roots do not depend on the order of the pairs.
            self.parent[max(rx, ry)] = min(rx, ry)

    def roots(self) -> np.ndarray:
        return np.array([self.find(i) for i in range(len(self.parent))], dtype=np.int64)


def doc_score(doc: Document, score_key: str | None) -> float:
    value = doc.metadata.get(score_key) if score_key else None
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return -math.inf
    return float(value)


def choose_keepers(exact: np.ndarray, pairs: Iterable[np.ndarray], score: np.ndarray, length: np.ndarray,
                   ids: list[str]) -> np.ndarray:
    """keeper[i] = the row kept for row i's cluster (i itself when kept). Clusters = connected components of
    equal `exact` hashes and `pairs`; the keeper has the highest score, then the longest text, then the
    smallest id (then the first row, for repeated ids)."""
    n = len(exact)
    uf = UnionFind(n)
    _, first, inverse = np.unique(exact, return_index=True, return_inverse=True)
    for i, f in zip(range(n), first[inverse].tolist()):
        if f != i:
            uf.union(i, f)
    for p in pairs:
        for x, y in p.tolist():
            uf.union(x, y)
    roots = uf.roots()
    order = sorted(range(n), key=lambda i: (-score[i], -length[i], ids[i], i))
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n)
    best = np.full(n, n, np.int64)
    np.minimum.at(best, roots, rank)
    return np.asarray(order, np.int64)[best[roots]] if n else np.empty(0, np.int64)


def removals(exact: np.ndarray, keeper: np.ndarray, ids: list[str]) -> dict[int, tuple[str, str]]:
    """{row: (reason, duplicate_of id)} for every row that is not its cluster's keeper."""
    out = {}
    for i in np.flatnonzero(keeper != np.arange(len(keeper))).tolist():
        k = int(keeper[i])
        out[i] = ("exact_duplicate" if exact[i] == exact[k] else "near_duplicate", ids[k])
    return out


def find_duplicates(exact: np.ndarray, sig: np.ndarray, score: np.ndarray, length: np.ndarray, ids: list[str],
                    cfg: MinHashConfig, near: bool = True) -> tuple[dict[int, tuple[str, str]], int]:
    """Everything after the signatures, in memory: (removals, candidate pairs kept). Only the first row of
    each exact group enters LSH (the others have the same signature)."""
    pairs = []
    if near:
        _, first = np.unique(exact, return_index=True)
        first = np.sort(first)
        pairs = [band_candidates(sig[first], first, band, cfg) for band in range(cfg.num_bands)]
    keeper = choose_keepers(exact, pairs, score, length, ids)
    return removals(exact, keeper, ids), sum(len(p) for p in pairs)


@dataclass
class Signatures:
    """What dedup needs of each document, as arrays: built per batch, concatenated at the end."""

    exact: np.ndarray  # (n,) uint64
    sig: np.ndarray  # (n, P) uint64
    score: np.ndarray  # (n,) float64
    length: np.ndarray  # (n,) int64
    ids: list[str]

    @staticmethod
    def of(docs: list[Document], cfg: MinHashConfig, perms: tuple[np.ndarray, np.ndarray],
           score_key: str | None, near: bool = True) -> "Signatures":
        normalized = [normalize_text(d.text) for d in docs]
        exact = np.array([exact_hash(t) for t in normalized], dtype=np.uint64)
        if near:
            sig = minhash([shingle_hashes(t, cfg.ngram) for t in normalized], *perms)
        else:
            sig = np.full((len(docs), cfg.num_perm), EMPTY, np.uint64)
        return Signatures(exact, sig, np.array([doc_score(d, score_key) for d in docs], dtype=np.float64),
                          np.array([len(d.text) for d in docs], dtype=np.int64), [d.id for d in docs])

    @staticmethod
    def concat(parts: list["Signatures"], num_perm: int) -> "Signatures":
        if not parts:
            return Signatures(np.empty(0, np.uint64), np.empty((0, num_perm), np.uint64), np.empty(0),
                              np.empty(0, np.int64), [])
        return Signatures(np.concatenate([p.exact for p in parts]), np.concatenate([p.sig for p in parts]),
                          np.concatenate([p.score for p in parts]), np.concatenate([p.length for p in parts]),
                          [i for p in parts for i in p.ids])
