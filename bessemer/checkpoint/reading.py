"""Verify while loading: every checkpoint file a rank needs is read once, its checksum computed on those very
bytes and compared with the manifest before anything read from it is used.

`VerifyingReader` is torch.distributed.checkpoint's FileSystemReader reading each needed file from start to end
in 8 MiB chunks — hashing all of it, keeping only the byte ranges this rank's load plan asks for — and serving
DCP's reads from those ranges. `read_verified` does the same for a whole small file (a rank's own state). A
file that fails raises `Damaged` with the same one-line problem `manifest.check` would give.
"""

import contextlib
import dataclasses
import io
from pathlib import Path

from torch.distributed.checkpoint import FileSystemReader

from bessemer.checkpoint.manifest import file_problem, hasher

CHUNK = 8 << 20


class Damaged(Exception):
    """A checkpoint file that is missing, truncated or altered (the message is the problem)."""


def _want(files: dict, root: Path, rel: str) -> dict:
    if rel not in files:
        raise Damaged(f"{root / rel}: not in the manifest")
    return files[rel]


def read_ranges(path: Path, want: dict, algo: str, ranges: set[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
    """Read `path` once from start to end, hashing it; return the bytes of each (offset, length) range, after the
    size and checksum matched `want` (else Damaged)."""
    try:
        f = open(path, "rb", buffering=0)
    except FileNotFoundError:
        raise Damaged(f"{path}: missing") from None
    h, wanted = hasher(algo), sorted(ranges)
    out = {r: bytearray() for r in wanted}
    pos = first = 0
    with f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            end = pos + len(chunk)
            j = first
            while j < len(wanted) and wanted[j][0] < end:  # ranges sorted by offset: stop at the first beyond
                offset, length = wanted[j]
                lo, hi = max(offset, pos), min(offset + length, end)
                if lo < hi:
                    out[wanted[j]] += chunk[lo - pos:hi - pos]
                j += 1
            while first < len(wanted) and sum(wanted[first]) <= end:
                first += 1
            pos = end
    problem = file_problem(path, want, algo, size=pos, digest=h.hexdigest())
    if problem:
        raise Damaged(problem)
    return {r: bytes(b) for r, b in out.items()}


def read_verified(root: Path, rel: str, files: dict, algo: str) -> bytes:
    """The whole file `root/rel`, read once and checked against its manifest entry."""
    want = _want(files, root, rel)
    return read_ranges(root / rel, want, algo, {(0, int(want.get("size", 0)))})[(0, int(want.get("size", 0)))]


class _Served:
    """DCP's FileSystem with some files served from memory (already read and verified)."""

    def __init__(self, fs, files: dict[str, bytes]):
        self._fs, self._files = fs, files

    def __getattr__(self, name):
        return getattr(self._fs, name)

    def create_stream(self, path, mode):
        if str(path) in self._files:
            return contextlib.nullcontext(io.BytesIO(self._files[str(path)]))
        return self._fs.create_stream(path, mode)


class VerifyingReader(FileSystemReader):
    """Loads a DCP checkpoint reading each needed file once, checked against the manifest's `files` before any
    of its bytes is used. `read` holds the files this rank read; `problems` what it found wrong."""

    def __init__(self, path: Path, files: dict, algo: str):
        super().__init__(str(path))
        self.root, self.files, self.algo = Path(path), files, algo
        self.read: set[str] = set()
        self.problems: list[str] = []
        self._ranges: dict[tuple[int, int], bytes] = {}

    def verified(self, rel: str) -> bytes:
        self.read.add(rel)
        try:
            return read_verified(self.root, rel, self.files, self.algo)
        except Damaged as e:
            self.problems.append(str(e))
            raise

    def read_metadata(self, *args, **kwargs):
        if kwargs.get("rank") is not None:  # DCP's fallback to per-rank metadata: ours has none
            raise Damaged(f"{self.root}: no usable .metadata")
        data = self.verified(".metadata")
        fs = self.fs
        self.fs = _Served(fs, {str(self._get_metadata_path()): data})
        try:
            return super().read_metadata()
        finally:
            self.fs = fs

    def read_data(self, plan, planner):
        per_file: dict[str, list] = {}
        for item in plan.items:
            per_file.setdefault(self.storage_data[item.storage_index].relative_path, []).append(item)
        for rel, items in per_file.items():  # one file at a time: only its needed ranges sit in memory
            self.read.add(rel)
            ranges = {(self.storage_data[i.storage_index].offset, self.storage_data[i.storage_index].length)
                      for i in items}
            try:
                self._ranges = read_ranges(self.root / rel, _want(self.files, self.root, rel), self.algo, ranges)
            except Damaged as e:
                self.problems.append(str(e))
                raise
            super().read_data(dataclasses.replace(plan, items=items), planner).wait()
            self._ranges = {}
        return super().read_data(dataclasses.replace(plan, items=[]), planner)

    def _slice_file(self, file, sinfo):
        return io.BytesIO(self._ranges[(sinfo.offset, sinfo.length)])
