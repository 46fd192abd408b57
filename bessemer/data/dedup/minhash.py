"""MinHash maths: what "the same text" means, shingles, signatures, band hashes, the Jaccard estimate.

Pure functions over numpy arrays (no files, no processes); `bessemer.data.dedup.graph` turns band hashes
into clusters and `bessemer.data.dedup.stages` runs everything over a corpus. docs/data-dedup.md.
"""

import math
import re
import unicodedata
from dataclasses import asdict, dataclass, fields

import numpy as np
import xxhash

from bessemer.data.document import Document
from bessemer.data.text.script import CJK

EMPTY = np.uint64(np.iinfo(np.uint64).max)  # signature of a document without shingles
_NONWORD = re.compile(r"[\W_]+")


@dataclass(frozen=True)
class MinHashConfig:
    num_bands: int = 16
    """LSH bands. With `rows_per_band` r, a pair with Jaccard s is a candidate with probability
    1 - (1 - s^r)^b (b=16, r=7: 0.12 at s=0.5, 0.75 at s=0.7, 0.98 at s=0.8). 16 x 7 rather than datatrove's
    14 x 8: the same 112 permutations, a curve 0.02 lower at its 50% point (s=0.67), mean recall 0.98 instead of
    0.95 on the generated evaluation corpora at the same precision (1.0); it costs 2 more band files and more
    candidates below s=0.6, which verification drops (docs/data-dedup.md)."""
    rows_per_band: int = 7
    """Permutations per band; num_bands * rows_per_band permutations in all."""
    ngram: int = 5
    """Shingle length: words for non-CJK text, characters for CJK text."""
    threshold: float | None = 0.6
    """Keep a candidate pair only if the signatures agree on >= this fraction of permutations (estimated
    Jaccard); None keeps every candidate pair. 0.6 is ~2 standard errors of the estimate (0.044 at s=0.67,
    112 permutations) below the 16x7 S-curve's 50% point (s=0.67): it drops pairs that met in one band by
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
        """(a, b), each (num_perm,) uint64, a odd: hash k of a 32-bit shingle hash x is the high 32 bits of
        (a[k]*x + b[k]) mod 2^64 (multiply-shift, `_minhash_rows`)."""
        rng = np.random.default_rng(self.seed)
        a = rng.integers(0, 1 << 64, size=self.num_perm, dtype=np.uint64, endpoint=False) | np.uint64(1)
        b = rng.integers(0, 1 << 64, size=self.num_perm, dtype=np.uint64, endpoint=False)
        return a, b

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class DedupConfig(MinHashConfig):
    """The `dedup` step's settings (its [[steps]] keys, docs/data-dedup.md): the MinHash ones, which duplicates
    count and which copy of a cluster is kept. The step in memory and the file-based stages take the same one."""
    exact: bool = True
    """Group documents whose normalized text is equal (exact duplicates); False = near-duplicates only."""
    near: bool = True
    """Find near-duplicates with MinHash LSH; False = exact dedup only."""
    score_key: str | None = "quality_score"
    """Metadata key of the score that picks a cluster's keeper (highest first); None ignores scores."""

    def validate(self) -> None:
        if not (self.exact or self.near):
            raise ValueError("dedup: exact and near are both off; turn on at least one")
        super().validate()

    @property
    def minhash(self) -> MinHashConfig:
        """The MinHash part alone (what signatures depend on)."""
        return MinHashConfig(**{f.name: getattr(self, f.name) for f in fields(MinHashConfig)})


# ASCII fast path of normalize_text: NFKC leaves ASCII unchanged; letters lowercased, every other byte a space.
_ASCII_FOLD = bytes(c + 32 if 65 <= c <= 90 else c if (97 <= c <= 122 or 48 <= c <= 57) else 32 for c in range(128))
_ASCII_FOLD += bytes(128)


def normalize_text(text: str) -> str:
    """NFKC, lowercase, punctuation and symbols to spaces, whitespace folded: what "the same text" means."""
    if text.isascii():  # the same answer as below, in C: NFKC is the identity on ASCII
        return " ".join(text.encode("ascii").translate(_ASCII_FOLD).decode("ascii").split())
    return " ".join(_NONWORD.sub(" ", unicodedata.normalize("NFKC", text).lower()).split())


# `_ASCII_FOLD` for a NUL-joined batch: NUL (the separator) kept, every byte that folds to a space marked 1 instead
# (bytes.translate deletes them at the end, but for the one space kept between two words).
_BATCH_FOLD = bytes(0 if c == 0 else 1 if f == 32 else f for c, f in enumerate(_ASCII_FOLD))


def normalize_batch(texts: list[str]) -> list[str]:
    """`normalize_text` of many texts, the ASCII ones (nearly all of a crawl) folded together: one translate over
    the NUL-joined batch, the first byte of every run of spaces between two words of a text put back as a space
    (found in numpy), then one translate that deletes the other spaces, instead of a split and a join per text."""
    fast = [t.isascii() and "\0" not in t for t in texts]
    out = ["" if f else normalize_text(t) for t, f in zip(texts, fast)]
    rows = [i for i, f in enumerate(fast) if f]
    if not rows:
        return out
    # NULs at both ends too: every run of gap bytes then has a byte on each side.
    folded = bytearray("\0".join(["", *[texts[i] for i in rows], ""]).encode("ascii").translate(_BATCH_FOLD))
    buf = np.frombuffer(folded, np.uint8)
    gap = buf == 1
    edges = np.flatnonzero(gap[1:] != gap[:-1]) + 1  # runs of gap bytes: [edges[0], edges[1]), [edges[2], ...
    start, end = edges[0::2], edges[1::2]
    buf[start[(buf[start - 1] != 0) & (buf[end] != 0)]] = 32  # between two words of one text
    for i, t in zip(rows, folded.translate(None, b"\1").decode("ascii").split("\0")[1:-1]):
        out[i] = t
    return out


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
_BYTE_MUL = 0x100000001B3  # FNV-1a's 64-bit prime (odd, so invertible mod 2^64): the per-unit polynomial's base
_tables = (np.ones(1, np.uint64), np.ones(1, np.uint64))


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(M^j, M^-j) mod 2^64 for j < n (cached, grown on demand)."""
    global _tables
    if len(_tables[0]) < n:
        n = max(n, 2 * len(_tables[0]), 4096)
        inv = pow(_BYTE_MUL, -1, 1 << 64)
        fw, bw = np.full(n, _BYTE_MUL, np.uint64), np.full(n, inv, np.uint64)
        fw[0] = bw[0] = 1
        with np.errstate(over="ignore"):
            _tables = (np.cumprod(fw, dtype=np.uint64), np.cumprod(bw, dtype=np.uint64))
    return _tables


def _unit_hashes(joined: bytes, seed: int) -> np.ndarray:
    """64-bit hashes of the space-separated units of `joined` (no empty units), all at once in numpy: the
    polynomial sum over a unit's bytes of (byte + 1) * M^j (j = position in the unit), with its length and
    `seed` mixed in and finalized. Computed from one prefix sum over all bytes: the sum over [start, end) of
    (byte + 1) * M^position, times M^-start."""
    buf = np.frombuffer(joined, np.uint8)
    if len(buf) == 0:
        return np.empty(0, np.uint64)
    fw, bw = _powers(len(buf) + 1)
    spaces = np.flatnonzero(buf == 32)
    starts = np.concatenate([[0], spaces + 1])
    ends = np.append(spaces, len(buf))
    with np.errstate(over="ignore"):
        prefix = np.empty(len(buf) + 1, np.uint64)
        prefix[0] = 0
        np.cumsum((buf + np.uint64(1)) * fw[: len(buf)], out=prefix[1:])  # spaces add to the sum but lie
        h = (prefix[ends] - prefix[starts]) * bw[starts]  # outside every [start, end)
        h += (ends - starts).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(seed) * np.uint64(0xD6E8FEB86659FD93)
        return _mix64(h)


def _ngrams(h: np.ndarray, ngram: int, first: np.ndarray, count: np.ndarray) -> np.ndarray:
    """32-bit hashes of the n-grams of several texts' unit hashes `h` (text t's units: first[t] ..
    first[t]+count[t]-1, every count >= ngram), vectorized over all positions; n-grams never cross texts."""
    m = len(h) - ngram + 1
    if m <= 0:
        return np.empty(0, np.uint64)
    with np.errstate(over="ignore"):
        g = h[:m] * _POS[0]
        for k in range(1, ngram):
            g += h[k : k + m] * _POS[k]
        g = _mix64(g)  # every output bit depends on every unit; keep the high 32 bits
    if len(first) > 1:  # positions whose n-gram stays inside one text
        keep = np.zeros(m + ngram, np.int64)
        np.add.at(keep, first, 1)
        np.add.at(keep, first + count - ngram + 1, -1)
        g = g[np.cumsum(keep[:m]) > 0]
    return g >> np.uint64(32)


def _text_shingles(units: list[str], ngram: int, seed: int) -> np.ndarray:
    if not units:
        return np.empty(0, np.uint64)
    h = _unit_hashes(" ".join(units).encode("utf-8", "surrogatepass"), seed)
    n = min(ngram, len(h))
    return _ngrams(h, n, np.zeros(1, np.int64), np.array([len(h)]))


def shingle_hashes(normalized: str, ngram: int = 5) -> np.ndarray:
    """(shingles,) uint64 < 2^32 of one normalized text: word n-grams, and CJK character n-grams (CJK text has
    no spaces to split on). Units are hashed by `_unit_hashes`, words and characters with different seeds so
    they never match; a text shorter than `ngram` units is one shingle of all of them."""
    cjk = CJK.findall(normalized)
    parts = [_text_shingles(CJK.sub(" ", normalized).split() if cjk else normalized.split(), ngram, 0)]
    if cjk:
        parts.append(_text_shingles(cjk, ngram, 1))
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def shingle_hashes_batch(normalized: list[str], ngram: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """`shingle_hashes` of many texts as (all shingles concatenated, shingles per text), with one numpy pass
    over the texts without CJK characters and at least `ngram` words (the rest go one by one)."""
    n = len(normalized)
    words = np.array([t.count(" ") + 1 if t else 0 for t in normalized], np.int64)
    fast = np.array([w >= ngram and (t.isascii() or not CJK.search(t)) for w, t in zip(words.tolist(), normalized)],
                    bool)
    parts: list[np.ndarray] = [np.empty(0, np.uint64)] * n
    counts = np.zeros(n, np.int64)
    rows = np.flatnonzero(fast)
    if len(rows):
        h = _unit_hashes(" ".join([normalized[i] for i in rows]).encode("utf-8", "surrogatepass"), 0)
        w = words[rows]
        first = np.cumsum(w) - w
        flat = _ngrams(h, ngram, first, w)
        counts[rows] = w - ngram + 1
        if len(rows) == n:  # every text took the fast path: already in order
            return flat, counts
        bounds = np.cumsum(counts[rows])[:-1]
        for i, p in zip(rows.tolist(), np.split(flat, bounds)):
            parts[i] = p
    for i in np.flatnonzero(~fast).tolist():
        parts[i] = shingle_hashes(normalized[i], ngram)
        counts[i] = len(parts[i])
    return (np.concatenate(parts) if n else np.empty(0, np.uint64)), counts


_LOW32 = np.uint64((1 << 32) - 1)
# Shingles hashed per block: a (P, 8192) uint64 block is 7 MiB for P = 112; measured fastest of 1k-16k (30% less
# time than 4k on 512-document batches), since each permutation's row is one long contiguous run for reduceat.
_SHINGLES_PER_CHUNK = 8192


def _minhash_rows(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(S,) shingle hashes -> (P, S) values (a*x + b) mod 2^64. The high 32 bits of that are a strongly
    universal hash of x < 2^32 (multiply-shift, Dietzfelbinger 1996); the minimum of the 64-bit values has the
    minimum high half, so MinHash can take minima first and shift once per signature value."""
    with np.errstate(over="ignore"):
        v = a[:, None] * x[None, :]
        v += b[:, None]
    return v


def minhash_flat(x: np.ndarray, counts: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Signatures (docs, P) uint64 of documents whose shingles are `x` (concatenated, `counts` per document),
    in blocks of `_SHINGLES_PER_CHUNK` shingles whatever the document boundaries (a long document spans
    blocks; its minima are combined). A document without shingles gets EMPTY everywhere."""
    out = np.full((len(counts), len(a)), EMPTY, dtype=np.uint64)
    starts = np.cumsum(counts) - counts
    live = np.flatnonzero(counts > 0)
    doc_starts = starts[live]
    for lo in range(0, len(x), _SHINGLES_PER_CHUNK):
        hi = min(lo + _SHINGLES_PER_CHUNK, len(x))
        # segments: the block start, and every document start inside the block
        inside = doc_starts[(doc_starts > lo) & (doc_starts < hi)]
        seg = np.concatenate([[lo], inside])
        docs = live[np.searchsorted(doc_starts, seg, side="right") - 1]
        mins = np.minimum.reduceat(_minhash_rows(x[lo:hi], a, b), seg - lo, axis=1)  # (P, segments)
        # Only the first segment can continue a document of an earlier block; the others start here.
        np.minimum(out[docs[0]], mins[:, 0], out=out[docs[0]])
        out[docs[1:]] = mins[:, 1:].T
    return out


def minhash(shingles: list[np.ndarray], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`minhash_flat` of a list of per-document shingle arrays."""
    counts = np.array([len(s) for s in shingles], np.int64)
    x = np.concatenate(shingles) if len(shingles) else np.empty(0, np.uint64)
    return minhash_flat(x.astype(np.uint64), counts, a, b)


def estimated_jaccard(sig: np.ndarray, pairs: np.ndarray, chunk: int = 1 << 15) -> np.ndarray:
    """(m,) fraction of permutations on which each pair's signatures agree; `sig` (n, P), `pairs` (m, 2) rows
    of it. Pairs are compared `chunk` at a time, so the temporaries are chunk x P, not m x P."""
    out = np.empty(len(pairs))
    for lo in range(0, len(pairs), chunk):
        p = pairs[lo : lo + chunk]
        out[lo : lo + chunk] = np.count_nonzero(sig[p[:, 0]] == sig[p[:, 1]], axis=1) / sig.shape[1]
    return out


def stored_signature(sig: np.ndarray) -> np.ndarray:
    """The high 32 bits of each MinHash value (the multiply-shift hash itself, `_minhash_rows`): what
    verification compares and the signature files hold. Empty documents keep an all-ones row."""
    return (sig >> np.uint64(32)).astype(np.uint32)


def _mix64(h: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, in place: every output bit depends on every input bit."""
    h ^= h >> np.uint64(30)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(27)
    h *= np.uint64(0x94D049BB133111EB)
    h ^= h >> np.uint64(31)
    return h


def band_hashes(sig: np.ndarray, num_bands: int, rows_per_band: int) -> np.ndarray:
    """(n, num_bands) uint64: one 64-bit hash of each band's `rows_per_band` MinHash values. Equal bands give
    equal hashes; unequal ones collide with probability ~2^-64, so comparing hashes is comparing bands.

    The rows are folded in numpy (h = mix(h * K + v) per row, over all documents at once) rather than through
    xxhash one document at a time: a 64-bit hash of the same quality without a Python loop per document."""
    n = len(sig)
    rows = sig[:, : num_bands * rows_per_band].reshape(n, num_bands, rows_per_band)  # (n, B, r)
    h = np.full((n, num_bands), np.uint64(0x9E3779B97F4A7C15))
    with np.errstate(over="ignore"):
        for k in range(rows_per_band):
            h = _mix64(h * np.uint64(0xFF51AFD7ED558CCD) + rows[:, :, k])
    return h


def exact_hash128(normalized: list[str]) -> np.ndarray:
    """(n, 2) uint64: xxh3_128 of each normalized text as (high 64 bits, low 64 bits): two different texts share
    it with probability ~2^-128, so equal hashes are equal texts at any corpus size."""
    digests = b"".join([xxhash.xxh3_128_digest(t.encode("utf-8", "surrogatepass")) for t in normalized])
    return np.frombuffer(digests, ">u8").astype(np.uint64).reshape(len(normalized), 2)  # digests are big-endian


def doc_score(doc: Document, score_key: str | None) -> float:
    value = doc.metadata.get(score_key) if score_key else None
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return -math.inf
    return float(value)


@dataclass
class DocArrays:
    """What dedup needs of each document of a batch, as arrays (one row per document)."""

    exact_hi: np.ndarray  # (n,) uint64: xxh3_128 of the normalized text, high half
    exact_lo: np.ndarray  # (n,) uint64: low half
    sig: np.ndarray  # (n, P) uint32: `stored_signature` of the MinHash (all ones: no shingles, or near off)
    bands: np.ndarray  # (n, num_bands) uint64: `band_hashes` (meaningless where `has_shingles` is False)
    has_shingles: np.ndarray  # (n,) bool
    score: np.ndarray  # (n,) float64: metadata[score_key], -inf when missing
    length: np.ndarray  # (n,) int64: characters of the text
    ids: list[str]

    @staticmethod
    def of(docs: list[Document], cfg: "MinHashConfig", perms: tuple[np.ndarray, np.ndarray],
           score_key: str | None, near: bool = True) -> "DocArrays":
        normalized = normalize_batch([d.text for d in docs])
        exact = exact_hash128(normalized)
        if near:
            full = minhash_flat(*shingle_hashes_batch(normalized, cfg.ngram), *perms)
        else:
            full = np.full((len(docs), cfg.num_perm), EMPTY, np.uint64)
        return DocArrays(exact[:, 0].copy(), exact[:, 1].copy(), stored_signature(full),
                         band_hashes(full, cfg.num_bands, cfg.rows_per_band), full[:, 0] != EMPTY,
                         np.array([doc_score(d, score_key) for d in docs], dtype=np.float64),
                         np.array([len(d.text) for d in docs], dtype=np.int64), [d.id for d in docs])

    @staticmethod
    def concat(parts: list["DocArrays"], cfg: "MinHashConfig") -> "DocArrays":
        if not parts:
            return DocArrays(np.empty(0, np.uint64), np.empty(0, np.uint64), np.empty((0, cfg.num_perm), np.uint32),
                             np.empty((0, cfg.num_bands), np.uint64), np.empty(0, bool), np.empty(0),
                             np.empty(0, np.int64), [])
        cat = {k: np.concatenate([getattr(p, k) for p in parts])
               for k in ("exact_hi", "exact_lo", "sig", "bands", "has_shingles", "score", "length")}
        return DocArrays(**cat, ids=[i for p in parts for i in p.ids])
