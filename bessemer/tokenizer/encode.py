"""`bessemer tokenizer encode`: clean documents -> token shards, in parallel, resumable, appendable. No torch.

Worker processes encode batches of documents (`encode_batch`); the parent writes the results in input
order through `ShardWriter`, so the output is the same byte for byte whatever the number of workers.

Resume and append. Beside the shards the output directory holds `encode_progress.json`: the tokenizer's
sha256, the shards and domain names committed so far, and one entry per input file ever encoded into it
(path, size, domain override, lines consumed, complete). It is rewritten (atomically) each time a shard is
written, recording where in the input that shard ends. A rerun of the same command therefore:
- skips files marked complete (a finished output is not redone),
- deletes shard files past the committed ones (written after the last commit, or half written), and
- continues the interrupted file after its last committed line, into the next shard number.
Shards roll at the same points as in an uninterrupted run, so the result is identical to one.
A command naming input files the directory has not seen appends them: encode web, then code into the same
directory, and index.json lists both domains and all shards. index.json is rewritten at the end of each
run; while a run is in progress the previous run's index (still valid: its shards are untouched) stays.
The same file cannot be appended twice under different domains, nor resumed after it changed size.
"""

import hashlib
import json
import multiprocessing
import os
import sys
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from bessemer.dataset.shards import INDEX, ShardWriter, read_versioned_json
from bessemer.errors import BessemerError
from bessemer.tokenizer.common import EOS, domain_tag, load_tokenizer, tokenizer_file
from bessemer.tokenizer.inputs import BadLines, input_files, read_file

PROGRESS = "encode_progress.json"
PROGRESS_FORMAT = "bessemer-encode-progress/1"
DEFAULT_DOMAIN = "default"
BATCH_DOCS = 256
BATCH_BYTES = 1 << 20


@dataclass
class EncodeResult:
    out_dir: Path
    docs: int = 0  # documents written by this run
    tokens: int = 0
    files_done: int = 0
    files_skipped: int = 0  # complete before this run
    bad: BadLines = field(default_factory=BadLines)

    def summary(self) -> str:
        if not self.files_done:
            return f"{self.out_dir}: already encoded ({self.files_skipped} input files); nothing to do"
        skipped = f", {self.files_skipped} already encoded" if self.files_skipped else ""
        return (f"{self.out_dir}: wrote {self.docs:,} documents, {self.tokens:,} tokens from {self.files_done} "
                f"input files{skipped}")


@dataclass
class _Batch:
    texts: list[str]
    domains: list[str]
    where: list[tuple[int, int]]  # (input position, line) of each document
    input_bytes: int = 0  # bytes of the input files (as on disk) read for this batch


# Worker processes: each loads the tokenizer once.
_worker_tokenizer = None


def _init_worker(path: str) -> None:
    global _worker_tokenizer
    _worker_tokenizer = _load(path)


def _encode_in_worker(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    return _encode(_worker_tokenizer, texts)


def _load(path: str | Path):
    tokenizer = load_tokenizer(path)
    # A document that contains the text "<|eos|>" is text, not an end of document.
    tokenizer.encode_special_tokens = True
    return tokenizer


def _encode(tokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """All ids back to back (uint32) and each document's length: two arrays pickle far faster than lists."""
    docs = [np.asarray(e.ids, dtype=np.uint32) for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
    lengths = np.fromiter((d.size for d in docs), dtype=np.int64, count=len(docs))
    return (np.concatenate(docs) if docs else np.zeros(0, np.uint32)), lengths


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _atomic_json(path: Path, obj: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, ensure_ascii=False))
    os.replace(tmp, path)


def _load_state(out: Path, tok_sha: str, vocab_size: int, eos_id: int) -> dict:
    progress, index = out / PROGRESS, out / INDEX
    if progress.is_file():
        state = read_versioned_json(progress, PROGRESS_FORMAT, f"; delete {out} to start over")
        if state["tokenizer_sha256"] != tok_sha:
            raise BessemerError(f"{out} was encoded with another tokenizer (sha256 {state['tokenizer_sha256'][:12]}, "
                                f"this one {tok_sha[:12]}); use a new output directory")
        return state
    if index.is_file():  # shards written without this command (encode_to_shards, the demo): append to them
        existing = json.loads(index.read_text())
        if (existing["vocab_size"], existing["eos_id"]) != (vocab_size, eos_id):
            raise BessemerError(f"{out} holds shards of another tokenizer (vocab {existing['vocab_size']}, eos "
                                f"{existing['eos_id']}; this one: vocab {vocab_size}, eos {eos_id})")
        return {"format": PROGRESS_FORMAT, "tokenizer_sha256": tok_sha, "domains": existing["domains"],
                "shards": existing["shards"], "inputs": {}}
    return {"format": PROGRESS_FORMAT, "tokenizer_sha256": tok_sha, "domains": [], "shards": [], "inputs": {}}


def _remove_uncommitted(out: Path, committed: int) -> None:
    for f in out.iterdir():
        if f.name.endswith(".tmp"):
            f.unlink()
        elif f.name.startswith("shard_") and f.name[6:11].isdigit() and int(f.name[6:11]) >= committed:
            f.unlink()


def encode_inputs(tokenizer: str | Path, inputs: str | Path | list[str | Path], out_dir: str | Path,
                  domain: str | None = None, workers: int = 1, shard_tokens: int = 1 << 26,
                  text_field: str = "text", domain_field: str = "metadata.domain", tag_domain: bool = False,
                  progress: bool = False, on_commit: Callable[[int], None] | None = None) -> EncodeResult:
    """Encode every document under `inputs` into the shard directory `out_dir` (see the module docstring for
    resume and append). Domain: `domain` if given, else each document's `domain_field`, else "default".
    `tag_domain` puts <|domain:NAME|> before each document. `on_commit(shards)` is called after each commit
    (tests use it to interrupt a run)."""
    tok_path = tokenizer_file(tokenizer)
    tok = _load(tok_path)
    eos = tok.token_to_id(EOS)
    if eos is None:
        raise BessemerError(f"{tok_path} has no {EOS} token; train it with `bessemer tokenizer train`")
    if workers < 1:
        raise BessemerError(f"--workers must be >= 1, got {workers}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = _load_state(out, _sha256(tok_path), tok.get_vocab_size(), eos)
    files = list(dict.fromkeys(p.resolve() for q in (inputs if isinstance(inputs, list) else [inputs])
                               for p in input_files(q)))
    result = EncodeResult(out)
    todo: list[tuple[Path, int]] = []  # (file, lines already consumed)
    for f in files:
        entry = state["inputs"].get(str(f))
        size = f.stat().st_size
        if entry is None:
            todo.append((f, 0))
            continue
        if entry["domain"] != domain:
            raise BessemerError(f"{f} is already in {out} with --domain {entry['domain']}; encode it under "
                                f"another domain into another output directory")
        if entry["size"] != size:
            raise BessemerError(f"{f} changed since it was encoded into {out} ({entry['size']} -> {size} bytes); "
                                f"delete {out} and encode again")
        if entry["complete"]:
            result.files_skipped += 1
        else:
            todo.append((f, entry["lines"]))
    if not todo:
        if not (out / INDEX).is_file() or json.loads((out / INDEX).read_text())["shards"] != state["shards"]:
            _write_index(out, tok, eos, tok_path, state)  # the run ended between progress and index
        return result

    _remove_uncommitted(out, len(state["shards"]))
    writer = ShardWriter(out, tok.get_vocab_size(), eos, shard_tokens, tokenizer=str(tok_path))
    writer.resume(state["domains"], state["shards"])
    for f, lines in todo:
        state["inputs"][str(f)] = {"path": str(f), "size": f.stat().st_size, "domain": domain, "lines": lines,
                                   "complete": False}

    def commit(where: tuple[int, int] | None) -> None:
        """Record that the documents up to `where` (todo position, line) are in the written shards."""
        done = len(todo) if where is None else where[0]
        for i, (f, _) in enumerate(todo):
            entry = state["inputs"][str(f)]
            entry["complete"] = i < done
            if where is not None and i == done:
                entry["lines"] = where[1]
        state["domains"], state["shards"] = list(writer.domains), [dict(s) for s in writer.shards]
        _atomic_json(out / PROGRESS, state)
        if on_commit:
            on_commit(len(writer.shards))

    tags = {}
    bar = _progress_bar(sum(f.stat().st_size for f, _ in todo)) if progress and sys.stderr.isatty() else None
    batches = _batches(todo, domain, text_field, domain_field, result.bad)
    encoded = _encoded(batches, tok, tok_path, workers)
    try:
        for batch, (ids, lengths) in encoded:
            ends = np.cumsum(lengths)
            for k, doc_domain in enumerate(batch.domains):
                doc = ids[ends[k] - lengths[k]:ends[k]]
                if tag_domain:
                    if doc_domain not in tags:
                        tags[doc_domain] = _tag_id(tok, doc_domain, tok_path)
                    doc = np.concatenate([[tags[doc_domain]], doc])
                shards_before = len(writer.shards)
                writer.add(doc, doc_domain)
                result.docs += 1
                result.tokens += int(doc.size)
                if len(writer.shards) != shards_before:
                    commit(batch.where[k])
            if bar is not None:
                bar.advance(bar.task_ids[0], batch.input_bytes)
    finally:
        encoded.close()  # stops the worker pool now, also when interrupted
        if bar is not None:
            bar.stop()
    if result.docs == 0 and not state["shards"]:
        (out / PROGRESS).unlink(missing_ok=True)
        if not any(out.iterdir()):
            out.rmdir()
        raise BessemerError(f"no documents in {', '.join(str(f) for f, _ in todo)}"
                            + (f"; {result.bad.summary()}" if result.bad.total else ""))
    writer.flush()
    commit(None)
    _write_index(out, tok, eos, tok_path, state)
    result.files_done = len(todo)
    return result


def _tag_id(tok, domain: str, tok_path: Path) -> int:
    tag = tok.token_to_id(domain_tag(domain))
    if tag is None:
        raise BessemerError(f"{tok_path} has no {domain_tag(domain)} token; train with --domains {domain} or "
                            f"encode without --tag-domain")
    return tag


def _write_index(out: Path, tok, eos: int, tok_path: Path, state: dict) -> None:
    writer = ShardWriter(out, tok.get_vocab_size(), eos, tokenizer=str(tok_path))
    writer.resume(state["domains"], state["shards"])
    writer.close()


def _batches(todo: list[tuple[Path, int]], domain: str | None, text_field: str, domain_field: str,
             bad: BadLines) -> Iterator[_Batch]:
    batch, size = _Batch([], [], []), 0

    def on_bytes(n: int) -> None:
        batch.input_bytes += n

    for i, (f, skip) in enumerate(todo):
        for line, text, doc_domain in read_file(f, bad, text_field, domain_field, skip, on_bytes):
            batch.texts.append(text)
            batch.domains.append(domain or doc_domain or DEFAULT_DOMAIN)
            batch.where.append((i, line))
            size += len(text)
            if len(batch.texts) >= BATCH_DOCS or size >= BATCH_BYTES:
                yield batch
                batch, size = _Batch([], [], []), 0
    if batch.texts:
        yield batch


def _encoded(batches: Iterator[_Batch], tok, tok_path: Path, workers: int):
    """(batch, encoded batch) in input order; with workers > 1 at most 2 batches per worker in flight, so a
    huge input is never read far ahead of the writer."""
    if workers == 1:
        for batch in batches:
            yield batch, _encode(tok, batch.texts)
        return
    # spawn: a forked child would inherit the parent's tokenizer thread pool state (and any library threads).
    ctx = multiprocessing.get_context("spawn")
    env = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread per worker: the processes are the parallelism
    try:
        with ctx.Pool(workers, initializer=_init_worker, initargs=(str(tok_path),)) as pool:
            pending: deque = deque()
            for batch in batches:
                pending.append((batch, pool.apply_async(_encode_in_worker, (batch.texts,))))
                if len(pending) >= 2 * workers:
                    b, r = pending.popleft()
                    yield b, r.get()
            while pending:
                b, r = pending.popleft()
                yield b, r.get()
    finally:
        if env is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = env


def _progress_bar(total: int):
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    bar = Progress(TextColumn("encode"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
                   console=Console(stderr=True))
    bar.add_task("encode", total=total)
    bar.start()
    return bar
