"""Writers: Documents -> JSONL (plain or .zst) or Parquet, written atomically (local paths or URLs).

A writer holds an `io.AtomicFile`: locally the bytes go to `<path>.tmp`, renamed to `<path>` on `close()`; on
an object store the upload is committed on `close()` and dropped otherwise. A shard file is either complete
or absent; a crash leaves at most the .tmp, which the rerun overwrites. Use it as a context manager: leaving
the block with an exception discards the file instead.

JSONL lines are `{"id": ..., "text": ..., "metadata": {...}}`; Parquet has columns id, text and metadata
(a JSON string, since metadata differs between documents). The readers map both back to the same Document.
"""

import json
import re
from typing import Protocol

import zstandard

from bessemer.data import io
from bessemer.data.document import Document

FORMATS = ("jsonl", "jsonl.zst", "parquet")
_FLUSH_BYTES = 1 << 20


def doc_line(doc: Document) -> bytes:
    obj = {"id": doc.id, "text": doc.text, "metadata": doc.metadata}
    # backslashreplace: a lone surrogate becomes the JSON escape \udc80 (valid UTF-8, read back the same)
    # instead of failing the whole shard.
    return (json.dumps(obj, ensure_ascii=False, default=str) + "\n").encode("utf-8", "backslashreplace")


class Writer(Protocol):
    path: str

    def write(self, doc: Document) -> None: ...

    def close(self) -> None: ...

    def abort(self) -> None: ...


class _CommitOnExit:
    """`with writer:` commits on a normal exit and discards everything on an exception."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.discard()


class _Atomic(_CommitOnExit):
    def __init__(self, path: str):
        self.path = path
        self._target = io.AtomicFile(path, "wb")
        self._file = self._target.file
        self.count = 0
        self._closed = False

    def abort(self) -> None:
        self._target.discard()

    def discard(self) -> None:
        """End the file (quietly, whatever state it is in) and drop it."""
        try:
            self._close_file()
        finally:
            self.abort()

    def close(self) -> None:
        self._close_file()
        self._target.commit()

    def _close_file(self) -> None:
        """Flush what is buffered and end the format's framing (once); the file itself stays open for commit()."""
        if self._closed:
            return
        self._closed = True
        try:
            self._flush()
        finally:
            self._end()

    def _flush(self) -> None:
        raise NotImplementedError

    def _end(self) -> None:
        raise NotImplementedError


class JsonlWriter(_Atomic):
    """JSONL, zstd-compressed when the path ends in .zst."""

    def __init__(self, path: str, level: int = 3):
        super().__init__(path)
        self._out = zstandard.ZstdCompressor(level=level).stream_writer(self._file, closefd=False) \
            if path.endswith(".zst") else self._file
        self._buf: list[bytes] = []
        self._size = 0

    def write(self, doc: Document) -> None:
        self.write_line(doc_line(doc))

    def write_line(self, line: bytes) -> None:
        """A line that already is a document in this writer's form (`doc_line`), e.g. read back from a shard
        this writer wrote: copied as it is, without a JSON round trip."""
        if not line.endswith(b"\n"):
            line += b"\n"
        self._buf.append(line)
        self._size += len(line)
        self.count += 1
        if self._size >= _FLUSH_BYTES:
            self._flush()

    def _flush(self) -> None:
        self._out.write(b"".join(self._buf))
        self._buf, self._size = [], 0

    def _end(self) -> None:
        if self._out is not self._file:
            self._out.close()  # ends the zstd frame; the file under it stays open (closefd=False)


class ParquetWriter(_Atomic):
    """Parquet with columns id, text, metadata (JSON); one row group per `rows_per_group` documents."""

    def __init__(self, path: str, rows_per_group: int = 10_000):
        import pyarrow as pa
        import pyarrow.parquet as pq

        super().__init__(path)
        self._pa = pa
        self._schema = pa.schema([("id", pa.string()), ("text", pa.string()), ("metadata", pa.string())])
        self._writer = pq.ParquetWriter(self._file, self._schema, compression="zstd")
        self._rows: dict[str, list[str]] = {"id": [], "text": [], "metadata": []}
        self._rows_per_group = rows_per_group

    def write(self, doc: Document) -> None:
        self._rows["id"].append(doc.id)
        self._rows["text"].append(doc.text)
        self._rows["metadata"].append(json.dumps(doc.metadata, ensure_ascii=False, default=str))
        self.count += 1
        if len(self._rows["id"]) >= self._rows_per_group:
            self._flush()

    def _flush(self) -> None:
        if self._rows["id"]:
            self._writer.write_table(self._pa.table(self._rows, schema=self._schema))
            self._rows = {"id": [], "text": [], "metadata": []}

    def _end(self) -> None:
        self._writer.close()  # writes the footer; a file object handed to pyarrow is left open


def open_writer(path: str, format: str) -> JsonlWriter | ParquetWriter:
    """A writer for `format` ("jsonl", "jsonl.zst", "parquet") at `path`."""
    if format == "parquet":
        return ParquetWriter(path)
    if format in ("jsonl", "jsonl.zst"):
        return JsonlWriter(path)
    raise ValueError(f"unknown output format {format!r}; valid formats: {', '.join(FORMATS)}")


def shard_name(rank: int, format: str) -> str:
    return f"part-{rank:05d}.{format}"


ROUTE_KEY = "route"  # metadata key naming the output a document goes to (set by the lang step's `routes`)
_ROUTE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_RESERVED_ROUTES = frozenset({"stats", "rejected", "report"})  # what an output directory already holds


def route_problem(route: object) -> str | None:
    """Why `route` cannot name an output sub-directory (None when it can)."""
    if not isinstance(route, str) or not _ROUTE_NAME.fullmatch(route):
        return f"{route!r} is not an output name (letters, digits, _ . - ; starting with a letter or digit)"
    if route in _RESERVED_ROUTES or route.startswith("part-"):
        return f"{route!r} is reserved ({', '.join(sorted(_RESERVED_ROUTES))} and part-* are the output's own)"
    return None


class RoutedWriter(_CommitOnExit):
    """A shard's final output: documents without `metadata["route"]` go to `<dir>/part-<shard>.<format>` (always
    written, possibly empty: it is what marks the shard's output present), each route to
    `<dir>/<route>/part-<shard>.<format>`, opened on the route's first document. Every file is atomic; the routes
    are committed before the main file, so a shard whose main file exists has all of its routes."""

    def __init__(self, out_dir: str, shard: int, format: str):
        self._dir, self._name, self._format = out_dir, shard_name(shard, format), format
        self.path = io.join(out_dir, self._name)
        self._main = open_writer(self.path, format)
        self._routes: dict[str, JsonlWriter | ParquetWriter] = {}

    @property
    def count(self) -> int:
        return self._main.count + sum(w.count for w in self._routes.values())

    def route_counts(self) -> dict[str, int]:
        return {name: w.count for name, w in sorted(self._routes.items())}

    def write(self, doc: Document) -> None:
        route = doc.metadata.get(ROUTE_KEY)
        if route is None:
            self._main.write(doc)
            return
        w = self._routes.get(route)
        if w is None:
            problem = route_problem(route)
            if problem:
                raise ValueError(f"document {doc.id!r}: metadata.{ROUTE_KEY} {problem}")
            w = self._routes[route] = open_writer(io.join(self._dir, route, self._name), self._format)
        w.write(doc)

    def close(self) -> None:
        for w in self._routes.values():
            w.close()
        self._main.close()

    def abort(self) -> None:
        self.discard()

    def discard(self) -> None:
        for w in [*self._routes.values(), self._main]:
            w.discard()
