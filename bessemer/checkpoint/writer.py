"""Writing a checkpoint's files at disk speed: each file checksummed while it is written, its write-back started
as it goes, fsynced once after its last byte.

`HashingWriter` is DCP's FileSystemWriter whose streams hash the bytes on their way to the file, so each rank
knows the manifest entries ({"size", algo}) of the files it wrote the moment they are fsynced — nothing is read
back. The streams do the fsync themselves, once per file after its last byte: DCP's own fsync of `.metadata`
comes before the pickle's last bytes leave Python's buffer. `write_state` does the same for a rank's small state.

torch.save (which DCP runs once per tensor) computes a zip CRC-32 of every byte it writes, as slow as the disk
itself on a CPU core; nothing ever checks it (torch.load does not), and our own checksum covers every file — so
checkpoint files are written without it (`zip_crc_off`). They still load with torch.load.

Async saves stage into host memory first: staging.py.
"""

import contextlib
import ctypes
import io
import os
import queue
import threading
from pathlib import Path

import torch
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.filesystem import FileSystem

from bessemer.checkpoint.manifest import HashingFile

_crc_lock = threading.Lock()
_crc_users = 0
_crc_saved = True


@contextlib.contextmanager
def zip_crc_off():
    """torch.save without the zip CRC-32 for as long as any checkpoint file is being written in this process
    (the switch is torch's, process-wide: the last writer out restores it)."""
    global _crc_users, _crc_saved
    get, set_ = getattr(torch.serialization, "get_crc32_options", None), getattr(torch.serialization,
                                                                                  "set_crc32_options", None)
    if set_ is None:  # torch without the switch: the CRC is computed, nothing else changes
        yield
        return
    with _crc_lock:
        if _crc_users == 0:
            _crc_saved = get()
            set_(False)
        _crc_users += 1
    try:
        yield
    finally:
        with _crc_lock:
            _crc_users -= 1
            if _crc_users == 0:
                set_(_crc_saved)


def _libc_sync_file_range():
    """Linux's sync_file_range(2), or None where there is none."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    return fn


_sync_file_range = _libc_sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2  # start writing the range back, do not wait for it
CHUNK = 1 << 20  # the kernel copies 1 MiB writes into the page cache faster than one of a whole tensor
WRITEBACK = 16 << 20  # start the write-back of every 16 MiB written: the final fsync has little left to wait for


class _WriteBack:
    """A thread that starts the write-back of the ranges of one file it is handed (starting it can block while
    the disk's queue is full: not the writer's time)."""

    def __init__(self, fd: int):
        self.fd, self.ranges = fd, queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name="checkpoint-writeback", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (r := self.ranges.get()) is not None:
            _sync_file_range(self.fd, r[0], r[1], _SYNC_FILE_RANGE_WRITE)  # a hint: fsync reports any error

    def stop(self) -> None:
        """After the ranges handed so far (before the file is closed: its descriptor must not be reused)."""
        self.ranges.put(None)
        self.thread.join()


class _DurableFile(HashingFile):
    """A file written in CHUNK pieces, each hashed just before it is written (still in the CPU's cache), its
    write-back to the disk started as it goes (the disk works while the CPU serializes), fsynced once at the
    end (`sync`). Use it as a context manager around the file's writes."""

    synced = False
    _started = 0  # bytes whose write-back has been started
    _writeback: _WriteBack | None = None

    def write(self, data) -> int:
        view = memoryview(data)
        if view.nbytes <= CHUNK:
            super().write(view)
        else:
            view = view.cast("B")
            for i in range(0, view.nbytes, CHUNK):
                super().write(view[i:i + CHUNK])
        if _sync_file_range is not None and self.size - self._started >= WRITEBACK:
            self.f.flush()
            if self._writeback is None:
                self._writeback = _WriteBack(self.f.fileno())
            self._writeback.ranges.put((self._started, self.size - self._started))
            self._started = self.size
        return view.nbytes

    def sync(self) -> None:
        """Flush Python's buffer and fsync: the file's one fsync, after its last byte."""
        if not self.synced:
            self._stop()
            self.f.flush()
            os.fsync(self.f.fileno())
            self.synced = True

    def close(self) -> None:  # DCP closes its data files itself
        self.sync()
        self.f.close()

    def _stop(self) -> None:
        if self._writeback is not None:
            self._writeback.stop()
            self._writeback = None

    def __enter__(self) -> "_DurableFile":
        return self

    def __exit__(self, *exc) -> None:
        self._stop()


class _HashingFileSystem(FileSystem):
    """DCP's local filesystem with every written stream hashed and fsynced when it closes; `files` maps each
    written file's name (relative to `root`) to its manifest entry once the stream is closed."""

    def __init__(self, root: Path, algo: str):
        super().__init__()
        self.root, self.algo = Path(root), algo
        self.files: dict[str, dict] = {}

    @contextlib.contextmanager
    def create_stream(self, path, mode: str):
        with super().create_stream(path, mode) as stream:
            if "w" not in mode:
                yield stream
                return
            with _DurableFile(stream, self.algo) as out:
                yield out
                out.sync()
        self.files[self._rel(path)] = out.entry(self.algo)  # only a stream that closed without error counts

    def rename(self, path, new_path) -> None:
        """DCP writes `.metadata.tmp` and renames it: the entry follows the file."""
        super().rename(path, new_path)
        entry = self.files.pop(self._rel(path), None)
        if entry is not None:
            self.files[self._rel(new_path)] = entry

    def _rel(self, path) -> str:
        return str(Path(path).relative_to(self.root))


class HashingWriter(FileSystemWriter):
    """FileSystemWriter that checksums what it writes and fsyncs each file once, after its last byte (so DCP's
    own `sync_files` is off); `files` after the save: this rank's files and their manifest entries (rank 0's
    include `.metadata`)."""

    def __init__(self, path: Path, algo: str):
        super().__init__(str(path), sync_files=False)
        self.fs = _HashingFileSystem(Path(path), algo)

    @property
    def files(self) -> dict[str, dict]:
        return dict(self.fs.files)

    def write_data(self, plan, planner):
        with zip_crc_off():  # every torch.save of this rank's items runs in here
            return super().write_data(plan, planner)


def serialize_state(state: dict) -> bytes:
    """torch.save of a rank's small state, into memory (the snapshot an async save writes later)."""
    buffer = io.BytesIO()
    with zip_crc_off():
        torch.save(state, buffer)
    return buffer.getvalue()


def write_bytes(path: Path, data: bytes, algo: str) -> dict:
    """Write `data` to `path` (fsynced); returns its manifest entry."""
    with open(path, "wb") as f, _DurableFile(f, algo) as out:
        out.write(data)
        out.sync()
    return out.entry(algo)


def write_state(path: Path, state: dict, algo: str) -> dict:
    """torch.save `state` to `path` (fsynced); returns its manifest entry, hashed while written."""
    with open(path, "wb") as f, zip_crc_off(), _DurableFile(f, algo) as out:
        torch.save(state, out)
        out.sync()
    return out.entry(algo)
