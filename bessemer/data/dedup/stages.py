"""Dedup across shards in four resumable stages with files between them (docs/data-dedup.md, "Stages").

    <work>/signatures/<shard>/docs.npz      (a) per shard: exact hash (xxh3_128), score, length, ids, valid
    <work>/signatures/<shard>/minhash.npy       (n, P) uint32 signatures, read back only for verification
    <work>/signatures/<shard>/band-<b>.bin      per band: (band hash, exact tag, doc index) sorted by hash
    <work>/signatures/<shard>/exact.bin         (xxh3_128 hi, lo, doc index) sorted by hash
    <work>/signatures/<shard>/index.npy         per sorted file: first record of each 1/256 of the hash space
    <work>/edges/<band>-<part>.npy          (b) per band and hash range: a k-way merge of every shard's sorted
                                                file; equal hashes -> candidate pairs, verified by Jaccard
    <work>/clusters/<shard>.npz             (c) union-find over the edges only -> per shard the sorted doc
                                                indices to drop, the reason and the kept document's id
    <work>/output/<shard>.jsonl.zst         (d) per shard: kept documents; the rejected ones go to the sink

A document is named by its global row `shard << 32 | index`, so the order of rows is the order of the
concatenated shards and the answer equals `DedupStep` over that stream. Every file goes through
`bessemer.data.io` (local paths and s3:// alike); after each unit of work a marker holding the run's
fingerprint is written, so a rerun skips finished work and an interrupted run ends with the same files.
Every stage runs as jobs of `map_jobs(fn, jobs)` — (a), (b) and (d) many independent ones, (c) a single one — the
job functions module-level and every job a picklable tuple, so local processes or Ray tasks will do.

Memory: a signature or filter job holds one shard's arrays; a bucket job holds one block of records per shard
(`BLOCK_BYTES` over all shards, not the corpus), `VERIFY_PAIRS` candidate pairs at a time and the spanning forest
of its verified pairs; the cluster job holds the documents that have an edge.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from bessemer.data import io
from bessemer.data.dedup import graph
from bessemer.data.dedup.files import (
    load_npy,
    load_npz,
    load_rows,
    pack_ids,
    read_docs,
    read_rows,
    save_npy,
    save_npz,
    unpack_ids,
)
from bessemer.data.dedup.minhash import (
    DedupConfig,
    DocArrays,
    MinHashConfig,
    estimated_jaccard,
)
from bessemer.data.document import REASON
from bessemer.data.readers import file_size
from bessemer.data.runner import local_map_jobs
from bessemer.data.sink import Sink
from bessemer.data.writers import JsonlWriter
from bessemer.errors import BessemerError

STAGES = ("signatures", "buckets", "clusters", "filter")
BAND_RECORD = np.dtype([("key", "<u8"), ("tag", "<u4"), ("idx", "<u4")])  # 16 bytes
EXACT_RECORD = np.dtype([("key", "<u8"), ("lo", "<u8"), ("idx", "<u4"), ("pad", "<u4")])  # 24 bytes
SLOTS = 256  # index granularity: a bucket job reads 1/parts of every sorted file, parts dividing 256
BATCH_DOCS = 512
BLOCK_BYTES = 2 << 20  # records a bucket job reads at once, over all shards: caps its merge chunks (~130k
# records) and so its temporaries (~10x a chunk) whatever the corpus size
VERIFY_PAIRS = 1 << 14  # candidate pairs verified at once (their signatures: <= 15 MB)
FOREST_EDGES = 1 << 20  # kept pairs of a bucket job beyond which they are reduced to a spanning forest


@contextmanager
def _job(what: str) -> Iterator[None]:
    """Name the unit of work (stage, shard or band, file) in any error it raises."""
    try:
        yield
    except BessemerError:
        raise
    except Exception as e:
        raise BessemerError(f"dedup {what}: {type(e).__name__}: {e}") from e


def _sig_dir(work: str, shard: int) -> str:
    return io.join(work, "signatures", f"{shard:05d}")


def _band_name(band: int | None) -> str:
    return "exact" if band is None else f"band-{band:03d}"


def _sorted_index(keys: np.ndarray) -> np.ndarray:
    """(SLOTS + 1,) first record whose key is >= s * 2^64 / SLOTS; the last entry is the record count."""
    bounds = np.arange(SLOTS, dtype=np.uint64) << np.uint64(64 - (SLOTS.bit_length() - 1))
    return np.append(np.searchsorted(keys, bounds, side="left"), len(keys)).astype(np.int64)


# (a) signatures ---------------------------------------------------------------------------------------------

def _signatures(job: tuple) -> int:
    with _job(f"signatures of shard {job[1]} ({job[0]})"):
        return _signatures_of(job)


def _signatures_of(job: tuple) -> int:
    path, shard, work, cfg_d, score_key, exact, near, fp = job
    cfg = MinHashConfig(**cfg_d)
    perms = cfg.permutations()
    parts, valid, batch = [], [], []
    for doc in read_docs(path):
        # Rows the reader already rejected keep their index (stage d passes them on) but match nothing.
        valid.append(REASON not in doc.metadata)
        batch.append(doc)
        if len(batch) >= BATCH_DOCS:
            parts.append(DocArrays.of(batch, cfg, perms, score_key, near))
            batch = []
    if batch:
        parts.append(DocArrays.of(batch, cfg, perms, score_key, near))
    a = DocArrays.concat(parts, cfg)
    valid_a = np.array(valid, dtype=bool)
    n = len(valid_a)
    out = _sig_dir(work, shard)
    idx = np.arange(n, dtype=np.uint32)
    index = np.zeros((cfg.num_bands + 1, SLOTS + 1), np.int64)
    if near:
        live = valid_a & a.has_shingles
        tag = (a.exact_lo[live] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        for b in range(cfg.num_bands):
            key = a.bands[live, b]
            order = np.argsort(key, kind="stable")  # stable: indices stay ascending within a bucket
            rec = np.empty(len(order), BAND_RECORD)
            rec["key"], rec["tag"], rec["idx"] = key[order], tag[order], idx[live][order]
            io.write_bytes(io.join(out, _band_name(b) + ".bin"), rec.tobytes())
            index[b] = _sorted_index(rec["key"])
        save_npy(io.join(out, "minhash.npy"), a.sig)
    if exact:
        hi, lo, ix = a.exact_hi[valid_a], a.exact_lo[valid_a], idx[valid_a]
        order = np.lexsort((ix, lo, hi))
        rec = np.zeros(len(order), EXACT_RECORD)
        rec["key"], rec["lo"], rec["idx"] = hi[order], lo[order], ix[order]
        io.write_bytes(io.join(out, _band_name(None) + ".bin"), rec.tobytes())
        index[cfg.num_bands] = _sorted_index(rec["key"])
    save_npy(io.join(out, "index.npy"), index)
    blob, offsets = pack_ids(a.ids)
    save_npz(io.join(out, "docs.npz"), exact_hi=a.exact_hi, exact_lo=a.exact_lo, score=a.score,
              length=a.length, valid=valid_a, id_bytes=blob, id_offsets=offsets)
    io.write_marker(out + ".done", fp, docs=n)
    return n


# (b) buckets: k-way merge of the shards' sorted files -------------------------------------------------------

class _Run:
    """Records [start, stop) of one sorted file, read `block` records at a time (any fsspec filesystem)."""

    def __init__(self, url: str, dtype: np.dtype, start: int, stop: int, block: int):
        self.url, self.dtype, self.pos, self.stop, self.block = url, dtype, start, stop, block
        self.buf = np.empty(0, dtype)
        self._f = io.open_url(url, "rb") if stop > start else None

    @property
    def exhausted(self) -> bool:
        return self.pos >= self.stop

    def more(self) -> None:
        """Append the next block to the buffer."""
        k = min(self.block, self.stop - self.pos)
        self._f.seek(self.pos * self.dtype.itemsize)
        raw = self._f.read(k * self.dtype.itemsize)
        if len(raw) != k * self.dtype.itemsize:
            raise BessemerError(f"{self.url}: truncated sorted file (wanted records {self.pos}..{self.pos + k}); "
                                "delete its shard's signatures marker and rerun")
        self.buf = np.concatenate([self.buf, np.frombuffer(raw, self.dtype)])
        self.pos += k
        if self.exhausted:
            self._f.close()


def merge_sorted(runs: list[_Run]):
    """Yield (records, shard of each record) in chunks, sorted by (key, shard, index) across all runs; every
    run of equal keys lies whole inside one chunk. Memory: about one block per run, however long the runs."""
    for r in runs:
        if not r.exhausted:
            r.more()
    while True:
        waiting = [r for r in runs if not r.exhausted]
        if not waiting and not any(len(r.buf) for r in runs):
            return
        # Records below `cut` are final: every run's unread records are >= its buffer's last key.
        cut = min((int(r.buf["key"][-1]) for r in waiting), default=None)
        pieces, shards = [], []
        for s, r in enumerate(runs):
            n = len(r.buf) if cut is None else int(np.searchsorted(r.buf["key"], np.uint64(cut), side="left"))
            if n:
                pieces.append(r.buf[:n])
                shards.append(np.full(n, s, np.int64))
                r.buf = r.buf[n:]
        if not pieces:  # a run of equal keys fills a whole buffer: read on until it ends
            for r in waiting:
                if int(r.buf["key"][-1]) == cut:
                    r.more()
            continue
        recs, shard = np.concatenate(pieces), np.concatenate(shards)
        if recs.dtype == EXACT_RECORD:
            order = np.lexsort((recs["lo"], recs["key"]))  # stable: (shard, index) order kept among equals
        else:
            order = np.argsort(recs["key"], kind="stable")
        yield recs[order], shard[order]
        for r in runs:
            if not r.exhausted and len(r.buf) == 0:
                r.more()


def verify(pairs: np.ndarray, work: str, threshold: float, chunk: int = VERIFY_PAIRS) -> np.ndarray:
    """The pairs (global rows) whose stored signatures agree on >= `threshold` of the permutations, `chunk`
    pairs at a time: a chunk gathers the signatures of its distinct rows shard by shard (at most 2 x chunk x
    448 bytes), so memory does not grow with the number of pairs."""
    out = []
    for lo in range(0, len(pairs), chunk):
        p = pairs[lo : lo + chunk]
        ends = np.unique(p)
        shard = ends >> 32
        sig = None
        for s in np.unique(shard).tolist():
            sel = np.flatnonzero(shard == s)
            rows = load_rows(io.join(_sig_dir(work, s), "minhash.npy"), (ends[sel] & 0xFFFFFFFF).astype(np.int64))
            if sig is None:
                sig = np.empty((len(ends), rows.shape[1]), np.uint32)
            sig[sel] = rows
        out.append(p[estimated_jaccard(sig, np.searchsorted(ends, p)) >= threshold - 1e-9])
    return np.concatenate(out) if out else pairs


def spanning_forest(edges: np.ndarray) -> np.ndarray:
    """Edges (k, 2) with the same connected components as `edges`: each node to its component's smallest."""
    if len(edges) == 0:
        return edges
    nodes = np.unique(edges)
    root = nodes[graph.components(np.searchsorted(nodes, edges), len(nodes))]
    later = root != nodes
    return np.stack([root[later], nodes[later]], axis=1)


def _bucket(job: tuple) -> int:
    with _job(f"buckets of {_band_name(job[2])}, part {job[3]} of {job[4]} (work dir {job[0]})"):
        return _bucket_of(job)


def _bucket_of(job: tuple) -> int:
    work, n_shards, band, part, parts, cfg_d, exact, fp = job
    cfg = MinHashConfig(**cfg_d)
    row = cfg.num_bands if band is None else band
    lo_slot, hi_slot = part * SLOTS // parts, (part + 1) * SLOTS // parts
    dtype = EXACT_RECORD if band is None else BAND_RECORD
    block = max(1024, BLOCK_BYTES // max(n_shards, 1) // dtype.itemsize)
    runs = []
    for s in range(n_shards):
        index = load_npy(io.join(_sig_dir(work, s), "index.npy"))[row]
        runs.append(_Run(io.join(_sig_dir(work, s), _band_name(band) + ".bin"), dtype, int(index[lo_slot]),
                         int(index[hi_slot]), block))
    pending, kept, n_kept, n_pairs = [], [], 0, 0

    def settle() -> None:
        """Verify the pending pairs; fold the kept ones into a forest once they pile up."""
        nonlocal pending, kept, n_kept, n_pairs
        pairs = np.concatenate(pending) if pending else np.empty((0, 2), np.int64)
        pending = []
        if band is not None and cfg.threshold is not None:
            pairs = verify(pairs, work, cfg.threshold)
        n_pairs += len(pairs)
        kept.append(pairs)
        n_kept += len(pairs)
        if n_kept > FOREST_EDGES:  # only connectivity matters from here on
            kept = [spanning_forest(np.concatenate(kept))]
            n_kept = len(kept[0])

    n_pending = 0
    for recs, shard in merge_sorted(runs):
        rows = (shard << 32) | recs["idx"].astype(np.int64)
        if band is None:
            pending.append(graph.exact_pairs(recs["key"], recs["lo"], rows))
        else:
            pending.append(graph.candidate_pairs(recs["key"], rows, recs["tag"] if exact else None))
        n_pending += len(pending[-1])
        if n_pending >= VERIFY_PAIRS:
            settle()
            n_pending = 0
    settle()
    forest = spanning_forest(np.concatenate(kept))
    name = f"{_band_name(band)}-{part:03d}"
    # The cluster stage needs only connectivity: a forest has one edge per non-root node, not one per pair.
    save_npy(io.join(work, "edges", name + ".npy"), forest)
    io.write_marker(io.join(work, "edges", name + ".done"), fp, pairs=n_pairs)
    return n_pairs


# (c) clusters ---------------------------------------------------------------------------------------------------

def _edge_names(cfg: MinHashConfig, exact: bool, near: bool, parts: int) -> list[str]:
    bands = ([None] if exact else []) + (list(range(cfg.num_bands)) if near else [])
    return [f"{_band_name(b)}-{p:03d}" for b in bands for p in range(parts)]


def _clusters_job(job: tuple) -> None:
    with _job(f"clusters ({job[0]})"):
        _clusters(*job)


def _clusters(work: str, n_shards: int, names: list[str], exact: bool, fp: str) -> None:
    forest = np.empty((0, 2), np.int64)
    for name in names:  # fold each file in, keeping only a forest: memory ~ documents with an edge
        forest = spanning_forest(np.concatenate([forest, load_npy(io.join(work, "edges", name + ".npy"))]))
    nodes = np.unique(forest)
    k = len(nodes)
    score, length = np.empty(k), np.empty(k, np.int64)
    hi, lo = np.empty(k, np.uint64), np.empty(k, np.uint64)
    ids_parts: list[tuple[np.ndarray, np.ndarray]] = []
    shard_of = nodes >> 32
    for s in np.unique(shard_of).tolist():
        sel = np.flatnonzero(shard_of == s)
        d = load_npz(io.join(_sig_dir(work, s), "docs.npz"))
        idx = nodes[sel] & 0xFFFFFFFF
        score[sel], length[sel], hi[sel], lo[sel] = d["score"][idx], d["length"][idx], d["exact_hi"][idx], \
            d["exact_lo"][idx]
        ids_parts.append((sel, unpack_ids(d["id_bytes"], d["id_offsets"], idx)))
    width = max([p[1].dtype.itemsize for p in ids_parts], default=1)
    ids = np.empty(k, f"S{width}")
    for sel, v in ids_parts:
        ids[sel] = v
    removed, keeper, reason = graph.cluster(forest, nodes, score, length, ids, hi, lo, exact)
    counts = {f"dedup.{graph.REASONS[r]}": int(c) for r, c in zip(*np.unique(reason, return_counts=True))}
    shard_of = removed >> 32
    bounds = np.searchsorted(shard_of, np.arange(n_shards + 1))
    dup_of = ids[np.searchsorted(nodes, keeper)]
    for s in range(n_shards):
        a, b = bounds[s], bounds[s + 1]
        save_npz(io.join(work, "clusters", f"{s:05d}.npz"), idx=(removed[a:b] & 0xFFFFFFFF).astype(np.uint32),
                  reason=reason[a:b], duplicate_of=dup_of[a:b])
    io.write_marker(io.join(work, "clusters", "done"), fp, removed=len(removed),
                    rejected=dict(sorted(counts.items())))


# (d) filter --------------------------------------------------------------------------------------------------

def _filter(job: tuple) -> None:
    with _job(f"filter of shard {job[1]} ({job[0]})"):
        _filter_of(job)


def _filter_of(job: tuple) -> None:
    path, shard, work, rejected_path, fp, sink_pii = job
    r = load_npz(io.join(work, "clusters", f"{shard:05d}.npz"))
    gone = dict(zip(r["idx"].tolist(), zip(r["reason"].tolist(), r["duplicate_of"].tolist())))
    valid = load_npz(io.join(_sig_dir(work, shard), "docs.npz"))["valid"].tolist()  # a list: indexed per line

    def unchanged(row: int, line: bytes) -> bool:
        # A kept row that parsed cleanly in the signature stage (same file) and is in the writer's own form, with
        # no `reason` the reader would rename, reads back to the very document it is: copy its bytes, no JSON
        # round trip (most of this stage's time otherwise).
        return row not in gone and valid[row] and line.startswith(_DOC_LINE_START) and _REASON_KEY not in line

    # The output is an intermediate shard (a per-shard stage always follows a global one): zstd level 1 writes
    # it about twice as fast as the default 3, for slightly larger files.
    with JsonlWriter(io.join(work, "output", f"{shard:05d}.jsonl.zst"), level=1) as kept, \
            Sink(rejected_path, sink_pii) as rejected:
        for row, doc in read_rows(path, unchanged):
            if isinstance(doc, bytes):
                kept.write_line(doc)
            elif REASON in doc.metadata:
                rejected.write(doc)
            elif row in gone:
                reason, of = gone[row]
                doc.metadata[REASON] = f"dedup.{graph.REASONS[reason]}"
                doc.metadata["duplicate_of"] = of.decode("utf-8", "surrogatepass")
                rejected.write(doc)
            else:
                kept.write(doc)
    io.write_marker(io.join(work, "output", f"{shard:05d}.done"), fp)


_DOC_LINE_START = b'{"id": '  # how `writers.doc_line` begins a line
_REASON_KEY = b'"reason": '


# driver -------------------------------------------------------------------------------------------------------

def run_dedup_stages(shard_paths: list[str], workdir: str, cfg: DedupConfig = DedupConfig(), *,
                     workers: int = 1, parts: int = 1, stop_after: str | None = None,
                     rejected_dir: str | None = None, map_jobs: Callable[[Callable, list], list] | None = None,
                     sink_pii: dict | None = None) -> dict:
    """Run (or resume) the four stages with the `dedup` step's settings `cfg` over JSONL shards (module
    docstring). Returns {"docs", "removed", "pairs", "rejected" (count per reason), "outputs"}.

    `parts` splits each band's hash space into that many bucket jobs (a divisor of 256). `stop_after`
    ("signatures", "buckets", "clusters") stops early, as an interruption would. `rejected_dir`: where stage
    (d) writes rejected documents (`part-<shard>.jsonl.zst`; default `<workdir>/rejected/<shard>.jsonl.zst`).
    `map_jobs(fn, jobs) -> results` runs the jobs of a stage (default: `bessemer.data.runner` with `workers`
    local processes).
    `sink_pii`: the [[steps]] table of the pii step that redacts rejected documents (bessemer/data/sink.py)."""
    cfg.validate()
    if stop_after is not None and stop_after not in STAGES:
        raise ValueError(f"stop_after must be one of {', '.join(STAGES)} or None, got {stop_after!r}")
    if not 1 <= parts <= SLOTS or SLOTS % parts:
        raise ValueError(f"parts must divide {SLOTS} (1, 2, 4, ... {SLOTS}), got {parts}")
    score_key, exact, near = cfg.score_key, cfg.exact, cfg.near
    minhash = cfg.minhash.as_dict()
    work = str(workdir).rstrip("/")
    paths = [str(p) for p in shard_paths]
    if len(paths) >= 1 << 31:
        raise ValueError(f"at most 2^31 shards, got {len(paths)}")
    fp = io.fingerprint("dedup/2", minhash, score_key, exact, near, parts,
                        [(p, file_size(p)) for p in paths])
    n = len(paths)
    map_jobs = map_jobs or local_map_jobs(workers)
    what = f"dedup work dir {work}"

    sig_jobs = [(p, i, work, minhash, score_key, exact, near, fp) for i, p in enumerate(paths)
                if not io.marker_done(_sig_dir(work, i) + ".done", fp, what)]
    map_jobs(_signatures, sig_jobs)
    if stop_after == "signatures":
        return {}
    names = _edge_names(cfg, exact, near, parts)
    bands = ([None] if exact else []) + (list(range(cfg.num_bands)) if near else [])
    bucket_jobs = [(work, n, b, p, parts, minhash, exact, fp) for b in bands for p in range(parts)
                   if not io.marker_done(io.join(work, "edges", f"{_band_name(b)}-{p:03d}.done"), fp, what)]
    map_jobs(_bucket, bucket_jobs)
    if stop_after == "buckets":
        return {}
    if not io.marker_done(io.join(work, "clusters", "done"), fp, what):
        map_jobs(_clusters_job, [(work, n, names, exact, fp)])  # one job: on Ray, a task with its memory request
    if stop_after == "clusters":
        return {}
    rejected = str(rejected_dir).rstrip("/") if rejected_dir is not None else io.join(work, "rejected")
    pattern = "part-{:05d}.jsonl.zst" if rejected_dir is not None else "{:05d}.jsonl.zst"
    map_jobs(_filter, [(p, i, work, io.join(rejected, pattern.format(i)), fp, sink_pii) for i, p in enumerate(paths)
                       if not io.marker_done(io.join(work, "output", f"{i:05d}.done"), fp, what)])

    done = io.read_json(io.join(work, "clusters", "done"))
    pairs = sum(io.read_json(io.join(work, "edges", nm + ".done"))["pairs"] for nm in names
                if not nm.startswith("exact"))
    docs = sum(io.read_json(_sig_dir(work, i) + ".done")["docs"] for i in range(n))
    return {"docs": docs, "removed": done["removed"], "pairs": pairs, "rejected": done["rejected"],
            "outputs": [io.join(work, "output", f"{i:05d}.jsonl.zst") for i in range(n)]}
