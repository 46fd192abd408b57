"""Global near-duplicate dedup at crawl scale: the file-based stages end to end, against rensa, at two sizes.

Generates `--docs` documents (~100 words each, seeded) as JSONL shards of `--shard-docs` documents under a temp
dir: a fifth of them are planted near-duplicate clusters of 2-6 members (a base text and copies with one run of
2-5 words substituted, inserted or deleted, or re-cased and re-punctuated exact copies), dealt over all shards;
the rest are unrelated. Then:

- ours: `run_dedup_stages` (signatures -> buckets -> clusters -> filter, 16 bands x 7 rows, verify >= 0.6) with
  `--workers` local processes; each stage runs in a fresh process whose jobs report their peak RSS
  (VmHWM of every worker, and of the driver, which runs the clusters stage itself).
- rensa (reference, one process): the same shards read, the same normalized word 5-gram shingles,
  `RMinHash(112, 1)`, `RMinHashLSH(0.6, 112, 16)` insert then query, candidates kept at `jaccard >= 0.6`,
  union-find.

Both are scored by pairwise precision/recall against the planted clusters. Everything but the generation is
timed. docs/s per core = documents / CPU seconds (user + system, every process of the run, interpreter start-up
included): on a shared machine wall time depends on the neighbours, CPU time much less; wall times are printed too. Prints per-stage wall time and peak RSS, then
`ratio dedup_vs_rensa` (our docs/s per core / rensa's docs/s; goal >= 1.2) and
`ratio dedup_peak_rss_<N>_vs_<N/4>` (the largest stage peak at N over the one at N/4; goal <= 1.2).
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

STAGES = ("signatures", "buckets", "clusters", "filter")
NUM_BANDS, ROWS, THRESHOLD = 16, 7, 0.6


def _label(n: int) -> str:
    return f"{n // 1_000_000}m" if n % 1_000_000 == 0 else f"{n // 1000}k" if n % 1000 == 0 else str(n)


# corpus ---------------------------------------------------------------------------------------------------------

def _plan(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every original document o: (cluster, variant) (-1 for unrelated ones), and the shuffled order."""
    rng = np.random.default_rng([seed, 0])
    sizes = rng.integers(2, 7, size=max(1, n // 5 // 4))
    sizes = sizes[np.cumsum(sizes) <= n // 5]
    cluster = np.full(n, -1, np.int64)
    variant = np.full(n, -1, np.int64)
    m = int(sizes.sum())
    cluster[:m] = np.repeat(np.arange(len(sizes)), sizes)
    variant[:m] = np.arange(m) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    return cluster, variant, rng.permutation(n)


def _vocab(seed: int) -> list[str]:
    rng = np.random.default_rng([seed, 1])
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    lens = rng.integers(2, 10, 20000)
    return ["".join(letters[rng.integers(0, 26, k)]) for k in lens]


def _words(rng: np.random.Generator, vocab: list[str], n: int) -> list[str]:
    common = np.minimum(rng.zipf(1.3, n) - 1, len(vocab) - 1)  # half Zipf-like, half uniform, as in text
    rare = rng.integers(0, len(vocab), n)
    return [vocab[i] for i in np.where(rng.random(n) < 0.5, common, rare)]


def _text(words: list[str]) -> str:
    out = []
    for i in range(0, len(words), 12):  # sentences of 12 words
        s = " ".join(words[i : i + 12])
        out.append(s[:1].upper() + s[1:] + ".")
    return " ".join(out)


def _doc_text(o: int, cluster: int, variant: int, seed: int, vocab: list[str], shard_rng: np.random.Generator) -> str:
    if cluster < 0:  # unrelated: from the shard's generator (members of a cluster come from the cluster's)
        return _text(_words(shard_rng, vocab, int(shard_rng.integers(80, 121))))
    rng = np.random.default_rng([seed, 3, cluster])
    words = _words(rng, vocab, int(rng.integers(80, 121)))
    if variant == 0:
        return _text(words)
    rng = np.random.default_rng([seed, 4, cluster, variant])
    if rng.random() < 0.1:  # an exact copy after normalization
        return _text(words).upper().replace(".", "!")
    run = int(rng.integers(2, 6))  # one changed phrase: pair Jaccard ~0.8-0.9 on ~100 words
    at = int(rng.integers(0, len(words)))
    op = rng.random()
    if op < 0.6:
        words[at : at + run] = _words(rng, vocab, run)
    elif op < 0.8:
        words[at:at] = _words(rng, vocab, run)
    else:
        del words[at : at + run]
    return _text(words)


def _gen_shard(job: tuple) -> int:
    n, seed, shard, lo, hi, path = job
    from bessemer.data.document import Document
    from bessemer.data.writers import JsonlWriter

    cluster, variant, order = _plan(n, seed)
    vocab = _vocab(seed)
    score = np.random.default_rng([seed, 5, shard]).random(hi - lo)
    shard_rng = np.random.default_rng([seed, 2, shard])
    with JsonlWriter(path, level=1) as w:
        for k, o in enumerate(order[lo:hi].tolist()):
            text = _doc_text(o, int(cluster[o]), int(variant[o]), seed, vocab, shard_rng)
            w.write(Document(f"doc-{o:07d}", text, {"quality_score": round(float(score[k]), 3)}))
    return hi - lo


def generate(root: Path, n: int, shard_docs: int, seed: int, workers: int) -> list[str]:
    from bessemer.data.runner import LocalRunner

    bounds = list(range(0, n, shard_docs)) + [n]
    jobs = [(n, seed, i, bounds[i], bounds[i + 1], str(root / f"part-{i:05d}.jsonl.zst"))
            for i in range(len(bounds) - 1)]
    LocalRunner(workers).map(_gen_shard, jobs)
    return [j[-1] for j in jobs]


def truth(n: int, seed: int) -> np.ndarray:
    """Planted label of every original document (unrelated ones: a label of their own)."""
    cluster, _, _ = _plan(n, seed)
    return np.where(cluster >= 0, cluster, n + np.arange(n))


def precision_recall(labels: np.ndarray, predicted: np.ndarray) -> tuple[float, float]:
    """Pairwise precision/recall of the clustering `predicted` against `labels` (both per document)."""
    def pairs(*keys: np.ndarray) -> int:
        _, counts = np.unique(np.stack(keys, axis=1), axis=0, return_counts=True)
        return int((counts * (counts - 1) // 2).sum())

    hit = pairs(labels, predicted)
    return hit / max(pairs(predicted, predicted), 1), hit / max(pairs(labels, labels), 1)


# our stages, one per process ---------------------------------------------------------------------------------

def _peak_kb() -> int:
    """This process's peak RSS in KiB: VmHWM, the high-water mark of its own address space. (ru_maxrss would
    also count the memory of the parent it was forked from before exec.)"""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _measured(fn_job: tuple) -> tuple:
    fn, job = fn_job
    out = fn(job)
    return out, _peak_kb()


def _cpu_seconds() -> float:
    """User + system CPU time of this process and its finished children (the stage's worker pool)."""
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))


def _run_stage(spec: dict) -> None:
    """In a fresh process: one stage of `run_dedup_stages` (its jobs on a pool), reporting peaks as JSON."""
    from bessemer.data.dedup.minhash import DedupConfig
    from bessemer.data.dedup.stages import run_dedup_stages
    from bessemer.data.runner import LocalRunner

    runner = LocalRunner(spec["workers"])
    peaks = [0]

    def measured_map(fn, jobs):
        res = runner.map(_measured, [(fn, j) for j in jobs])
        peaks.extend(p for _, p in res)
        return [r for r, _ in res]

    t = time.perf_counter()
    stop = None if spec["stage"] == "filter" else spec["stage"]
    cfg = DedupConfig(num_bands=NUM_BANDS, rows_per_band=ROWS, threshold=THRESHOLD)
    r = run_dedup_stages(spec["paths"], spec["work"], cfg, map_jobs=measured_map, stop_after=stop)
    print(json.dumps({"wall": time.perf_counter() - t, "cpu": _cpu_seconds(), "worker_kb": max(peaks),
                      "driver_kb": _peak_kb(),
                      "result": {k: v for k, v in r.items() if k != "outputs"}}))


def _subprocess(arg: dict) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    t = time.perf_counter()
    out = subprocess.run([sys.executable, __file__, "--_child", json.dumps(arg)], capture_output=True, text=True,
                         env=env, check=False)
    if out.returncode:
        sys.exit(f"{arg.get('stage', 'rensa')} failed:\n{out.stderr[-4000:]}")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    r["process_wall"] = time.perf_counter() - t
    return r


def ours(paths: list[str], work: str, workers: int, n: int, labels: np.ndarray) -> dict:
    stages = {}
    for stage in STAGES:
        stages[stage] = _subprocess({"stage": stage, "paths": paths, "work": work, "workers": workers})
    from bessemer.data import io
    from bessemer.data.readers import open_bytes

    predicted = np.arange(n)
    rejected = io.join(work, "rejected")
    for name in io.listdir(rejected):
        with open_bytes(io.join(rejected, name)) as f:
            for line in f:
                d = json.loads(line)
                predicted[int(d["id"][4:])] = int(d["metadata"]["duplicate_of"][4:])
    wall = sum(s["process_wall"] for s in stages.values())
    cpu = sum(s["cpu"] for s in stages.values())
    p, r = precision_recall(labels, predicted)
    return {"stages": stages, "wall": wall, "cpu": cpu, "precision": p, "recall": r,
            "result": stages["filter"]["result"]}


# rensa --------------------------------------------------------------------------------------------------------

def _run_rensa(spec: dict) -> None:
    from rensa import RMinHash, RMinHashLSH

    from bessemer.data.dedup.files import read_docs
    from bessemer.data.dedup.minhash import normalize_text, shingle_strings

    t = time.perf_counter()
    lsh = RMinHashLSH(THRESHOLD, NUM_BANDS * ROWS, NUM_BANDS)
    mh, ids = [], []
    for path in spec["paths"]:
        for d in read_docs(path):
            m = RMinHash(NUM_BANDS * ROWS, 1)
            m.update(shingle_strings(normalize_text(d.text), 5))
            lsh.insert(len(mh), m)
            mh.append(m)
            ids.append(int(d.id[4:]))
    parent = list(range(len(mh)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, m in enumerate(mh):
        for j in lsh.query(m):
            if j > i and m.jaccard(mh[j]) >= THRESHOLD:
                a, b = find(i), find(j)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    root = [find(i) for i in range(len(mh))]
    wall = time.perf_counter() - t
    predicted = np.empty(len(ids), np.int64)
    predicted[ids] = np.array(ids)[root]
    np.save(spec["out"], predicted)
    print(json.dumps({"wall": wall, "cpu": _cpu_seconds(),
                      "driver_kb": _peak_kb()}))


# main ---------------------------------------------------------------------------------------------------------

def run_size(n: int, args: argparse.Namespace, root: Path, with_rensa: bool) -> dict:
    data = root / f"in-{n}"
    data.mkdir(parents=True)
    t = time.perf_counter()
    paths = generate(data, n, args.shard_docs, args.seed, args.workers)
    gen = time.perf_counter() - t
    labels = truth(n, args.seed)
    print(f"corpus {_label(n)}: {n:,} docs in {len(paths)} shards of <= {args.shard_docs:,} "
          f"({sum(os.path.getsize(p) for p in paths) / 2**20:,.0f} MiB zstd, generated in {gen:.0f} s); "
          f"planted: {int((labels < n).sum()):,} docs in {len(np.unique(labels[labels < n])):,} clusters", flush=True)
    r = ours(paths, str(root / f"work-{n}"), args.workers, n, labels)
    for stage, s in r["stages"].items():
        peak = s["driver_kb"] if stage == "clusters" else s["worker_kb"]
        print(f"  stage {stage:<10} {s['process_wall']:7.1f} s wall {s['cpu']:7.1f} s CPU   peak RSS {peak / 1024:7.1f} MB"
              f"   (driver {s['driver_kb'] / 1024:.0f} MB)", flush=True)
    r["peak_kb"] = max(s["driver_kb"] if st == "clusters" else s["worker_kb"] for st, s in r["stages"].items())
    res = r["result"]
    rate = n / r["cpu"]
    print(f"dedup (ours, {args.workers} workers) {r['wall']:7.1f} s wall {r['cpu']:7.1f} s CPU  {rate:8,.0f} docs/s/core "
          f"({n / r['wall'] / args.workers:,.0f} by wall / workers)  "
          f"precision {r['precision']:.4f}  recall {r['recall']:.4f}  removed {res['removed']:,} "
          f"{res['rejected']}  pairs {res['pairs']:,}  peak stage RSS {r['peak_kb'] / 1024:.0f} MB", flush=True)
    r["rate"] = rate
    if with_rensa:
        out = root / f"rensa-{n}.npy"
        s = _subprocess({"rensa": True, "paths": paths, "out": str(out)})
        p, rc = precision_recall(labels, np.load(out))
        r["rensa_rate"] = n / s["cpu"]
        print(f"rensa (reference, 1 process) {s['wall']:7.1f} s wall {s['cpu']:7.1f} s CPU  {r['rensa_rate']:8,.0f} "
              f"docs/s/core ({n / s['wall']:,.0f} by wall)  "
              f"precision {p:.4f}  recall {rc:.4f}  peak RSS {s['driver_kb'] / 1024:.0f} MB", flush=True)
    shutil.rmtree(data)
    shutil.rmtree(root / f"work-{n}")
    return r


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--_child":
        spec = json.loads(sys.argv[2])
        _run_rensa(spec) if spec.get("rensa") else _run_stage(spec)
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--docs", type=int, default=1_000_000, help="documents of the large run (the small one: 1/4)")
    p.add_argument("--shard-docs", type=int, default=20_000, help="documents per input shard")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-scale", action="store_true", help="skip the run at docs/4 (and the RSS ratio)")
    p.add_argument("--no-rensa", action="store_true", help="skip the rensa reference")
    p.add_argument("--dir", default=None, help="where to put the shards and work dirs (default: a temp dir)")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="dedup-scale-", dir=args.dir))
    try:
        small = None if args.no_scale else run_size(args.docs // 4, args, root, with_rensa=False)
        big = run_size(args.docs, args, root, with_rensa=not args.no_rensa)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("ratio = ours / reference; dedup_vs_rensa > 1: ours is faster per core; peak_rss <= 1.2: memory does "
          "not grow with the corpus")
    if not args.no_rensa:
        print(f"ratio dedup_vs_rensa {big['rate'] / big['rensa_rate']:.3f}")
    if small is not None:
        print(f"ratio dedup_peak_rss_{_label(args.docs)}_vs_{_label(args.docs // 4)} "
              f"{big['peak_kb'] / small['peak_kb']:.3f}")


if __name__ == "__main__":
    main()
