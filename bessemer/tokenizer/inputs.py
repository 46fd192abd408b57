"""Reading clean documents for the tokenizer commands, one at a time (never a whole input in memory).

An input is a JSONL file (`.jsonl`, `.jsonl.gz`, `.jsonl.zst`), a `.txt` file (the whole file is one
document), or a directory holding such files (recursively, in sorted order). A line that is not JSON, not
an object or lacks the text field is counted with its file:line and skipped; `BadLines.summary()` reports
them in one line.
"""

import gzip
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

from bessemer.errors import BessemerError

JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst")
SUFFIXES = (*JSONL_SUFFIXES, ".txt")
_SURROGATE = re.compile("[\ud800-\udfff]")


def input_files(path: str | Path) -> list[Path]:
    path = Path(path)
    if not path.exists():
        raise BessemerError(f"input {path} does not exist")
    if path.is_file():
        if not path.name.endswith(SUFFIXES):
            raise BessemerError(f"input {path}: expected one of {', '.join(SUFFIXES)} (or a directory of them)")
        return [path]
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(SUFFIXES))
    if not files:
        raise BessemerError(f"input directory {path} holds no {', '.join(SUFFIXES)} files")
    return files


@dataclass
class BadLines:
    """Skipped input lines: a count per reason and the first few locations."""

    counts: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)
    keep: int = 5

    def add(self, where: str, reason: str) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        if len(self.examples) < self.keep:
            self.examples.append(f"{where} {reason}")

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        if not self.total:
            return ""
        reasons = ", ".join(f"{n} {r}" for r, n in sorted(self.counts.items()))
        more = f" (first {len(self.examples)})" if self.total > len(self.examples) else ""
        return f"skipped {self.total} bad input lines ({reasons}): {'; '.join(self.examples)}{more}"


def _field(record: dict, dotted: str):
    value = record
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def _lines(path: Path, raw: BinaryIO) -> Iterator[bytes]:
    """The lines of a file as stored (plain, gzip or zstd); a truncated compressed file raises EOFError."""
    if path.name.endswith(".gz"):
        with gzip.GzipFile(fileobj=raw) as f:
            yield from f
    elif path.name.endswith(".zst"):
        yield from _zstd_lines(path, raw)
    else:
        yield from raw


def _zstd_lines(path: Path, raw: BinaryIO) -> Iterator[bytes]:
    try:
        import zstandard
    except ImportError:
        raise ImportError(f"{path}: reading .zst needs zstandard: pip install zstandard") from None
    dctx = zstandard.ZstdDecompressor()
    dobj, fed, rest = dctx.decompressobj(), False, b""
    while chunk := raw.read(1 << 20):
        while chunk:
            try:
                out = dobj.decompress(chunk)
            except zstandard.ZstdError as e:
                raise EOFError(f"corrupt zstd data: {e}") from None
            fed, chunk = True, b""
            if dobj.eof:  # the next frame follows in the same file
                chunk, dobj, fed = dobj.unused_data, dctx.decompressobj(), False
            *lines, rest = (rest + out).split(b"\n")
            yield from (line + b"\n" for line in lines)
    if rest:
        yield rest
    if fed:
        raise EOFError("the file ends inside a zstd frame")


def read_file(path: Path, bad: BadLines, text_field: str = "text", domain_field: str = "metadata.domain",
              skip_lines: int = 0, on_bytes: Callable[[int], None] | None = None) -> Iterator[tuple[int, str, str | None]]:
    """(line number, text, domain or None) of each document in one input file, after the first `skip_lines`
    lines. `on_bytes(n)` is told how many bytes of the file (compressed, as on disk) were consumed."""
    with open(path, "rb") as raw:
        if path.name.endswith(".txt"):
            data = raw.read()
            if on_bytes:
                on_bytes(len(data))
            if skip_lines < 1:
                yield 1, data.decode("utf-8", errors="replace"), None
            return
        seen = 0
        try:
            for lineno, line in enumerate(_lines(path, raw), 1):
                if on_bytes:
                    now = raw.tell()
                    on_bytes(now - seen)
                    seen = now
                if lineno <= skip_lines or not line.strip():
                    continue
                where = f"{path}:{lineno}"
                try:
                    record = json.loads(line)
                except ValueError:  # JSONDecodeError and UnicodeDecodeError
                    bad.add(where, "invalid JSON")
                    continue
                text = _field(record, text_field) if isinstance(record, dict) else None
                if not isinstance(text, str):
                    bad.add(where, f"no string field {text_field!r}")
                    continue
                domain = _field(record, domain_field)
                yield lineno, _valid(text), domain if isinstance(domain, str) and domain else None
        except (OSError, EOFError) as e:  # a truncated .gz / .zst: what was read so far stands
            bad.add(f"{path}", f"unreadable after the last good line ({e})")


def _valid(text: str) -> str:
    """JSON may carry lone surrogates (\\ud800), which no tokenizer can encode: they become U+FFFD."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)


def read_documents(path: str | Path, bad: BadLines, text_field: str = "text",
                   domain_field: str = "metadata.domain") -> Iterator[tuple[str, str | None]]:
    """(text, domain or None) of every document under `path`."""
    for f in input_files(path):
        for _, text, domain in read_file(f, bad, text_field, domain_field):
            yield text, domain
