"""`bessemer tokenizer encode`: clean documents -> token shards, in parallel, shuffled, resumable, appendable.
No torch.

Work. Every input file is one job of a LocalRunner (bessemer/data/runner.py: in this process for one worker,
else a pool of spawned processes). A worker takes a job and does all of it: reads the file through the curation
readers (inputs.py), tokenizes batches of documents (`encode_batch`), and writes the task's own shard files. It
loads the tokenizer on its first job and keeps it for the next (`_tokenizer`, keyed by path and sha256). The
parent only hands out jobs, records finished ones (the runner's `on_done`) and writes the index; no token passes
through it. The output depends on the inputs, the tokenizer and the settings only — not on the number of workers
or the order in which tasks finish (tested byte for byte).

Shuffle. Document k of a task goes to one of `buckets` open shards, chosen by a hash of (seed, task, k)
(order.bucket_of); a bucket's documents are written when it holds `shard_tokens` tokens, in a seeded
permutation of the window (order.permute keyed by seed, task, bucket and window). So neighbours in the input
land in different shards, the order inside a shard is shuffled, and a worker holds at most
buckets x shard_tokens tokens in memory. The index lists a run's shards bucket by bucket (bucket, task,
window), so reading the shards in order interleaves the input files. The same seed gives the same order.

Held out. With `heldout` > 0, a keyed hash of each document's text (heldout.py) sends it either to the
training shards or to OUTPUT/heldout/, a shard directory of its own with its own index, never to both.
Each side of a task has its own buckets, dealing counter and domain labels (`_Split`), so the training side
of a run with a split is shuffled exactly as if the held-out documents had never been in the input. Each
task reports its documents and tokens per domain on each side; the progress file keeps them.

Resume and append: progress.py (encode_progress.json beside the shards, rewritten whenever a task finishes; a
rerun redoes the unfinished files and appends new ones as a new run).
"""

import hashlib
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from bessemer.data import io as data_io
from bessemer.data.readers import file_size
from bessemer.data.runner import LocalRunner
from bessemer.errors import BessemerError
from bessemer.tokenizer import heldout
from bessemer.tokenizer.common import EOS, domain_tag, load_tokenizer, tokenizer_file
from bessemer.tokenizer.heldout import HELDOUT_DIR, HeldoutSplit
from bessemer.tokenizer.inputs import BadRecords, Source, documents, list_sources
from bessemer.tokenizer.progress import (
    PROGRESS,
    all_shards,
    load_state,
    remove_files_of,
    write_indexes,
)
from bessemer.tokens.order import bucket_of, permute
from bessemer.tokens.shards import token_dtype, write_shard

DEFAULT_DOMAIN = "default"
DEFAULT_BUCKETS = 4
DEFAULT_SHARD_TOKENS = 1 << 24
BATCH_DOCS = 256
BATCH_BYTES = 1 << 20


@dataclass
class EncodeResult:
    out_dir: Path
    docs: int = 0  # training documents written by this run
    tokens: int = 0
    heldout_docs: int = 0  # held-out documents written by this run (into out_dir/heldout)
    heldout_tokens: int = 0
    files_done: int = 0
    files_skipped: int = 0  # complete before this run
    bad: BadRecords = field(default_factory=BadRecords)
    split: HeldoutSplit | None = None  # None: no held-out split
    per_domain: dict[str, dict[str, int]] = field(default_factory=dict)  # this run's counts (heldout.count)
    warnings: list[str] = field(default_factory=list)  # about the whole directory (heldout.warnings)

    def summary(self) -> str:
        if not self.files_done:
            return f"{self.out_dir}: already encoded ({self.files_skipped} input files); nothing to do"
        skipped = f", {self.files_skipped} already encoded" if self.files_skipped else ""
        line = (f"{self.out_dir}: wrote {self.docs:,} documents, {self.tokens:,} tokens from {self.files_done} "
                f"input files{skipped}")
        if self.split is None:
            return line
        return (f"{line}; held out {self.heldout_docs:,} documents, {self.heldout_tokens:,} tokens into "
                f"{self.out_dir / HELDOUT_DIR} ({HeldoutSplit.describe(self.split.record())})\n"
                + heldout.table(self.per_domain))


@dataclass(frozen=True)
class EncodeSettings:
    """How documents become token shards: the options of `bessemer tokenizer encode`."""
    domain: str | None = None
    """Every document's domain; None = each document's `domain_field`, else "default"."""
    shard_tokens: int = DEFAULT_SHARD_TOKENS
    """Tokens a shard holds (a bucket is written when it reaches this)."""
    buckets: int = DEFAULT_BUCKETS
    """Open shards per task that documents are dealt into (module docstring: Shuffle)."""
    seed: int = 0
    """Seeds the dealing and the order inside a shard; the same seed gives the same shards."""
    text_field: str = "text"
    """JSONL field / Parquet column with the text."""
    domain_field: str = "metadata.domain"
    """Field with a document's domain (dotted path), read when `domain` is None."""
    tag_domain: bool = False
    """Put <|domain:NAME|> before each document."""
    input_format: str = "auto"
    """How to read the inputs (inputs.py FORMATS); "auto": .parquet, .txt, else JSONL by suffix."""
    heldout: float = 0.0
    """Share of the documents written to OUTPUT/heldout/ instead of the training shards (0 <= f < 1; 0 = no
    held-out split), chosen by a keyed hash of each document's text (heldout.py)."""
    heldout_seed: int | None = None
    """Key of that hash; None = `seed`. Every run into one directory must use the same fraction and key."""

    @property
    def split(self) -> HeldoutSplit:
        return HeldoutSplit(self.heldout, self.seed if self.heldout_seed is None else self.heldout_seed)


@dataclass(frozen=True)
class _Settings:
    """What every job needs besides its input file (a few strings and numbers: sent with each job)."""
    tokenizer: str
    tokenizer_sha256: str
    out: str
    encode: EncodeSettings


@dataclass(frozen=True)
class _Task:
    number: int  # stable number of the input file in this output directory
    source: Source


def _load(path: str | Path):
    tokenizer = load_tokenizer(path)
    # A document that contains the text "<|eos|>" is text, not an end of document.
    tokenizer.encode_special_tokens = True
    return tokenizer


@lru_cache(maxsize=1)
def _tokenizer(path: str, sha256: str):
    """The tokenizer at `path`, loaded once per process: a pool worker loads it for its first job and reuses it
    for the next; in one process the parent's copy serves the jobs. The sha256 in the key loads a file that
    changed again."""
    return _load(path)


def _encode_job(job: tuple[_Settings, _Task]) -> dict:
    """One runner job: a whole input file (in a worker process, or in this one for one worker)."""
    s, task = job
    return encode_task(_tokenizer(s.tokenizer, s.tokenizer_sha256), s, task)


class _Bucket:
    """One open shard of a task: its documents (token arrays) and their domain labels."""

    def __init__(self):
        self.docs: list[np.ndarray] = []
        self.labels: list[int] = []
        self.tokens = 0
        self.windows = 0  # shards written from this bucket so far


class _Split:
    """One side of a task (its training documents, or its held-out ones): the buckets they are dealt into, the
    shards written to `out`, and the domain names its labels number."""

    def __init__(self, out: Path, task: int, settings: EncodeSettings, dtype: np.dtype):
        self.out, self.task, self.settings, self.dtype = out, task, settings, dtype
        self.buckets = [_Bucket() for _ in range(settings.buckets)]
        self.names: list[str] = []
        self.shards: list[dict] = []
        self.dealt = 0  # documents dealt so far: the number of the next one

    def deal(self, n: int) -> Iterator[int]:
        """The buckets of this side's next `n` documents (module docstring: Shuffle)."""
        where = bucket_of(self.dealt + np.arange(n), self.settings.buckets, self.settings.seed, self.task)
        self.dealt += n
        return iter(where.tolist())

    def add(self, b: int, ids: np.ndarray, domain: str) -> None:
        if domain not in self.names:
            self.names.append(domain)
        bucket = self.buckets[b]
        bucket.docs.append(ids)
        bucket.labels.append(self.names.index(domain))
        bucket.tokens += ids.size
        if bucket.tokens >= self.settings.shard_tokens:
            self.write(b)

    def write(self, b: int) -> None:
        bucket = self.buckets[b]
        order = permute(np.arange(len(bucket.docs)), len(bucket.docs), self.settings.seed, bucket.windows,
                        self.task * self.settings.buckets + b)
        name = f"shard_{self.task:05d}_{b:02d}_{bucket.windows:04d}"
        meta = write_shard(self.out, name, [bucket.docs[i] for i in order], np.asarray(bucket.labels)[order],
                           self.dtype)
        self.shards.append({**meta, "domains": list(self.names), "bucket": b, "window": bucket.windows})
        bucket.docs, bucket.labels, bucket.tokens = [], [], 0
        bucket.windows += 1

    def close(self) -> list[dict]:
        for b, bucket in enumerate(self.buckets):
            if bucket.docs:
                self.write(b)
        return self.shards


def encode_task(tok, s: _Settings, task: _Task) -> dict:
    """Read, tokenize and write one input file (see the module docstring); returns what the parent records:
    the shards and held-out shards (with bucket and window for the index order), documents, tokens, counts per
    domain and bad records."""
    dtype = token_dtype(tok.get_vocab_size())
    split = s.encode.split
    train = _Split(Path(s.out), task.number, s.encode, dtype)
    held = _Split(Path(s.out) / HELDOUT_DIR, task.number, s.encode, dtype) if split.fraction else None
    if held is not None:
        held.out.mkdir(exist_ok=True)
    bad = BadRecords()
    tags: dict[str, int] = {}
    per_domain: dict[str, dict[str, int]] = {}

    def encode(texts: list[str], domains: list[str]) -> None:
        sides = [held if held is not None and split.held_out(t) else train for t in texts]
        where = {side: side.deal(sides.count(side)) for side in (train, held) if side is not None}
        for enc, domain, side in zip(tok.encode_batch(texts, add_special_tokens=False), domains, sides):
            ids = np.asarray(enc.ids, dtype=dtype)
            if s.encode.tag_domain:
                if domain not in tags:
                    tags[domain] = _tag_id(tok, domain, s.tokenizer)
                ids = np.concatenate([np.array([tags[domain]], dtype=dtype), ids])
            side.add(next(where[side]), ids, domain)
            heldout.count(per_domain, domain, int(ids.size), side is held)

    texts: list[str] = []
    domains: list[str] = []
    size = 0
    for text, doc_domain in documents(task.source, bad, s.encode.text_field, s.encode.domain_field):
        texts.append(text)
        domains.append(s.encode.domain or doc_domain or DEFAULT_DOMAIN)
        size += len(text)
        if len(texts) >= BATCH_DOCS or size >= BATCH_BYTES:
            encode(texts, domains)
            texts, domains, size = [], [], 0
    if texts:
        encode(texts, domains)
    return {"task": task.number, **heldout.totals(per_domain), "shards": train.close(),
            "heldout_shards": held.close() if held is not None else [], "per_domain": per_domain,
            "bad": {"counts": bad.counts, "examples": bad.examples}}


def _tag_id(tok, domain: str, tok_path: str) -> int:
    tag = tok.token_to_id(domain_tag(domain))
    if tag is None:
        raise BessemerError(f"{tok_path} has no {domain_tag(domain)} token; train with --domains {domain} or "
                            f"encode without --tag-domain")
    return tag


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def encode_inputs(tokenizer: str | Path, inputs: str | Path | list[str | Path], out_dir: str | Path,
                  settings: EncodeSettings = EncodeSettings(), workers: int = 1, progress: bool = False,
                  on_task_done: Callable[[int], None] | None = None) -> EncodeResult:
    """Encode every document under `inputs` into the shard directory `out_dir` (see the module docstring) with
    `settings`, on `workers` processes. `on_task_done(files done in this run)` is called after each commit
    (tests use it to interrupt a run)."""
    tok_path = tokenizer_file(tokenizer)
    tok_sha = _sha256(tok_path)
    tok = _tokenizer(str(tok_path), tok_sha)
    eos = tok.token_to_id(EOS)
    if eos is None:
        raise BessemerError(f"{tok_path} has no {EOS} token; train it with `bessemer tokenizer train`")
    domain = settings.domain
    for name, value in (("--workers", workers), ("--shard-tokens", settings.shard_tokens),
                        ("--buckets", settings.buckets)):
        if value < 1:
            raise BessemerError(f"{name} must be >= 1, got {value}")
    split = settings.split  # checks the fraction
    if settings.tag_domain and domain is not None:
        _tag_id(tok, domain, str(tok_path))
    sources = list_sources(inputs if isinstance(inputs, list) else [inputs], settings.input_format)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    recorded = {"seed": settings.seed, "buckets": settings.buckets, "shard_tokens": settings.shard_tokens,
                "tag_domain": settings.tag_domain}
    state = load_state(out, tok_sha, tok.get_vocab_size(), eos, split)
    result = EncodeResult(out, split=split if split.fraction else None)
    entries = state["inputs"]
    run = 1 + max((e["run"] for e in entries.values()), default=0)
    todo: list[_Task] = []
    for src in sources:
        size = file_size(src.file.url)
        entry = entries.get(src.file.url)
        if entry is None:
            entry = entries[src.file.url] = {"task": len(entries), "size": size, "domain": domain, "run": run,
                                             "complete": False}
        elif entry["domain"] != domain:
            raise BessemerError(f"{src.file.url} is already in {out} with --domain {entry['domain']}; encode it "
                                f"under another domain into another output directory")
        elif entry["size"] != size:
            raise BessemerError(f"{src.file.url} changed since it was encoded into {out} ({entry['size']} -> "
                                f"{size} bytes); delete {out} and encode again")
        if entry["complete"]:
            result.files_skipped += 1
        else:  # new, or unfinished: done (again) from its start, with this run's settings
            entry["settings"] = recorded
            todo.append(_Task(entry["task"], src))
    if not todo:
        result.warnings = write_indexes(out, tok.get_vocab_size(), eos, str(tok_path), state, split)
        return result

    remove_files_of(out, {t.number for t in todo})
    data_io.write_json(str(out / PROGRESS), state)
    s = _Settings(str(tok_path), tok_sha, str(out), settings)
    bar = _progress_bar(sum(entries[t.source.file.url]["size"] for t in todo)) \
        if progress and sys.stderr.isatty() else None
    by_number = {t.number: t for t in todo}

    def commit(done: dict) -> None:
        """In the parent, as each task finishes (in completion order): record it and rewrite the progress file."""
        entry = entries[by_number[done["task"]].source.file.url]
        entry.update(complete=True, shards=done["shards"], heldout_shards=done["heldout_shards"],
                     docs=done["docs"], tokens=done["tokens"], per_domain=done["per_domain"])
        result.docs += done["docs"]
        result.tokens += done["tokens"]
        result.heldout_docs += done["heldout_docs"]
        result.heldout_tokens += done["heldout_tokens"]
        heldout.merge(result.per_domain, done["per_domain"])
        result.files_done += 1
        result.bad.merge(BadRecords(dict(done["bad"]["counts"]), list(done["bad"]["examples"])))
        data_io.write_json(str(out / PROGRESS), state)
        if bar is not None:
            bar.advance(bar.task_ids[0], entry["size"])
        if on_task_done:
            on_task_done(result.files_done)

    try:
        with _one_thread_per_worker():
            LocalRunner(workers).map(_encode_job, [(s, t) for t in todo], on_done=commit,
                                     names=[f"encoding {t.source.file.url}" for t in todo])
    finally:
        if bar is not None:
            bar.stop()
    if not all_shards(state):  # nothing to train on in the whole directory: leave no trace of this run
        (out / PROGRESS).unlink(missing_ok=True)
        shutil.rmtree(out / HELDOUT_DIR, ignore_errors=True)
        if not any(out.iterdir()):
            out.rmdir()
        where = ", ".join(t.source.file.url for t in todo)
        if result.heldout_docs:
            raise BessemerError(f"all {result.heldout_docs} documents of {where} went to the held-out split "
                                f"({HeldoutSplit.describe(split.record())}); lower --heldout or add documents")
        raise BessemerError(f"no documents in {where}" + (f"; {result.bad.summary()}" if result.bad.total else ""))
    result.warnings = write_indexes(out, tok.get_vocab_size(), eos, str(tok_path), state, split)
    return result


@contextmanager
def _one_thread_per_worker() -> Iterator[None]:
    """One tokenizer thread per worker: the processes are the parallelism. Set in this process, so that the
    spawned workers inherit it and the in-process worker sees it too; restored afterwards."""
    env = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        if env is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = env


def _progress_bar(total: int):
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    bar = Progress(TextColumn("encode"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
                   console=Console(stderr=True))
    bar.add_task("encode", total=total)
    bar.start()
    return bar
