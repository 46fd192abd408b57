"""Documents for the tokenizer commands, read through the curation readers (bessemer/data/readers.py), so
`bessemer tokenizer` takes what `bessemer data` writes and reads: JSONL (plain, .gz, .zst), Parquet and .txt
files (a .txt file is one document), local or fsspec URLs (s3://...), files, directories and globs.

A record the readers reject (invalid JSON, no text field, invalid UTF-8, a truncated file ...) is counted
by its reason with its place, never fatal; `BadRecords.summary()` reports them in one line.
"""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from bessemer.data.readers import InputFile, list_inputs, read_file
from bessemer.errors import BessemerError

FORMATS = ("auto", "jsonl", "parquet", "text")
_BY_SUFFIX = ((".parquet", "parquet"), (".txt", "text"))


@dataclass(frozen=True)
class Source:
    file: InputFile
    format: str


def list_sources(paths: list[str | Path] | str | Path, fmt: str = "auto") -> list[Source]:
    """The input files under `paths` (files, directories, globs), sorted by URL. `auto`: a directory
    contributes its JSONL, Parquet and .txt files, and every file is read by its suffix (.parquet, .txt,
    else JSONL)."""
    if fmt not in FORMATS:
        raise BessemerError(f"unknown input format {fmt!r}; choose one of {', '.join(FORMATS)}")
    found: dict[str, Source] = {}
    for entry in paths if isinstance(paths, list) else [paths]:
        entry = str(entry)
        formats = [fmt] if fmt != "auto" else ["jsonl", "parquet", "text"]
        try:
            files = list({f.url: f for name in formats for f in list_inputs([entry], name)}.values())
        except BessemerError as e:
            raise BessemerError(str(e).replace("input.paths: ", "input ")) from None
        if not files:
            raise BessemerError(f"input {entry} holds no .jsonl(.gz/.zst), .parquet or .txt files")
        for f in files:
            found.setdefault(f.url, Source(f, fmt if fmt != "auto" else _format_of(f.url)))
    return sorted(found.values(), key=lambda s: s.file.url)


def _format_of(url: str) -> str:
    return next((f for suffix, f in _BY_SUFFIX if url.endswith(suffix)), "jsonl")


@dataclass
class BadRecords:
    """Skipped input records: a count per reason and the first few places."""

    counts: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)
    keep: int = 5

    def add(self, where: str, reason: str, n: int = 1) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + n
        if len(self.examples) < self.keep:
            self.examples.append(f"{where} {reason}")

    def merge(self, other: "BadRecords") -> None:
        for reason, n in other.counts.items():
            self.counts[reason] = self.counts.get(reason, 0) + n
        self.examples.extend(other.examples[:max(0, self.keep - len(self.examples))])

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        if not self.total:
            return ""
        reasons = ", ".join(f"{n} {r}" for r, n in sorted(self.counts.items()))
        more = f" (first {len(self.examples)})" if self.total > len(self.examples) else ""
        return f"skipped {self.total} bad input records ({reasons}): {'; '.join(self.examples)}{more}"


def _field(record: dict, dotted: str):
    value = record
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def documents(src: Source, bad: BadRecords, text_field: str = "text",
              domain_field: str = "metadata.domain") -> Iterator[tuple[str, str | None]]:
    """(text, domain or None) of each document of one input file, in file order. The readers merge a record's
    `metadata` object and its other fields into the document's metadata, so `metadata.domain` and `domain`
    both name the field `domain` there."""
    from bessemer.data.pipeline_toml import InputConfig

    cfg = InputConfig(paths=[src.file.url], format=src.format, text_field=text_field)
    path = domain_field.removeprefix("metadata.")
    for doc in read_file(src.file, cfg):
        reason = doc.metadata.get("reason")
        if reason is not None:
            bad.add(str(doc.metadata.get("source", src.file.url)), reason)
            continue
        domain = _field(doc.metadata, path)
        yield doc.text, domain if isinstance(domain, str) and domain else None


def read_documents(paths: list[str | Path] | str | Path, bad: BadRecords, text_field: str = "text",
                   domain_field: str = "metadata.domain", fmt: str = "auto") -> Iterator[tuple[str, str | None]]:
    """(text, domain or None) of every document under `paths`."""
    for src in list_sources(paths, fmt):
        yield from documents(src, bad, text_field, domain_field)
