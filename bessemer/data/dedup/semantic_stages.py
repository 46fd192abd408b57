"""Semantic dedup across a corpus in resumable stages (the `semantic-dedup` step as a global step).

    <work>/embed/<shard>/emb.npy       (a) per shard: (n, 384) float32 MiniLM embeddings (zero rows: not embedded)
    <work>/embed/<shard>/docs.npz          score, length, valid, ids
    <work>/centers.npy                 (b) spherical k-means on a seeded sample of at most `sample` rows
    <work>/assign/<shard>.npy          (c) per shard: (cluster, index) of every valid row, sorted by cluster,
                                           and assign/<shard>-index.npy: where each cluster starts
    <work>/found/<part>.npz            (d) per range of clusters: members gathered from every shard, ordered
                                           best first (score, length, id), greedy removal at cosine >= threshold
    <work>/removed/<shard>.npz         (e) per shard: sorted indices to drop, duplicate_of, similarity
    <work>/output/<shard>.jsonl.zst    (f) per shard: kept documents; the rejected ones go to the sink

With no more than 4096 documents and `clusters` unset, everything is one cluster (all pairs compared), as in
`SemanticDedupStep`, and the answer equals the step over the concatenated shards. Files go through
`bessemer.data.io`; markers hold the run's fingerprint, so a rerun resumes.
"""

import numpy as np

from bessemer.data import io
from bessemer.data.dedup.files import (
    load_npy,
    load_npz,
    load_rows,
    pack_ids,
    read_docs,
    save_npy,
    save_npz,
    unpack_ids,
)
from bessemer.data.dedup.minhash import doc_score
from bessemer.data.dedup.semantic_cluster import (
    EXACT_MAX_DOCS,
    greedy_duplicates,
    kmeans_fit,
)
from bessemer.data.document import REASON
from bessemer.data.readers import file_size
from bessemer.data.runner import local_map_jobs
from bessemer.data.sink import Sink
from bessemer.data.writers import JsonlWriter

REASON_NAME = "semantic-dedup.semantic_duplicate"
CHUNK = 1024  # documents embedded at once: token lists exist for one chunk, not the whole shard


def _dir(work: str, shard: int) -> str:
    return io.join(work, "embed", f"{shard:05d}")


def _embed(job: tuple) -> int:
    path, shard, work, max_tokens, batch_size, score_key, fp = job
    from bessemer.data.dedup.embed import load_encoder

    encoder = load_encoder(max_tokens)
    chunks, valid, score, length, ids, pending = [], [], [], [], [], []

    def flush() -> None:
        texts = [t for t in pending if t is not None]
        emb = encoder.encode(texts, batch_size) if texts else np.zeros((0, encoder.dim), np.float32)
        out = np.zeros((len(pending), encoder.dim), np.float32)
        out[[i for i, t in enumerate(pending) if t is not None]] = emb
        chunks.append(out)
        pending.clear()

    for doc in read_docs(path):
        ok = REASON not in doc.metadata
        valid.append(ok)
        score.append(doc_score(doc, score_key))
        length.append(len(doc.text))
        ids.append(doc.id)
        pending.append(doc.text if ok else None)
        if len(pending) >= CHUNK:
            flush()
    flush()
    out = _dir(work, shard)
    save_npy(io.join(out, "emb.npy"), np.concatenate(chunks))
    blob, offsets = pack_ids(ids)
    save_npz(io.join(out, "docs.npz"), score=np.array(score, np.float64), length=np.array(length, np.int64),
             valid=np.array(valid, bool), id_bytes=blob, id_offsets=offsets)
    io.write_marker(out + ".done", fp, docs=len(valid), embedded=int(sum(valid)))
    return len(valid)


def _centers(work: str, n_shards: int, counts: list[int], k: int, sample: int, seed: int) -> np.ndarray:
    """k-means centers fitted on at most `sample` valid rows, drawn (seeded) in proportion to each shard."""
    total = sum(counts)
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(n_shards):
        valid = np.flatnonzero(load_npz(io.join(_dir(work, s), "docs.npz"))["valid"])
        take = valid if total <= sample else np.sort(rng.choice(valid, min(len(valid), round(sample * len(valid)
                                                                                           / total)), replace=False))
        if len(take):
            rows.append(load_rows(io.join(_dir(work, s), "emb.npy"), take))
    x = np.concatenate(rows) if rows else np.zeros((1, 384), np.float32)
    return kmeans_fit(x, k, seed=seed)[1]


def _assign(job: tuple) -> None:
    shard, work, k, fp = job
    valid = np.flatnonzero(load_npz(io.join(_dir(work, shard), "docs.npz"))["valid"])
    centers = load_npy(io.join(work, "centers.npy"))
    url = io.join(_dir(work, shard), "emb.npy")
    if io.is_local(url):  # memory-mapped: one chunk's pages at a time
        emb = np.load(io.url_to_fs(url)[1], mmap_mode="r")
    else:
        emb = load_npy(url)
    labels = np.empty(len(valid), np.int64)
    for lo in range(0, len(valid), 8192):  # (8192, k) scores at a time
        labels[lo : lo + 8192] = np.argmax(np.asarray(emb[valid[lo : lo + 8192]]) @ centers.T, axis=1)
    order = np.argsort(labels, kind="stable")
    save_npy(io.join(work, "assign", f"{shard:05d}.npy"), np.stack([labels[order], valid[order]], axis=1))
    save_npy(io.join(work, "assign", f"{shard:05d}-index.npy"), np.searchsorted(labels[order], np.arange(k + 1)))
    io.write_marker(io.join(work, "assign", f"{shard:05d}.done"), fp)


def _find(job: tuple) -> None:
    """Clusters [c0, c1): gather their members from every shard, then greedy removal inside each."""
    work, n_shards, part, c0, c1, threshold, fp = job
    rows, emb, score, length, ids, label = [], [], [], [], [], []
    for s in range(n_shards):
        index = load_npy(io.join(work, "assign", f"{s:05d}-index.npy"))
        a = load_npy(io.join(work, "assign", f"{s:05d}.npy"))[index[c0] : index[c1]]
        if not len(a):
            continue
        idx = a[:, 1]
        d = load_npz(io.join(_dir(work, s), "docs.npz"))
        rows.append((np.int64(s) << 32) | idx)
        label.append(a[:, 0])
        emb.append(load_rows(io.join(_dir(work, s), "emb.npy"), idx))
        score.append(d["score"][idx])
        length.append(d["length"][idx])
        ids.append(unpack_ids(d["id_bytes"], d["id_offsets"], idx))
    gone_rows, of_ids, sims = [], [], []
    if rows:
        rows_a, label_a, emb_a = np.concatenate(rows), np.concatenate(label), np.concatenate(emb)
        width = max(x.dtype.itemsize for x in ids)
        ids_a = np.concatenate([x.astype(f"S{width}") for x in ids])
        _, id_rank = np.unique(ids_a, return_inverse=True)
        order = np.lexsort((rows_a, id_rank.ravel(), -np.concatenate(length), -np.concatenate(score), label_a))
        bounds = np.flatnonzero(np.diff(label_a[order])) + 1
        for members in np.split(order, bounds):  # one cluster, best document first
            g, o, v = greedy_duplicates(emb_a[members], threshold)
            gone_rows.append(rows_a[members[g]])
            of_ids.append(ids_a[members[o]])
            sims.append(v)
    cat = (lambda x, dt: np.concatenate(x) if x else np.empty(0, dt))
    save_npz(io.join(work, "found", f"{part:05d}.npz"), rows=cat(gone_rows, np.int64), of=cat(of_ids, "S1"),
             sim=cat(sims, np.float64))
    io.write_marker(io.join(work, "found", f"{part:05d}.done"), fp)


def _split(work: str, n_shards: int, parts: int, fp: str) -> None:
    found = [load_npz(io.join(work, "found", f"{p:05d}.npz")) for p in range(parts)]
    rows = np.concatenate([f["rows"] for f in found])
    width = max([f["of"].dtype.itemsize for f in found], default=1)
    of = np.concatenate([f["of"].astype(f"S{width}") for f in found]) if found else np.empty(0, "S1")
    sim = np.concatenate([f["sim"] for f in found])
    order = np.argsort(rows)
    rows, of, sim = rows[order], of[order], sim[order]
    bounds = np.searchsorted(rows >> 32, np.arange(n_shards + 1))
    for s in range(n_shards):
        a, b = bounds[s], bounds[s + 1]
        save_npz(io.join(work, "removed", f"{s:05d}.npz"), idx=(rows[a:b] & 0xFFFFFFFF).astype(np.uint32),
                 duplicate_of=of[a:b], similarity=sim[a:b])
    io.write_marker(io.join(work, "removed", "done"), fp, removed=len(rows))


def _filter(job: tuple) -> None:
    path, shard, work, rejected_path, fp, sink_pii = job
    url = io.join(work, "removed", f"{shard:05d}.npz")
    r = load_npz(url) if io.exists(url) else {"idx": np.empty(0), "duplicate_of": np.empty(0), "similarity": []}
    gone = dict(zip(r["idx"].tolist(), zip(r["duplicate_of"].tolist(), np.asarray(r["similarity"]).tolist())))
    with JsonlWriter(io.join(work, "output", f"{shard:05d}.jsonl.zst")) as kept, \
            Sink(rejected_path, sink_pii) as rejected:
        for row, doc in enumerate(read_docs(path)):
            if REASON in doc.metadata:
                rejected.write(doc)
            elif row in gone:
                of, sim = gone[row]
                doc.metadata[REASON] = REASON_NAME
                doc.metadata["duplicate_of"] = of.decode("utf-8", "surrogatepass")
                doc.metadata["similarity"] = round(sim, 4)
                rejected.write(doc)
            else:
                kept.write(doc)
    io.write_marker(io.join(work, "output", f"{shard:05d}.done"), fp)


def run_semantic_stages(shard_paths: list[str], workdir: str, *, threshold: float | None = 0.8,
                        max_tokens: int = 256, clusters: int | None = None, seed: int = 0,
                        score_key: str | None = "quality_score", batch_size: int = 32, sample: int = 100_000,
                        cluster_jobs: int = 0, rejected_dir: str | None = None, workers: int = 1,
                        map_jobs=None, sink_pii: dict | None = None) -> dict:
    """Run (or resume) the stages (module docstring). `clusters`: k (None: round(sqrt(n)), or 1 cluster up to
    4096 documents); `sample`: rows k-means is fitted on; `cluster_jobs`: jobs of stage (d) (0: one per 64
    clusters). `threshold=None` keeps every document. Returns {"docs", "removed", "rejected", "embedded",
    "clusters", "outputs"}."""
    work = str(workdir).rstrip("/")
    paths = [str(p) for p in shard_paths]
    n = len(paths)
    map_jobs = map_jobs or local_map_jobs(workers)
    fp = io.fingerprint("semantic/1", threshold, max_tokens, clusters, seed, score_key, sample, cluster_jobs,
                        [(p, file_size(p)) for p in paths])
    what = f"semantic dedup work dir {work}"
    k = 0
    if threshold is not None:
        map_jobs(_embed, [(p, i, work, max_tokens, batch_size, score_key, fp) for i, p in enumerate(paths)
                          if not io.marker_done(_dir(work, i) + ".done", fp, what)])
        counts = [io.read_json(_dir(work, i) + ".done")["embedded"] for i in range(n)]
        total = sum(counts)
        k = clusters or (1 if total <= EXACT_MAX_DOCS else max(1, round(np.sqrt(total))))
        if not io.marker_done(io.join(work, "centers.done"), fp, what):
            if k == 1:  # one cluster: every pair compared, no k-means
                save_npy(io.join(work, "centers.npy"), np.ones((1, 384), np.float32))
            else:
                save_npy(io.join(work, "centers.npy"), _centers(work, n, counts, k, sample, seed))
            io.write_marker(io.join(work, "centers.done"), fp)
        k = len(load_npy(io.join(work, "centers.npy")))
        map_jobs(_assign, [(i, work, k, fp) for i in range(n)
                           if not io.marker_done(io.join(work, "assign", f"{i:05d}.done"), fp, what)])
        parts = cluster_jobs or max(1, -(-k // 64))
        cuts = [p * k // parts for p in range(parts + 1)]
        map_jobs(_find, [(work, n, p, cuts[p], cuts[p + 1], threshold, fp) for p in range(parts)
                         if not io.marker_done(io.join(work, "found", f"{p:05d}.done"), fp, what)])
        if not io.marker_done(io.join(work, "removed", "done"), fp, what):
            _split(work, n, parts, fp)
    rejected = str(rejected_dir).rstrip("/") if rejected_dir is not None else io.join(work, "rejected")
    pattern = "part-{:05d}.jsonl.zst" if rejected_dir is not None else "{:05d}.jsonl.zst"
    map_jobs(_filter, [(p, i, work, io.join(rejected, pattern.format(i)), fp, sink_pii) for i, p in enumerate(paths)
                       if not io.marker_done(io.join(work, "output", f"{i:05d}.done"), fp, what)])
    removed = io.read_json(io.join(work, "removed", "done"))["removed"] if threshold is not None else 0
    if threshold is not None:
        docs = sum(io.read_json(_dir(work, i) + ".done")["docs"] for i in range(n))
        embedded = sum(io.read_json(_dir(work, i) + ".done")["embedded"] for i in range(n))
    else:
        docs = embedded = 0
        for p in paths:
            docs += sum(1 for _ in read_docs(p))
    return {"docs": docs, "removed": removed, "rejected": {REASON_NAME: removed} if removed else {},
            "embedded": embedded, "clusters": k,
            "outputs": [io.join(work, "output", f"{i:05d}.jsonl.zst") for i in range(n)]}
