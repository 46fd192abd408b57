"""Dedup across shards in four resumable stages (the `DedupStep` answer, for data that does not fit one process).

    <workdir>/signatures/<shard>.npz   (a) per input shard: exact hash, MinHash signature, score, length, ids
    <workdir>/pairs/<band>.npy         (b) per band: verified candidate pairs, as global row numbers
    <workdir>/removals.json            (c) union-find over exact groups and all pairs -> rows to drop
    <workdir>/output/<shard>.jsonl.zst (d) per shard: kept documents; rejected/<shard>.jsonl.zst the others,
                                           with metadata reason and duplicate_of

Every output is written to `.tmp` and renamed, then a `<name>.done` marker holding the parameters'
fingerprint is written next to it; a rerun skips the outputs whose marker matches, so an interrupted run
resumes and ends with the same files as an uninterrupted one. A marker from other parameters or inputs is
an error, not a mix. Stages (a) and (d) are independent per shard and (b) per band: `workers` processes
run them, or `map_jobs` (the pipeline executor passes Ray tasks there). Global row numbers are the shards' rows in `shard_paths` order, so they do not depend on
`workers`.
"""

import hashlib
import json
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from bessemer.data.dedup import (
    MinHashConfig,
    Signatures,
    band_candidates,
    choose_keepers,
    removals,
)
from bessemer.data.document import Document
from bessemer.data.pipeline import REASON, InputConfig
from bessemer.data.readers import read_jsonl
from bessemer.data.sink import Sink
from bessemer.data.writers import JsonlWriter

STAGES = ("signatures", "buckets", "clusters", "filter")


def _read(path: str) -> list[Document]:
    return list(read_jsonl(path, Path(path).name, InputConfig(paths=[path])))


def _done(marker: Path, fp: str) -> bool:
    if not marker.exists():
        return False
    found = json.loads(marker.read_text())["fingerprint"]
    if found != fp:
        raise RuntimeError(f"{marker} was written by a different dedup run (fingerprint {found}, this run {fp}); "
                           "use another workdir or delete it")
    return True


def _mark(marker: Path, fp: str) -> None:
    tmp = marker.with_name(marker.name + ".tmp")
    tmp.write_text(json.dumps({"fingerprint": fp}))
    os.replace(tmp, marker)


def _save_npz(path: Path, **arrays) -> None:
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def _signatures(job: tuple) -> None:
    path, out, cfg_d, score_key, near, fp = job
    cfg = MinHashConfig(**cfg_d)
    docs = _read(path)
    # Input rows the reader already rejected stay in the row numbering (so stage d can count them) but never
    # match anything: `valid` = False.
    valid = np.array([REASON not in d.metadata for d in docs], dtype=bool)
    s = Signatures.of(docs, cfg, cfg.permutations(), score_key, near)
    _save_npz(out, exact=s.exact, sig=s.sig, score=s.score, length=s.length, valid=valid,
              ids=np.array(s.ids, dtype=object).astype(str) if s.ids else np.empty(0, "U1"))
    _mark(out.with_suffix(".done"), fp)


def _load_all(workdir: Path, n_shards: int, *keys: str) -> tuple[dict, np.ndarray]:
    """Concatenate `keys` over the signature files; also the first global row of each shard."""
    parts: dict[str, list] = {k: [] for k in keys}
    starts = [0]
    for i in range(n_shards):
        with np.load(workdir / "signatures" / f"{i:05d}.npz") as z:
            for k in keys:
                parts[k].append(z[k])
            starts.append(starts[-1] + len(z["valid"]))
    return {k: np.concatenate(v) for k, v in parts.items()}, np.array(starts)


def _live_rows(exact: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """First valid row of each exact group: the only rows that enter LSH (as in `find_duplicates`)."""
    rows = np.flatnonzero(valid)
    _, first = np.unique(exact[rows], return_index=True)
    return rows[np.sort(first)]


def _without_exact(a: dict) -> None:
    """`exact=False`: every row its own exact group (as in `DedupStep`)."""
    a["exact"] = np.arange(len(a["exact"]), dtype=np.uint64)


def _bucket(job: tuple) -> None:
    workdir, n_shards, band, cfg_d, exact, fp = job
    cfg = MinHashConfig(**cfg_d)
    a, _ = _load_all(workdir, n_shards, "exact", "sig", "valid")
    if not exact:
        _without_exact(a)
    rows = _live_rows(a["exact"], a["valid"])
    pairs = band_candidates(a["sig"][rows], rows, band, cfg)
    out = workdir / "pairs" / f"{band:03d}.npy"
    tmp = out.with_name(out.name + ".tmp.npy")
    np.save(tmp, pairs)
    os.replace(tmp, out)
    _mark(out.with_suffix(".done"), fp)


def _clusters(workdir: Path, n_shards: int, cfg: MinHashConfig, exact_groups: bool, near: bool, fp: str) -> None:
    a, starts = _load_all(workdir, n_shards, "exact", "score", "length", "valid", "ids")
    if not exact_groups:
        _without_exact(a)
    n = len(a["exact"])
    # Invalid rows get unique fake exact hashes so they group with nothing (their own row number; real
    # hashes colliding with these is as likely as any 64-bit collision).
    exact = a["exact"].copy()
    exact[~a["valid"]] = np.flatnonzero(~a["valid"]).astype(np.uint64)
    pairs = [np.load(workdir / "pairs" / f"{b:03d}.npy") for b in range(cfg.num_bands if near else 0)]
    ids = a["ids"].tolist()
    removed = removals(exact, choose_keepers(exact, pairs, a["score"], a["length"], ids), ids)
    shard = np.searchsorted(starts, np.arange(n), side="right") - 1
    per_shard: dict[str, dict[str, list[str]]] = {}
    for row, (reason, of) in sorted(removed.items()):
        per_shard.setdefault(str(int(shard[row])), {})[str(row - int(starts[shard[row]]))] = [reason, of]
    out = workdir / "removals.json"
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps({"removed": per_shard, "pairs": int(sum(len(p) for p in pairs))}))
    os.replace(tmp, out)
    _mark(workdir / "removals.done", fp)


def _filter(job: tuple) -> None:
    path, shard, workdir, rejected_path, fp, sink_pii = job
    removed = json.loads((workdir / "removals.json").read_text())["removed"].get(str(shard), {})
    with JsonlWriter(str(workdir / "output" / f"{shard:05d}.jsonl.zst")) as kept, \
            Sink(rejected_path, sink_pii) as rejected:
        for row, doc in enumerate(_read(path)):
            if REASON in doc.metadata:
                rejected.write(doc)
            elif str(row) in removed:
                reason, of = removed[str(row)]
                doc.metadata[REASON] = f"dedup.{reason}"
                doc.metadata["duplicate_of"] = of
                rejected.write(doc)
            else:
                kept.write(doc)
    _mark(workdir / "output" / f"{shard:05d}.done", fp)


def local_map(fn: Callable, jobs: list, workers: int) -> None:
    """Run `fn` over `jobs`: in this process, or in `workers` processes."""
    if workers <= 1 or len(jobs) <= 1:
        for j in jobs:
            fn(j)
        return
    with ProcessPoolExecutor(min(workers, len(jobs))) as pool:
        list(pool.map(fn, jobs))


def run_dedup_stages(shard_paths: list[str], workdir: str | Path, *, num_bands: int = 14, rows_per_band: int = 8,
                     ngram: int = 5, threshold: float | None = 0.6, seed: int = 1,
                     score_key: str | None = "quality_score", workers: int = 1,
                     stop_after: str | None = None, exact: bool = True, near: bool = True,
                     rejected_dir: str | Path | None = None,
                     map_jobs: Callable[[Callable, list], None] | None = None, sink_pii: dict | None = None) -> dict:
    """Run the four stages over JSONL shards (module docstring); returns {"docs", "removed", "pairs",
    "rejected" (count per reason)}. `stop_after` ("signatures", "buckets", "clusters") stops early, as an
    interruption would; calling again resumes. `exact`/`near` as in `DedupStep`. `rejected_dir`: where
    stage (d) writes the rejected documents (`part-<shard>.jsonl.zst`; default `<workdir>/rejected/<shard>.jsonl.zst`).
    `map_jobs(fn, jobs)` runs the per-shard and per-band jobs (default: `workers` local processes); `fn` is a
    module-level function and every job a picklable tuple, so any process pool or task system will do.
    `sink_pii`: the [[steps]] table of the pii step that redacts rejected documents (bessemer/data/sink.py)."""
    if not (exact or near):
        raise ValueError("dedup: exact and near are both off; turn on at least one")
    if stop_after is not None and stop_after not in STAGES:
        raise ValueError(f"stop_after must be one of {', '.join(STAGES)} or None, got {stop_after!r}")
    cfg = MinHashConfig(num_bands, rows_per_band, ngram, threshold, seed)
    cfg.validate()
    workdir = Path(workdir)
    rejected = Path(rejected_dir) if rejected_dir is not None else workdir / "rejected"
    for sub in ("signatures", "pairs", "output"):
        (workdir / sub).mkdir(parents=True, exist_ok=True)
    rejected.mkdir(parents=True, exist_ok=True)
    inputs = [(str(p), os.path.getsize(p)) for p in shard_paths]
    key = [cfg.as_dict(), score_key, inputs] + ([] if exact and near else [exact, near])
    fp = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]
    n = len(shard_paths)
    if map_jobs is None:
        def map_jobs(fn: Callable, jobs: list) -> None:
            local_map(fn, jobs, workers)

    sig_jobs = [(str(p), workdir / "signatures" / f"{i:05d}.npz", cfg.as_dict(), score_key, near, fp)
                for i, p in enumerate(shard_paths)
                if not _done(workdir / "signatures" / f"{i:05d}.done", fp)]
    map_jobs(_signatures, sig_jobs)
    if stop_after == "signatures":
        return {}
    band_jobs = [(workdir, n, b, cfg.as_dict(), exact, fp) for b in range(cfg.num_bands if near else 0)
                 if not _done(workdir / "pairs" / f"{b:03d}.done", fp)]
    map_jobs(_bucket, band_jobs)
    if stop_after == "buckets":
        return {}
    if not _done(workdir / "removals.done", fp):
        _clusters(workdir, n, cfg, exact, near, fp)
    if stop_after == "clusters":
        return {}
    rejected_name = "part-{:05d}.jsonl.zst" if rejected_dir is not None else "{:05d}.jsonl.zst"
    map_jobs(_filter, [(str(p), i, workdir, str(rejected / rejected_name.format(i)), fp, sink_pii)
                       for i, p in enumerate(shard_paths) if not _done(workdir / "output" / f"{i:05d}.done", fp)])

    result = json.loads((workdir / "removals.json").read_text())
    counts: dict[str, int] = {}
    for rows in result["removed"].values():
        for reason, _ in rows.values():
            counts[f"dedup.{reason}"] = counts.get(f"dedup.{reason}", 0) + 1
    _, starts = _load_all(workdir, n, "valid")
    return {"docs": int(starts[-1]), "removed": sum(counts.values()), "pairs": result["pairs"],
            "rejected": dict(sorted(counts.items()))}
