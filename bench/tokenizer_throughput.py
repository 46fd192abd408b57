"""Tokenizer encode throughput against raw HF `Tokenizer.encode_batch` measured in the same run, and the
statute compression of bench/tokenizer_compression.py.

- throughput: `bessemer tokenizer encode` (encode_inputs: workers read JSONL through the curation readers,
  tokenize, shuffle and write their own shards; the parent merges the index) with 1 and 2 workers, in MB of
  text per second, against raw `encode_batch` in one thread (TOKENIZERS_PARALLELISM=false, as each worker
  runs) on the same tokenizer and texts already in memory, ids fetched as Python lists (which any consumer
  needs). Per worker: by wall clock with one worker, and by CPU time with two (the children's CPU seconds
  from getrusage), since on a shared machine two workers may not get two cores. ratio = ours / raw (1.0 = no
  overhead over the bare Rust encoder); speedup = 1-worker wall time / 2-worker wall time.
- compression (bench/tokenizer_compression.py): bytes/token on held-out real statutes against a plain
  byte-level BPE of the same vocabulary, and statute-reference boundary crossings; skipped with a message
  when the outside data is not there (`--data`).

Corpus: Python's standard-library sources (code), pydoc topics (English), the bundled Chinese prose and
generated legal text (the tokenizer is trained on it), encoded `--repeat` times over from `--files` JSONL files
(each a task). Ends with
`ratio tokenizer_encode_per_worker_vs_hf X` (1 worker, wall), `ratio tokenizer_encode_per_worker_cpu_vs_hf X`
(2 workers, CPU) and `ratio tokenizer_encode_2proc_vs_hf X` (2 workers, wall, against raw in one thread).
"""

import argparse
import itertools
import json
import os
import random
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bessemer.demo.corpus import build_corpus  # noqa: E402
from bessemer.tokenizer.common import load_tokenizer  # noqa: E402
from bessemer.tokenizer.encode import encode_inputs  # noqa: E402
from bessemer.tokenizer.train import train_tokenizer  # noqa: E402

LAWS = ["刑法", "民法典", "合同法", "公司法", "劳动法", "行政诉讼法"]
CLAUSES = ["当事人应当按照约定全面履行自己的义务", "人民法院审理案件，应当以事实为根据，以法律为准绳",
           "侵害他人造成人身损害的，应当赔偿医疗费、护理费、交通费等合理费用", "法律另有规定的，依照其规定",
           "用人单位应当依法建立和完善劳动规章制度", "合同成立后，当事人不得以未签字为由主张合同不成立"]
DIGITS = "零一二三四五六七八九"


def zh(n: int) -> str:
    """Chinese numerals for 0 < n < 10000."""
    out, zero = "", False
    for value, unit in ((1000, "千"), (100, "百"), (10, "十"), (1, "")):
        d = n // value % 10
        if d == 0:
            zero = bool(out)
            continue
        out += ("零" if zero else "") + ("" if (not out and d == 1 and unit == "十") else DIGITS[d]) + unit
        zero = False
    return out


def legal_docs(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    docs = []
    for i in range(n):
        text = "".join(rng.choice([
            f"根据《{rng.choice(LAWS)}》第{zh(rng.randint(1, 1260))}条第{zh(rng.randint(1, 9))}款规定，"
            f"{rng.choice(CLAUSES)}。",
            f"本院于{zh(rng.randint(1, 12))}月{zh(rng.randint(1, 28))}日作出（20{rng.randint(10, 24)}）"
            f"京{rng.randint(1, 99)}民初第{rng.randint(1, 9999)}号判决书。",
            f"{rng.choice(CLAUSES)}，但第{zh(rng.randint(1, 30))}章另有规定的除外。",
        ]) for _ in range(rng.randint(3, 12)))
        docs.append({"id": f"legal/{i}", "text": text, "metadata": {"domain": "legal_zh"}})
    return docs


def timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process and of its children that finished meanwhile) of one call."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, cpu + (after.ru_utime - kids.ru_utime) + (after.ru_stime - kids.ru_stime)


def best_of(runs: dict[str, list], name: str, fn) -> None:
    runs.setdefault(name, []).append(timed(fn))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--code-mb", type=float, default=2.5)
    parser.add_argument("--files", type=int, default=8, help="input files (tasks) the corpus is written as")
    parser.add_argument("--repeat", type=int, default=8,
                        help="the encoded corpus is the training corpus this many times over, so that a worker's "
                             "start (imports, tokenizer load: about 0.5 s) weighs as little as on real data")
    parser.add_argument("--rounds", type=int, default=2)
    from bench.data.eval_data import add_data_argument, find_data
    from bench.tokenizer_compression import NEEDS, print_report

    add_data_argument(parser)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        docs = build_corpus(tmp / "demo.jsonl", code_bytes=int(args.code_mb * 1e6), prose_bytes=1_500_000)
        docs += legal_docs(3000, seed=0)
        random.Random(0).shuffle(docs)
        train_tokenizer(((d["text"], d["metadata"]["domain"]) for d in docs), args.vocab_size, tmp / "tok")
        docs = docs * args.repeat
        mb = sum(len(d["text"].encode()) for d in docs) / 1e6
        print(f"encoding {mb:.1f} MB of text ({len(docs):,} documents) in {args.files} files; vocab {args.vocab_size}")
        src = tmp / "in"
        src.mkdir()
        for i in range(args.files):
            (src / f"part-{i:03d}.jsonl").write_text(
                "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs[i::args.files]), encoding="utf-8")
        texts = [d["text"] for d in docs]
        tok = load_tokenizer(tmp / "tok")
        tok.encode_special_tokens = True  # what encode does

        def raw():
            for i in range(0, len(texts), 256):
                [e.ids for e in tok.encode_batch(texts[i:i + 256], add_special_tokens=False)]

        outputs = itertools.count()

        def command(workers: int):
            def run():
                out = tmp / f"shards_{next(outputs)}"
                encode_inputs(tmp / "tok", src, out, workers=workers)
                shutil.rmtree(out)
            return run

        # Interleaved rounds, best wall and best CPU of each: the machine's other load drifts during the run.
        runs: dict[str, list] = {}
        for _ in range(args.rounds):
            os.environ["TOKENIZERS_PARALLELISM"] = "false"
            best_of(runs, "raw", raw)
            os.environ.pop("TOKENIZERS_PARALLELISM")
            best_of(runs, "all", raw)
            best_of(runs, "one", command(1))
            best_of(runs, "two", command(2))
        (raw_wall, raw_cpu), (all_wall, _), (one_wall, one_cpu), (two_wall, two_cpu) = (
            (min(w for w, _ in runs[k]), min(c for _, c in runs[k])) for k in ("raw", "all", "one", "two"))
        # What starting two workers costs on its own: the same command on two one-line files.
        tiny = tmp / "tiny"
        tiny.mkdir()
        for i in range(2):
            (tiny / f"{i}.jsonl").write_text(json.dumps({"text": "x"}) + "\n")
        start_cpu = min(timed(lambda: encode_inputs(tmp / "tok", tiny, tmp / f"shards_{next(outputs)}", workers=2))[1]
                        for _ in range(args.rounds))
        print(f"\nraw HF encode_batch, 1 thread (in memory):   {mb / raw_wall:6.2f} MB/s   {mb / raw_cpu:6.2f} MB/CPU-s")
        print(f"raw HF encode_batch, all threads:            {mb / all_wall:6.2f} MB/s")
        print(f"bessemer tokenizer encode, 1 worker:         {mb / one_wall:6.2f} MB/s   {mb / one_cpu:6.2f} MB/CPU-s"
              f"   ratio {raw_wall / one_wall:.3f} (wall)  {raw_cpu / one_cpu:.3f} (CPU)")
        print(f"bessemer tokenizer encode, 2 workers:        {mb / two_wall:6.2f} MB/s   {mb / two_cpu:6.2f} MB/CPU-s"
              f"   ratio {raw_wall / two_wall:.3f} (wall)  {raw_cpu / two_cpu:.3f} (CPU, per worker)"
              f"   speedup {one_wall / two_wall:.2f}x over 1 worker")
        print(f"  2 workers without their start ({start_cpu:.2f} CPU-s for both: imports, tokenizer load): "
              f"ratio {raw_cpu / (two_cpu - start_cpu):.3f} (CPU, per worker)")
        print(f"cores on this machine: {os.cpu_count()}; CPU seconds include the parent's")
        print(f"ratio tokenizer_encode_per_worker_vs_hf {raw_wall / one_wall:.3f}")
        print(f"ratio tokenizer_encode_per_worker_cpu_vs_hf {raw_cpu / two_cpu:.3f}")
        print(f"ratio tokenizer_encode_2proc_vs_hf {raw_wall / two_wall:.3f}")

    print()
    if (root := find_data(args.data, NEEDS, "tokenizer compression on real statutes")) is not None:
        print_report(root, args.vocab_size)


if __name__ == "__main__":
    main()
