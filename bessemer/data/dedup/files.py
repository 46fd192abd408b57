"""Files of the dedup stages, through `bessemer.data.io` (local paths and object stores alike): numpy arrays
as .npy/.npz bytes, document ids packed as one UTF-8 blob plus offsets."""

import functools
import io as _io
import os
import posixpath
from collections.abc import Callable, Iterator

import numpy as np
from numpy.lib import format as npformat

from bessemer.data import io
from bessemer.data.document import Document
from bessemer.data.pipeline_toml import InputConfig
from bessemer.data.readers import parse_jsonl_line, read_jsonl, read_jsonl_lines, stem
from bessemer.errors import BessemerError


def read_docs(path: str) -> Iterator[Document]:
    """The documents of one JSONL shard, in order (rows the reader rejects carry metadata["reason"])."""
    return read_jsonl(path, posixpath.basename(path), InputConfig(paths=[path]))


def read_rows(path: str, passthrough: Callable[[int, bytes], bool]) -> Iterator[tuple[int, Document | bytes]]:
    """The rows of `read_docs` numbered the same way, as (row, Document), except that a line for which
    `passthrough(row, line)` is true comes unparsed, as (row, line bytes): a row is a record `read_docs` yields
    (a blank line is none), and a line `passthrough` is asked about must be one (start with `{`)."""
    name, cfg, row = posixpath.basename(path), InputConfig(paths=[path]), 0
    prefix = stem(name)
    for item in read_jsonl_lines(path, name, cfg):
        if isinstance(item, Document):
            doc = item
        else:
            lineno, line = item
            if line.startswith(b"{") and passthrough(row, line):
                yield row, line
                row += 1
                continue
            doc = parse_jsonl_line(path, prefix, lineno, line, cfg)
            if doc is None:
                continue
        yield row, doc
        row += 1


def save_npy(url: str, arr: np.ndarray) -> None:
    buf = _io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    io.write_bytes(url, buf.getvalue())


def load_npy(url: str) -> np.ndarray:
    try:
        return np.load(_io.BytesIO(io.read_bytes(url)), allow_pickle=False)
    except FileNotFoundError:
        raise BessemerError(f"{url} is missing: the stage that writes it did not finish; rerun the dedup") from None


def load_npz(url: str) -> dict[str, np.ndarray]:
    try:
        with np.load(_io.BytesIO(io.read_bytes(url)), allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise BessemerError(f"{url} is missing: the stage that writes it did not finish; rerun the dedup") from None


def save_npz(url: str, **arrays: np.ndarray) -> None:
    buf = _io.BytesIO()
    np.savez(buf, **arrays)
    io.write_bytes(url, buf.getvalue())


def pack_ids(ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """UTF-8 bytes of all ids, concatenated, and (n+1,) offsets into them."""
    enc = [i.encode("utf-8", "surrogatepass") for i in ids]
    offsets = np.zeros(len(enc) + 1, np.int64)
    np.cumsum([len(e) for e in enc], out=offsets[1:])
    return np.frombuffer(b"".join(enc), np.uint8), offsets


def unpack_ids(blob: np.ndarray, offsets: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """The ids of rows `idx` as a fixed-width bytes array (UTF-8 sorts like the strings), without a loop."""
    start, length = offsets[idx], offsets[idx + 1] - offsets[idx]
    width = max(int(length.max()) if len(idx) else 0, 1)
    col = np.arange(width)[None, :]
    padded = np.append(blob, np.uint8(0))  # position len(blob) reads a 0 byte
    chars = np.where(col < length[:, None], padded[np.minimum(start[:, None] + col, len(blob))], 0)  # (k, width)
    return np.ascontiguousarray(chars.astype(np.uint8)).view(f"S{width}").ravel()


def load_rows(url: str, idx: np.ndarray) -> np.ndarray:
    """Rows `idx` of an .npy file: memory-mapped locally (only those pages are read; the map is dropped on return,
    so memory does not grow with the calls), read whole otherwise."""
    try:
        path = _local_path(url)
        if path is None:
            return load_npy(url)[idx]
        st = os.stat(path)
        shape, order, dtype, offset = _npy_layout(path, (st.st_mtime_ns, st.st_size, st.st_ino))
        if 0 in shape:  # mmap cannot map an empty range
            return np.empty(shape, dtype, order=order)[idx]
        return np.asarray(np.memmap(path, dtype, "r", offset, shape, order)[idx])
    except FileNotFoundError:
        raise BessemerError(f"{url} is missing: the stage that writes it did not finish; rerun the dedup") from None


# A bucket job gathers rows from every shard's file again and again: the URL lookup and the header parse (most of
# the cost of a small gather) are done once, the header again only when the file changes (a rerun rewrites it).
@functools.lru_cache(maxsize=1 << 12)
def _local_path(url: str) -> str | None:
    return io.url_to_fs(url)[1] if io.is_local(url) else None


@functools.lru_cache(maxsize=1 << 12)
def _npy_layout(path: str, stamp: tuple[int, int, int]) -> tuple[tuple[int, ...], str, np.dtype, int]:
    """(shape, order, dtype, data offset) of an .npy file; `stamp` (mtime, size, inode) keys the cache."""
    with open(path, "rb") as f:
        major, _ = npformat.read_magic(f)  # 2.0 and 3.0 share the layout (a 4-byte header length)
        shape, fortran, dtype = (npformat.read_array_header_1_0 if major == 1 else npformat.read_array_header_2_0)(f)
        return shape, "F" if fortran else "C", dtype, f.tell()
