"""Readers: input files -> Documents, for JSONL (plain, .gz, .zst), Parquet, folders of .txt files and WARC.

Hostile input never raises. A record that cannot become a document comes out as a *rejected* Document
(empty text, `metadata["reason"]` such as `input.invalid_json`, `metadata["source"]` = "file:line") and the
executor routes it to the exclusion sink, exactly as it does for documents a step rejects. A file that is
cut short (truncated .gz/.zst/WARC) keeps the records read before the cut and adds one rejected
pseudo-record `input.truncated` naming the file. Rules and reasons: docs/data.md.

Paths go through fsspec (bessemer/data/io.py), so `s3://bucket/x.jsonl.zst` works like a local path (with
s3fs installed).
"""

import gzip
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath

import zstandard

from bessemer.data import io as data_io
from bessemer.data.document import Document, mark_rejected
from bessemer.data.pipeline_toml import InputConfig
from bessemer.errors import BessemerError

# Which files a directory entry contributes, per format (an explicitly named file is read whatever its name).
SUFFIXES: dict[str, tuple[str, ...]] = {
    "jsonl": tuple(s + c for s in (".jsonl", ".json", ".ndjson") for c in ("", ".gz", ".zst")),
    "parquet": (".parquet",),
    "text": (".txt",),
    "warc": (".warc", ".warc.gz"),
}
_RAW_PREVIEW = 200  # bytes of a bad record kept (as a repr) in the rejected sink
# A lone surrogate escape (\ud800-\udfff) parses as JSON but cannot be encoded as UTF-8.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


@dataclass(frozen=True)
class InputFile:
    """One input file: `url` to open, `name` = its path relative to the entry it was found under
    (document ids are built from it, so they do not depend on where the data lives)."""

    url: str
    name: str


def list_inputs(paths: list[str], format: str) -> list[InputFile]:
    """Expand files, directories (recursively, files with the format's suffixes) and globs; sorted, so
    shard assignment is deterministic. A path that matches nothing is an error."""
    found: dict[str, InputFile] = {}
    for entry in paths:
        fs, root = data_io.url_to_fs(entry)
        unstrip = (lambda p: p) if data_io.is_local(entry) else fs.unstrip_protocol
        if fs.isdir(root):
            base = root.rstrip("/")
            files = [p for p in fs.find(base) if p.endswith(SUFFIXES[format])]
            named = [(p, p[len(base) + 1 :]) for p in files]
        elif any(c in root for c in "*?["):
            named = [(p, PurePosixPath(p).name) for p in fs.glob(root) if not fs.isdir(p)]
        elif fs.isfile(root):
            named = [(root, PurePosixPath(root).name)]
        else:
            raise BessemerError(f"input.paths: {entry!r} does not exist")
        if not named and not fs.isdir(root):
            raise BessemerError(f"input.paths: {entry!r} matches no file")
        for p, name in named:
            found.setdefault(unstrip(p), InputFile(unstrip(p), name))
    return sorted(found.values(), key=lambda f: f.url)


def file_size(url: str) -> int:
    fs, path = data_io.url_to_fs(url)
    return int(fs.size(path) or 0)


def read_file(f: InputFile, cfg: InputConfig) -> Iterator[Document]:
    """Documents (and rejected records) of one file, in file order."""
    reader = {"jsonl": read_jsonl, "parquet": read_parquet, "text": read_text, "warc": read_warc}[cfg.format]
    return reader(f.url, f.name, cfg)


def stem(name: str) -> str:
    """'sub/a.jsonl.zst' -> 'sub/a': the prefix of generated ids `<stem>/<line>`."""
    for suffix in (".gz", ".zst"):
        name = name.removesuffix(suffix)
    return str(PurePosixPath(name).with_suffix("")) if "." in PurePosixPath(name).name else name


class _ZstdRaw(io.RawIOBase):
    """Streaming zstd decompression that notices truncation (zstandard's stream_reader returns the data
    it has and stops silently) and reads concatenated frames."""

    def __init__(self, f: io.IOBase):
        self._f = f
        self._d = zstandard.ZstdDecompressor().decompressobj()
        self._buf, self._pos = memoryview(b""), 0
        self._in_frame = False

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while self._pos >= len(self._buf):
            chunk = self._f.read(1 << 20)
            if not chunk:
                if self._in_frame:
                    raise EOFError("zstd stream ended before the end of its frame")
                return 0
            out = []
            while chunk:
                if self._d.eof:
                    self._d = zstandard.ZstdDecompressor().decompressobj()
                out.append(self._d.decompress(chunk))
                chunk = self._d.unused_data if self._d.eof else b""
            self._in_frame = not self._d.eof
            self._buf, self._pos = memoryview(b"".join(out)), 0
        n = min(len(b), len(self._buf) - self._pos)
        b[:n] = self._buf[self._pos : self._pos + n]
        self._pos += n
        return n


def open_bytes(url: str):
    """A binary stream of the file's contents, decompressed by suffix (.gz, .zst). Usable as a context
    manager; closing it closes the file."""
    raw = data_io.open_url(url, "rb")
    if not data_io.is_local(url):  # an object store's file object has no readline(limit): buffer it here
        raw = io.BufferedReader(raw, buffer_size=1 << 20)
    if url.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if url.endswith(".zst"):
        return io.BufferedReader(_ZstdRaw(raw), buffer_size=1 << 20)
    return raw


def _read_errors() -> tuple[type[BaseException], ...]:
    """What a damaged file raises while being read: EOF/IO/format errors from the decompressors and parsers."""
    errors: list[type[BaseException]] = [EOFError, OSError, ValueError, zstandard.ZstdError]
    try:
        from warcio.exceptions import ArchiveLoadFailed

        errors.append(ArchiveLoadFailed)
    except ImportError:
        pass
    return tuple(errors)


def _file_failed(name: str, url: str, error: BaseException, at: str) -> Document:
    reason = "input.truncated" if isinstance(error, EOFError) else "input.unreadable"
    return mark_rejected(Document(f"{stem(name)}#{reason.split('.')[1]}", ""), reason, source=url, after=at,
                         error=f"{type(error).__name__}: {error}"[:500])


def read_jsonl(url: str, name: str, cfg: InputConfig) -> Iterator[Document]:
    """One document per line. `cfg.text_field` is the text, `cfg.id_field` the id (else `<stem>/<line>`,
    1-based); a `metadata` object is merged into the metadata, every other field is copied into it. Blank
    lines are not records. Lines are read with a size cap, so a huge line costs at most `max_doc_bytes`
    of memory before it is rejected as `input.too_large`."""
    prefix = stem(name)
    for item in read_jsonl_lines(url, name, cfg):
        if isinstance(item, Document):
            yield item
            continue
        doc = parse_jsonl_line(url, prefix, *item, cfg)
        if doc is not None:
            yield doc


def read_jsonl_lines(url: str, name: str, cfg: InputConfig) -> Iterator[tuple[int, bytes] | Document]:
    """The lines of a JSONL file as (1-based line number, bytes), unparsed (`parse_jsonl_line` makes one a
    Document); a line over `max_doc_bytes` or a read failure comes as its rejected Document instead. For a
    caller that passes most lines on as they are (the dedup filter)."""
    prefix, lineno = stem(name), 0
    try:
        with open_bytes(url) as f:
            while line := f.readline(cfg.max_doc_bytes + 1):
                lineno += 1
                if len(line) > cfg.max_doc_bytes and not line.endswith(b"\n"):
                    size = len(line) + _skip_line(f)
                    yield mark_rejected(Document(f"{prefix}/{lineno}", ""), "input.too_large",
                                        source=f"{url}:{lineno}", size=size, raw=repr(line[:_RAW_PREVIEW]))
                    continue
                yield lineno, line
    except _read_errors() as e:
        yield _file_failed(name, url, e, at=f"line {lineno}")


def parse_jsonl_line(url: str, prefix: str, lineno: int, line: bytes, cfg: InputConfig) -> Document | None:
    """The Document of one line of `read_jsonl_lines` (None for a blank line); `prefix` is `stem(name)`,
    computed once per file (it costs more than parsing a short line)."""
    return _parse_line(line, f"{prefix}/{lineno}", f"{url}:{lineno}", cfg)


def _skip_line(f) -> int:
    skipped = 0
    while chunk := f.readline(1 << 20):
        skipped += len(chunk)
        if chunk.endswith(b"\n"):
            break
    return skipped


def _parse_line(line: bytes, gen_id: str, source: str, cfg: InputConfig) -> Document | None:
    def bad(reason: str, **detail) -> Document:
        return mark_rejected(Document(gen_id, ""), reason, source=source, raw=repr(line[:_RAW_PREVIEW]), **detail)

    if b"\x00" in line:
        return bad("input.nul_bytes")
    try:
        s = line.decode("utf-8")
    except UnicodeDecodeError as e:
        return bad("input.invalid_utf8", error=str(e))
    if not s.strip():
        return None
    try:
        obj = json.loads(s)
    except (ValueError, RecursionError) as e:
        return bad("input.invalid_json", error=str(e)[:200])
    if not isinstance(obj, dict):
        return bad("input.invalid_json", error=f"a line must be a JSON object, got {type(obj).__name__}")
    if _SURROGATE_ESCAPE.search(s):
        try:
            json.dumps(obj, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as e:
            return bad("input.invalid_utf8", error=f"lone surrogate escape: {e}")
    text = obj.pop(cfg.text_field, None)
    if not isinstance(text, str):
        return bad("input.missing_text", error=f"no string field {cfg.text_field!r}")
    if "\x00" in text:
        return bad("input.nul_bytes")
    doc_id = obj.pop(cfg.id_field, None)
    meta = obj.pop("metadata") if isinstance(obj.get("metadata"), dict) else {}
    meta.update(obj)
    return Document(gen_id if doc_id in (None, "") else str(doc_id), text, _keep_prior_reason(meta))


def _keep_prior_reason(meta: dict) -> dict:
    # `reason` marks a rejection; an input that already carries one (re-reading an exclusion file) keeps
    # it as `prior_reason`, so the document is processed rather than rejected again.
    if "reason" in meta:
        meta["prior_reason"] = meta.pop("reason")
    return meta


def read_parquet(url: str, name: str, cfg: InputConfig) -> Iterator[Document]:
    """One document per row: column `cfg.text_field` (string or UTF-8 binary), `cfg.id_field` if present
    (else `<stem>/<row>`, 1-based); a `metadata` column holding a JSON object is merged into the metadata,
    the other columns are copied into it."""
    import pyarrow.parquet as pq

    prefix, row = stem(name), 0
    try:
        with data_io.open_url(url, "rb") as f:
            pf = pq.ParquetFile(f)
            if cfg.text_field not in pf.schema_arrow.names:
                yield mark_rejected(Document(f"{prefix}#missing_text", ""), "input.missing_text", source=url,
                                    error=f"no column {cfg.text_field!r}; columns: {', '.join(pf.schema_arrow.names)}")
                return
            for batch in pf.iter_batches(batch_size=1024):
                for rec in batch.to_pylist():
                    row += 1
                    yield _parquet_doc(rec, f"{prefix}/{row}", f"{url}:{row}", cfg)
    except _read_errors() as e:
        yield _file_failed(name, url, e, at=f"row {row}")


def _parquet_doc(rec: dict, gen_id: str, source: str, cfg: InputConfig) -> Document:
    text = rec.pop(cfg.text_field)
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            return mark_rejected(Document(gen_id, ""), "input.invalid_utf8", source=source,
                                 raw=repr(text[:_RAW_PREVIEW]), error=str(e))
    if not isinstance(text, str):
        return mark_rejected(Document(gen_id, ""), "input.missing_text", source=source, error="null text")
    problem = _text_problem(text, cfg)
    if problem:
        return mark_rejected(Document(gen_id, ""), problem, source=source)
    doc_id = rec.pop(cfg.id_field, None)
    meta = rec.pop("metadata", None)
    try:
        meta = json.loads(meta) if isinstance(meta, str) else meta
    except ValueError:
        rec["metadata"] = meta
        meta = None
    meta = dict(meta) if isinstance(meta, dict) else {}
    meta.update(rec)
    return Document(gen_id if doc_id in (None, "") else str(doc_id), text, _keep_prior_reason(meta))


def _text_problem(text: str, cfg: InputConfig) -> str | None:
    if "\x00" in text:
        return "input.nul_bytes"
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return "input.invalid_utf8"
    return "input.too_large" if size > cfg.max_doc_bytes else None


def read_text(url: str, name: str, cfg: InputConfig) -> Iterator[Document]:
    """The whole file is one document; its id is the path relative to the input directory."""
    try:
        size = file_size(url)
        if size > cfg.max_doc_bytes:
            yield mark_rejected(Document(name, ""), "input.too_large", source=url, size=size)
            return
        with open_bytes(url) as f:
            data = f.read()
    except _read_errors() as e:
        yield _file_failed(name, url, e, at="start")
        return
    if b"\x00" in data:
        yield mark_rejected(Document(name, ""), "input.nul_bytes", source=url, raw=repr(data[:_RAW_PREVIEW]))
        return
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        yield mark_rejected(Document(name, ""), "input.invalid_utf8", source=url, raw=repr(data[:_RAW_PREVIEW]),
                            error=str(e))
        return
    yield Document(name, text, {})


_HTML_TYPES = ("text/html", "application/xhtml+xml")
_CHARSET = re.compile(r"charset\s*=\s*[\"']?([\w.:-]+)", re.IGNORECASE)


def read_warc(url: str, name: str, cfg: InputConfig) -> Iterator[Document]:
    """HTML response records -> Documents holding the raw HTML (`metadata.format = "html"`, for the
    extract step), id = WARC-Record-ID, metadata url, content_type, status, date. Other records (requests,
    metadata, non-HTML responses) are not documents and are skipped. The body is decoded with the charset
    the HTTP header declares (UTF-8 when none)."""
    try:
        from warcio.archiveiterator import ArchiveIterator
    except ImportError:
        raise ImportError("reading WARC needs warcio: pip install warcio") from None

    prefix, n = stem(name), 0
    try:
        with data_io.open_url(url, "rb") as f:
            for record in ArchiveIterator(f):
                if record.rec_type != "response" or record.http_headers is None:
                    continue
                content_type = record.http_headers.get_header("Content-Type") or ""
                if content_type.split(";")[0].strip().lower() not in _HTML_TYPES:
                    continue
                n += 1
                yield _warc_doc(record, content_type, f"{prefix}/{n}", f"{url}#{n}", cfg)
    except _read_errors() as e:
        yield _file_failed(name, url, e, at=f"record {n}")


def _warc_doc(record, content_type: str, gen_id: str, source: str, cfg: InputConfig) -> Document:
    record_id = (record.rec_headers.get_header("WARC-Record-ID") or "").strip("<>") or gen_id
    body = record.content_stream().read(cfg.max_doc_bytes + 1)
    if len(body) > cfg.max_doc_bytes:
        return mark_rejected(Document(record_id, ""), "input.too_large", source=source)
    m = _CHARSET.search(content_type)
    charset = m.group(1) if m else "utf-8"
    try:
        html = body.decode(charset)
    except LookupError:
        return mark_rejected(Document(record_id, ""), "input.unknown_charset", source=source, charset=charset)
    except UnicodeDecodeError as e:
        return mark_rejected(Document(record_id, ""), "input.invalid_utf8", source=source,
                             raw=repr(body[:_RAW_PREVIEW]), error=f"{charset}: {e}")
    if "\x00" in html:
        return mark_rejected(Document(record_id, ""), "input.nul_bytes", source=source, raw=repr(body[:_RAW_PREVIEW]))
    meta = {
        "url": record.rec_headers.get_header("WARC-Target-URI"),
        "content_type": content_type,
        "format": "html",
        "status": record.http_headers.get_statuscode(),
        "date": record.rec_headers.get_header("WARC-Date"),
    }
    return Document(record_id, html, meta)
