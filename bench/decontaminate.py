"""Decontamination throughput, one process on one core: our `decontaminate` step against datatrove's n-gram
decontamination filter (`NGramsDecontFilter`, datatrove 0.10) on the same documents and the same benchmark
items, in the same run; and whether both find the same contaminated documents.

Benchmark items: the real slices of ../shared/eval-bench (`--data`; ARC-Easy/Challenge, PIQA, Social IQa,
HellaSwag, XCOPA-zh; read in place, never copied), each through a task file like `bessemer eval`'s.

Documents: the demo corpus (bessemer/demo/corpus.py: standard-library sources, the reference-manual topics of
pydoc, the bundled Chinese prose; nothing downloaded), cut into ~2,000-character documents, plus `--planted`
of them with a benchmark item planted (prompt + gold answer; one with at least 13 units): inserted at a line
boundary of a corpus document (a span inside a longer document), or alone (a whole passage), some in upper case
or with punctuation removed.

How datatrove is set up, to compare like with like:

- Its index: `NGramsDecontIndexer` wants lighteval tasks (and lighteval installed), so its index files are
  written here in its documented format (one `<task>.index.hashes` file of uint64 per task, read by the
  filter's `load_index_hashes`), from the hashes of its own `NGramsDecontIndexer.compute_hashes(gold, query)`
  (called on the same prompt and gold answer our index reads) with `n_grams = 13`, `find_query_ngrams = True`
  and `find_overlap_ngrams = True`: every 13-gram of prompt + answer, the text our index takes.
- Its word tokenizer: datatrove's English one is spaCy's (not installed here). It gets one that splits the
  already simplified text (lower case, no punctuation, single spaces) at spaces (`str.split`, the fastest
  tokenizer it can have, and what spaCy does on such text save a few contractions) and cuts Han and kana runs
  into characters, so Chinese is counted in characters as ours is (`cjk_n = 13`).
- Its hash: xxhash64 of each n-gram string, its default. xxhash 4 (installed here) hashes bytes only and
  datatrove passes a str, so it gets its xxhash64 on the string's UTF-8 bytes (what xxhash 3 did with a str).
- Timing: ours is `DecontaminateStep.run` over the documents (counting, metadata, the slow path that locates
  every hit); datatrove's is its `filter(doc)` per document (its `run` adds stats and timers). Index building
  and loading are outside both timings. Best of `--repeat` alternating rounds.

Prints docs/s of each, the documents each finds contaminated, their agreement, the planted documents found,
and ends with `ratio decontaminate_vs_datatrove X` (our docs/s / datatrove's; > 1: ours is faster; goal 1.5).
"""

import argparse
import random
import re
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bessemer.benchmarks.tasks import multiple_choice_items, read_task  # noqa: E402
from bessemer.data.decont.index import item_texts  # noqa: E402
from bessemer.data.decont.ngrams import text_hashes  # noqa: E402
from bessemer.data.decont.step import DecontaminateStep  # noqa: E402
from bessemer.data.document import Document  # noqa: E402
from bessemer.data.text.script import HAN_CHARS, KANA_CHARS  # noqa: E402
from bessemer.demo.corpus import build_corpus  # noqa: E402

N = 13
BENCHMARKS = ("arc_easy", "arc_challenge", "piqa", "siqa", "hellaswag", "xcopa_zh")


def write_tasks(data: Path, tmp: Path) -> list[Path]:
    files = []
    for name in BENCHMARKS:
        src = data / f"{name}.jsonl"
        if not src.is_file():
            raise SystemExit(f"{src} not found: give --data the eval-bench folder (../shared/eval-bench)")
        path = tmp / f"{name}.toml"
        path.write_text(f'data = "{src}"\n', encoding="utf-8")
        files.append(path)
    return files


def corpus_docs(tmp: Path, planted: int, seed: int, tasks: list[Path]) -> tuple[list[Document], set[str]]:
    """The demo corpus plus planted benchmark items; returns the documents and the ids of the planted ones."""
    rng = random.Random(seed)
    raw = build_corpus(tmp / "corpus.jsonl", code_bytes=4_000_000, prose_bytes=2_000_000)
    docs = [Document(d["id"], d["text"], dict(d["metadata"])) for d in raw]
    # Items with at least one 13-gram: a shorter one (a few ARC questions) cannot be found by either.
    items = [text for t in tasks for _, texts in item_texts(read_task(t)) for text in texts
             if any(len(h) for h in text_hashes(text, N, N))]
    ids = set()
    for k, i in enumerate(rng.sample(range(len(docs)), planted)):
        text = rng.choice(items)
        form = k % 4
        if form == 1:
            text = text.upper()
        elif form == 2:
            text = re.sub(r"[^\w\s]", " ", text)
        if k % 3 == 0:  # a whole passage, a document of its own
            docs.append(Document(f"planted/{k}", text, {"planted": True}))
            ids.add(f"planted/{k}")
        else:  # a span inside a longer document
            lines = docs[i].text.split("\n")
            lines.insert(rng.randint(0, len(lines)), text)
            docs[i].text = "\n".join(lines)
            ids.add(docs[i].id)
    rng.shuffle(docs)
    return docs, ids


def datatrove_filter(tasks: list[Path], index_dir: Path):
    import numpy as np
    from datatrove.data import Document as DtDocument
    from datatrove.pipeline.decont.n_grams import (
        NGramsDecontConfig,
        NGramsDecontFilter,
        NGramsDecontIndexer,
    )
    from datatrove.utils.hashing import create_hash_func
    from datatrove.utils.word_tokenizers import WordTokenizer

    units = re.compile(f"[{HAN_CHARS}{KANA_CHARS}]|[^\\s{HAN_CHARS}{KANA_CHARS}]+")

    class Tokenizer(WordTokenizer):
        def word_tokenize(self, text: str) -> list[str]:
            return text.split() if text.isascii() else units.findall(text)

        def sent_tokenize(self, text: str) -> list[str]:
            return [text]

        def span_tokenize(self, text: str) -> list[tuple[int, int]]:
            return [(0, len(text))]

    config = NGramsDecontConfig(n_grams=N, find_query_ngrams=True, find_overlap_ngrams=True)
    hash_func = create_hash_func(config.hash_config)  # xxhash64 of the n-gram string
    try:
        hash_func("a")
    except TypeError:  # xxhash >= 4 takes bytes only; xxhash 3 hashed a str as its UTF-8 bytes
        def hash_func(s: str, _xxh64=hash_func) -> int:
            return _xxh64(s.encode("utf-8"))
    indexer = SimpleNamespace(tokenizer=Tokenizer(), config=config, hash_func=hash_func)
    for path in tasks:
        task = read_task(path)
        hashes = set()
        for item in multiple_choice_items(task):  # the prompt is the query, the gold answer the label
            hashes.update(NGramsDecontIndexer.compute_hashes(indexer, item.choices[item.gold], item.context))
        np.array(sorted(hashes), dtype=config.hash_config.np_descr).tofile(index_dir / f"{task.name}.index.hashes")
    from loguru import logger  # datatrove's; quiet its "Loading N hashes" lines

    logger.disable("datatrove")
    filt = NGramsDecontFilter(str(index_dir), config=config, language=indexer.tokenizer)
    filt.hash_func = hash_func
    filt.load_index_hashes()
    return filt, DtDocument


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "eval-bench")
    ap.add_argument("--planted", type=int, default=300, help="documents with a benchmark item planted")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    try:
        import datatrove  # noqa: F401
    except ImportError:
        raise SystemExit("datatrove is not installed (`pip install datatrove==0.10.1`): nothing to compare with")

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tasks = write_tasks(args.data.resolve(), tmp)
        docs, planted = corpus_docs(tmp, args.planted, args.seed, tasks)
        step = DecontaminateStep([str(t) for t in tasks], n=N, cjk_n=N)
        (tmp / "index").mkdir()
        filt, DtDocument = datatrove_filter(tasks, tmp / "index")
        dt_docs = [DtDocument(text=d.text, id=d.id) for d in docs]
        chars = sum(len(d.text) for d in docs)
        print(f"{len(docs):,} documents ({chars / 1e6:.1f} M characters, {len(planted)} with a benchmark item "
              f"planted); {sum(b.items for b in step.index.benchmarks):,} benchmark items, n = {N}")
        print(f"index: ours {len(step.index):,} n-grams; datatrove {len(filt._index_hashes):,}")

        best_ours = best_dt = float("inf")
        for _ in range(args.repeat):
            ours = DecontaminateStep([str(t) for t in tasks], n=N, cjk_n=N)
            fresh = [Document(d.id, d.text, dict(d.metadata)) for d in docs]
            t = time.perf_counter()
            list(ours.run(fresh))
            best_ours = min(best_ours, time.perf_counter() - t)
            ours_hit = {d.id for d in ours.rejected}
            t = time.perf_counter()
            dt_hit = {d.id for d in dt_docs if filt.filter(d) is not True}
            best_dt = min(best_dt, time.perf_counter() - t)

    both = ours_hit & dt_hit
    ours_rate, dt_rate = len(docs) / best_ours, len(docs) / best_dt
    print(f"decontaminate (ours)           {ours_rate:10,.0f} docs/s  {chars / best_ours / 1e6:6.2f} M chars/s  "
          f"{len(ours_hit)} documents contaminated")
    print(f"datatrove NGramsDecontFilter   {dt_rate:10,.0f} docs/s  {chars / best_dt / 1e6:6.2f} M chars/s  "
          f"{len(dt_hit)} documents contaminated")
    print(f"agreement: {len(both)} found by both, {len(ours_hit - dt_hit)} by ours only, {len(dt_hit - ours_hit)} "
          f"by datatrove only; planted found: ours {len(planted & ours_hit)}/{len(planted)}, datatrove "
          f"{len(planted & dt_hit)}/{len(planted)}")
    for name in sorted(ours_hit ^ dt_hit)[:5]:
        print(f"  differs: {name}")
    print("documents hit per benchmark (ours): "
          + ", ".join(f"{k} {v['docs']}" for k, v in ours.stats()["benchmarks"].items()))
    print("ratio = our docs/s / datatrove's docs/s (higher is better; goal 1.5)")
    print(f"ratio decontaminate_vs_datatrove {ours_rate / dt_rate:.2f}")


if __name__ == "__main__":
    main()
