"""Whole-pipeline throughput: normalize -> quality -> dedup on the same generated corpus (a few thousand web-like
documents: reference-manual paragraphs, Chinese prose, template junk, exact and near copies), bessemer's local
executor against datatrove's LocalPipelineExecutor with the equivalent steps, measured in the same run with
the same shard count and worker count.

| bessemer | datatrove |
| --- | --- |
| normalize (ftfy, NFC, controls, width, whitespace) | FTFYFormatter |
| quality: Gopher repetition, Gopher, C4, FineWeb | GopherRepetition-, GopherQuality-, C4Quality-, FineWebQualityFilter |
| dedup: exact + MinHash 16 x 7, global | MinHash 16 x 7: signature, buckets, cluster, filter (4 executor runs) |

Both read JSONL and write JSONL (.zst for bessemer, .gz for datatrove, each's default). datatrove needs
`pip install datatrove spacy` (its English word tokenizer is spaCy's); without them its half is skipped with a
message. Ends with `ratio pipeline_vs_datatrove X` (bessemer docs/s / datatrove docs/s; > 1: bessemer faster).

    .venv/bin/python bench/pipeline_throughput.py [--docs 4000] [--workers 2] [--shards 4]
"""

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bessemer.demo.corpus import ZH_FILE, _prose_docs


def make_corpus(out_dir: Path, n_docs: int, n_files: int, seed: int = 0) -> int:
    """`n_docs` documents in `n_files` JSONL files: 70% fresh mixes of paragraphs, 10% exact copies, 10% near
    copies, 10% junk (template lines or keyword stuffing). A copy lands in a random file, so only a global
    dedup finds all of them."""
    rng = random.Random(seed)
    # Paragraphs of running prose, not grammar listings: spaCy (datatrove's word tokenizer) splits `f(x)` into
    # four tokens, so symbol-heavy paragraphs would fail its Gopher alpha-word rule and leave it little to do.
    paras = [p for d in _prose_docs(1_000_000) for p in d["text"].split("\n\n")
             if len(p) > 200 and sum(c in "()[]{}=:*'\"`<>_|" for c in p) < 0.01 * len(p)]
    zh = [line for line in ZH_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]
    junk = ["Click here to download now", "Welcome to our website", "Accept all cookies", "Subscribe today"]
    docs: list[str] = []
    for i in range(n_docs):
        r = rng.random()
        if docs and r < 0.1:
            docs.append(rng.choice(docs))
        elif docs and r < 0.2:
            words = rng.choice(docs).split(" ")
            for _ in range(max(1, len(words) // 40)):
                words[rng.randrange(len(words))] = "x"
            docs.append(" ".join(words))
        elif r < 0.3:
            docs.append("\n".join(rng.choice(junk) for _ in range(rng.randint(8, 20))))
        elif r < 0.35:
            docs.append("\n".join(rng.sample(zh, 6)))
        else:
            docs.append("\n\n".join(rng.sample(paras, rng.randint(2, 6))))
    lines: list[list[str]] = [[] for _ in range(n_files)]
    for i, text in enumerate(docs):
        lines[rng.randrange(n_files)].append(json.dumps({"id": f"doc-{i:06d}", "text": text}) + "\n")
    for k, part in enumerate(lines):
        (out_dir / f"raw-{k:02d}.jsonl").write_text("".join(part), encoding="utf-8")
    return len(docs)


def run_bessemer(raw: Path, out: Path, workers: int, shards: int) -> tuple[float, int]:
    from bessemer.data.phases import run_pipeline
    from bessemer.data.pipeline_toml import Pipeline

    pipeline = Pipeline.from_dict({
        "input": {"paths": [str(raw)], "format": "jsonl"},
        "steps": [{"name": "normalize"}, {"name": "quality", "boilerplate": False}, {"name": "dedup"}],
        "executor": {"kind": "local", "workers": workers, "shards": shards},
        "output": {"dir": str(out), "format": "jsonl.zst"},
    })
    t0 = time.perf_counter()
    stats = run_pipeline(pipeline, progress=False)
    seconds = time.perf_counter() - t0
    print("bessemer steps (seconds summed over shards): "
          + ", ".join(f"{s['name']} {s['seconds']:.2f} s" for s in stats["steps"])
          + f"; {stats['steps'][-2]['docs_out']:,} documents passed quality")
    return seconds, stats["docs_out"]


def _patch_xxhash() -> None:
    """datatrove 0.10 hands str to xxhash, which xxhash >= 4 refuses ("Strings must be encoded before
    hashing"); encode first, as older xxhash did. Workers are forked, so they inherit the patch."""
    import xxhash
    from datatrove.utils.hashes import xxhash as dt_xxhash

    dt_xxhash.xxhash32 = lambda data: xxhash.xxh32_intdigest(data.encode() if isinstance(data, str) else data)
    dt_xxhash.xxhash64 = lambda data: xxhash.xxh64_intdigest(data.encode() if isinstance(data, str) else data)


def _count_gz_lines(folder: Path) -> int:
    import gzip

    total = 0
    for path in folder.glob("*.gz"):
        with gzip.open(path, "rt") as f:
            total += sum(1 for _ in f)
    return total


def run_datatrove(raw: Path, work: Path, workers: int, shards: int) -> tuple[float, int]:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup import MinhashDedupSignature
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
    )
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )
    from datatrove.pipeline.formatters import FTFYFormatter
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.hashing import HashConfig

    _patch_xxhash()
    config = MinhashConfig(hash_config=HashConfig(precision=64), num_buckets=14, hashes_per_bucket=8)

    stage_s = {}

    def execute(steps: list, tasks: int, name: str) -> None:
        t = time.perf_counter()
        LocalPipelineExecutor(pipeline=steps, tasks=tasks, workers=min(workers, tasks),
                              logging_dir=str(work / "logs" / name), skip_completed=False).run()
        stage_s[name] = time.perf_counter() - t

    t0 = time.perf_counter()
    execute([JsonlReader(str(raw)), FTFYFormatter(), GopherRepetitionFilter(), GopherQualityFilter(),
             C4QualityFilter(), FineWebQualityFilter(), JsonlWriter(str(work / "filtered"))], shards, "filter")
    execute([JsonlReader(str(work / "filtered")), MinhashDedupSignature(output_folder=str(work / "sigs"),
                                                                        config=config)], shards, "signature")
    execute([MinhashDedupBuckets(input_folder=str(work / "sigs"), output_folder=str(work / "buckets"),
                                 config=config)], config.num_buckets, "buckets")
    execute([MinhashDedupCluster(input_folder=str(work / "buckets"), output_folder=str(work / "remove"),
                                 config=config)], 1, "cluster")
    execute([JsonlReader(str(work / "filtered")), MinhashDedupFilter(input_folder=str(work / "remove")),
             JsonlWriter(str(work / "out"))], shards, "filter-dups")
    seconds = time.perf_counter() - t0
    filtered, kept = _count_gz_lines(work / "filtered"), _count_gz_lines(work / "out")
    print("datatrove stages: " + ", ".join(f"{k} {v:.2f} s" for k, v in stage_s.items())
          + f"; {filtered:,} documents passed the filters")
    return seconds, kept


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=4000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--shards", type=int, default=4)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_pipeline_"))
    try:
        raw = tmp / "raw"
        raw.mkdir()
        n = make_corpus(raw, args.docs, args.shards)
        mb = sum(f.stat().st_size for f in raw.iterdir()) / 1e6
        print(f"corpus: {n:,} documents, {mb:.1f} MB in {args.shards} files; {args.workers} workers, "
              f"{args.shards} shards/tasks")
        ours, ours_kept = run_bessemer(raw, tmp / "bessemer", args.workers, args.shards)
        print(f"bessemer  normalize -> quality -> dedup:            {ours:6.2f} s  {n / ours:8,.0f} docs/s  "
              f"({ours_kept:,} kept)")
        try:
            import datatrove  # noqa: F401
            import spacy  # noqa: F401
        except ImportError as e:
            print(f"datatrove: skipped ({e.name} is not installed: pip install datatrove spacy)")
            return
        theirs, theirs_kept = run_datatrove(raw, tmp / "datatrove", args.workers, args.shards)
        print(f"datatrove ftfy -> gopher/c4/fineweb -> minhash (4): {theirs:6.2f} s  {n / theirs:8,.0f} docs/s  "
              f"({theirs_kept:,} kept)")
        print("ratio = bessemer docs/s / datatrove docs/s (> 1: bessemer faster)")
        print(f"ratio pipeline_vs_datatrove {theirs / ours:.3f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
