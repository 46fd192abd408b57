"""The one home of file I/O for curation: local paths and object-store URLs (``s3://...``) alike, through fsspec.

Every data step, stage and executor writes through these functions, so a work dir, output or exclusion sink on
S3 behaves like a local one:

- ``atomic_open`` / ``write_bytes`` / ``write_json``: readers never see a half-written file. Locally the bytes go
  to ``<name>.tmp`` (fsync'd) and are renamed into place; on an object store a PUT is already all-or-nothing, so
  the object is written under its final key (a rename there is a copy plus a delete) and an upload that fails is
  aborted, never committed; any other fsspec filesystem (``memory://``, ...) gets ``.tmp`` plus a move.
- markers: ``write_marker(url, fingerprint)`` records that a unit of work finished for one configuration;
  ``marker_done(url, fingerprint)`` says whether it did, and refuses a marker left by a different configuration
  (the caller's directory holds someone else's run).
- ``fingerprint(*parts)``: a stable hash of JSON-able parts (configs, input lists).
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

import fsspec

from bessemer.errors import BessemerError

# Filesystems whose writes are all-or-nothing uploads (an object appears only when its upload completes).
_WHOLE_OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oci", "oss", "r2"})


def url_to_fs(url: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem and the path inside it for a local path or URL."""
    return fsspec.core.url_to_fs(str(url))


def is_local(url: str) -> bool:
    fs, _ = url_to_fs(url)
    return "file" in _protocols(fs)


def _protocols(fs: fsspec.AbstractFileSystem) -> tuple[str, ...]:
    p = fs.protocol
    return (p,) if isinstance(p, str) else tuple(p)


def join(base: str, *parts: str) -> str:
    """``base/part/...`` for a local path or URL (``s3://b/x`` stays a URL)."""
    base = str(base)
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])


def exists(url: str) -> bool:
    fs, p = url_to_fs(url)
    return fs.exists(p)


def makedirs(url: str) -> None:
    fs, p = url_to_fs(url)
    fs.makedirs(p, exist_ok=True)


def listdir(url: str) -> list[str]:
    """Names (not paths) of the entries directly under ``url``; empty when it does not exist."""
    fs, p = url_to_fs(url)
    if not fs.exists(p):
        return []
    return sorted(posixpath.basename(e.rstrip("/")) for e in fs.ls(p, detail=False))


def remove(url: str, recursive: bool = False) -> None:
    """Delete a file (or a directory tree with ``recursive``); nothing happens when it is absent."""
    fs, p = url_to_fs(url)
    if fs.exists(p):
        fs.rm(p, recursive=recursive)


def open_url(url: str, mode: str = "rb") -> IO:
    """Open for reading (or non-atomic writing); use ``atomic_open`` for output others may read."""
    fs, p = url_to_fs(url)
    return fs.open(p, mode)


def read_bytes(url: str) -> bytes:
    fs, p = url_to_fs(url)
    return fs.cat_file(p)


def read_json(url: str) -> Any:
    return json.loads(read_bytes(url))


class AtomicFile:
    """A file being written that appears complete (``commit``) or not at all (``discard``): the object behind
    ``atomic_open``, for writers that stay open across calls (bessemer/data/writers.py)."""

    def __init__(self, url: str, mode: str = "wb"):
        if mode not in ("wb", "w"):
            raise ValueError(f"atomic writes are 'wb' or 'w', not {mode!r}")
        self.url = str(url)
        self._fs, self._path = url_to_fs(self.url)
        parent = posixpath.dirname(self._path)
        if parent:
            self._fs.makedirs(parent, exist_ok=True)
        protocols = set(_protocols(self._fs))
        self._local = "file" in protocols
        # Object stores make an object visible when its upload completes, so it is written under its final key;
        # any other filesystem (memory://, sftp, ...) may show a file as soon as it is opened: tmp + move there.
        self._direct = bool(protocols & _WHOLE_OBJECT_STORES)
        self._tmp = self._path + ".tmp"
        if self._local:
            self.file: IO = open(self._tmp, mode)  # noqa: SIM115 - held open until commit() or discard()
        else:
            self.file = self._fs.open(self._path if self._direct else self._tmp, mode)
        self._finished = False

    def commit(self) -> None:
        if self._finished:
            return
        self._finished = True
        if self._local:
            try:
                self.file.flush()
                os.fsync(self.file.fileno())
                self.file.close()
                os.replace(self._tmp, self._path)
            except BaseException:
                self._drop_tmp()
                raise
        elif self._direct:
            self.file.close()  # an object store's PUT (or the multipart upload's completion) happens here
        else:
            self.file.close()
            self._fs.mv(self._tmp, self._path)

    def discard(self) -> None:
        if self._finished:
            return
        self._finished = True
        if self._local:
            self._drop_tmp()
            return
        if not self._direct:
            self.file.close()
            if self._fs.exists(self._tmp):
                self._fs.rm(self._tmp)
            return
        # An object-store upload that did not finish must not be committed: drop the buffered writer (aborting a
        # multipart upload) and mark it closed, or its finalizer would still upload what it buffered.
        discard = getattr(self.file, "discard", None)
        if discard is not None:
            discard()
            try:
                self.file.closed = True
            except AttributeError:  # not an fsspec buffered file: nothing will flush it later
                pass
        else:
            self.file.close()
            if self._fs.exists(self._path):
                self._fs.rm(self._path)

    def _drop_tmp(self) -> None:
        if not self.file.closed:
            self.file.close()
        if os.path.exists(self._tmp):
            os.unlink(self._tmp)


@contextmanager
def atomic_open(url: str, mode: str = "wb") -> Iterator[IO]:
    """Write a file that appears complete or not at all. On an exception nothing is left behind."""
    f = AtomicFile(url, mode)
    try:
        yield f.file
    except BaseException:
        f.discard()
        raise
    f.commit()


def write_bytes(url: str, data: bytes) -> None:
    with atomic_open(url, "wb") as f:
        f.write(data)


def write_json(url: str, obj: Any, indent: int | None = 1) -> None:
    write_bytes(url, json.dumps(obj, indent=indent, sort_keys=False).encode())


def fingerprint(*parts: Any) -> str:
    """A stable 16-hex-digit hash of JSON-able parts."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def write_marker(url: str, fp: str, **extra: Any) -> None:
    """Record that the work ``url`` stands for finished for configuration ``fp`` (with optional details)."""
    write_json(url, {"fingerprint": fp, **extra})


def marker_done(url: str, fp: str, what: str = "this directory") -> bool:
    """Whether the marker at ``url`` exists for configuration ``fp``. A marker of another configuration is an
    error: the directory holds a different run, and mixing the two would corrupt the output."""
    fs, p = url_to_fs(url)
    if not fs.exists(p):
        return False
    try:
        found = json.loads(fs.cat_file(p)).get("fingerprint")
    except (ValueError, AttributeError) as e:
        raise BessemerError(f"{url}: unreadable completion marker ({e}); delete it to redo that work") from e
    if found != fp:
        raise BessemerError(f"{url} was written by a different run (a different pipeline or configuration: "
                            f"fingerprint {found}, this run {fp}); {what} holds that run's work: use another "
                            "directory or delete it")
    return True
