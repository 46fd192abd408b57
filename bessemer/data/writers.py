"""Writers: Documents -> JSONL (plain or .zst) or Parquet, written atomically.

A writer writes to `<path>.tmp` and renames it to `<path>` on `close()`, so a shard file is either complete
or absent; a crash leaves only the .tmp, which the rerun overwrites. Use it as a context manager: leaving
the block with an exception deletes the .tmp instead.

JSONL lines are `{"id": ..., "text": ..., "metadata": {...}}`; Parquet has columns id, text and metadata
(a JSON string, since metadata differs between documents). The readers map both back to the same Document.
"""

import json
import posixpath
from typing import Protocol

import fsspec
import zstandard

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


class _Atomic:
    def __init__(self, path: str):
        self.path = path
        self._fs, self._final = fsspec.core.url_to_fs(path)
        self._tmp = self._final + ".tmp"
        self._fs.makedirs(posixpath.dirname(self._final), exist_ok=True)
        self.count = 0

    def _commit(self) -> None:
        self._fs.mv(self._tmp, self._final)

    def abort(self) -> None:
        if self._fs.exists(self._tmp):
            self._fs.rm(self._tmp)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self._close_file()
            self.abort()

    def close(self) -> None:
        self._close_file()
        self._commit()

    def _close_file(self) -> None:
        raise NotImplementedError


class JsonlWriter(_Atomic):
    """JSONL, zstd-compressed when the path ends in .zst."""

    def __init__(self, path: str, level: int = 3):
        super().__init__(path)
        self._file = self._fs.open(self._tmp, "wb")
        self._out = zstandard.ZstdCompressor(level=level).stream_writer(self._file) if path.endswith(".zst") \
            else self._file
        self._buf: list[bytes] = []
        self._size = 0
        self._closed = False

    def write(self, doc: Document) -> None:
        line = doc_line(doc)
        self._buf.append(line)
        self._size += len(line)
        self.count += 1
        if self._size >= _FLUSH_BYTES:
            self._flush()

    def _flush(self) -> None:
        self._out.write(b"".join(self._buf))
        self._buf, self._size = [], 0

    def _close_file(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._flush()
        finally:
            self._out.close()  # the zstd writer closes the file under it
            if not self._file.closed:
                self._file.close()


class ParquetWriter(_Atomic):
    """Parquet with columns id, text, metadata (JSON); one row group per `rows_per_group` documents."""

    def __init__(self, path: str, rows_per_group: int = 10_000):
        import pyarrow as pa
        import pyarrow.parquet as pq

        super().__init__(path)
        self._pa = pa
        self._schema = pa.schema([("id", pa.string()), ("text", pa.string()), ("metadata", pa.string())])
        self._file = self._fs.open(self._tmp, "wb")
        self._writer = pq.ParquetWriter(self._file, self._schema, compression="zstd")
        self._rows: dict[str, list[str]] = {"id": [], "text": [], "metadata": []}
        self._rows_per_group = rows_per_group
        self._closed = False

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

    def _close_file(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._flush()
        finally:
            self._writer.close()
            self._file.close()


def open_writer(path: str, format: str) -> JsonlWriter | ParquetWriter:
    """A writer for `format` ("jsonl", "jsonl.zst", "parquet") at `path`."""
    if format == "parquet":
        return ParquetWriter(path)
    if format in ("jsonl", "jsonl.zst"):
        return JsonlWriter(path)
    raise ValueError(f"unknown output format {format!r}; valid formats: {', '.join(FORMATS)}")


def shard_name(rank: int, format: str) -> str:
    return f"part-{rank:05d}.{format}"
