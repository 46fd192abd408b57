"""Writing a checkpoint's files at disk speed: every file checksummed while it is written, and async saves staged
into host buffers that live as long as the run.

`HashingWriter` is DCP's FileSystemWriter whose streams hash the bytes on their way to the file, so each rank
knows the manifest entries ({"size", algo}) of the files it wrote the moment they are fsynced — nothing is read
back. `write_state` does the same for a rank's small-state file.

`make_stager` builds what copies the model and optimizer to host memory for an async save. DCP's default
allocates fresh host buffers on every save (a page fault on every page, unpinned on CUDA); this one keeps them
from one save to the next (torch's DefaultStager caches a host copy per storage), pinned on CUDA so the copy
runs at PCIe speed.
Training waits only for that copy. torch versions without DefaultStager (before 2.9) or without `async_stager`
fall back to DCP's default staging.
"""

import contextlib
import inspect
import os
from pathlib import Path

import torch
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.filesystem import FileSystem

from bessemer.checkpoint.manifest import HashingFile


class _HashingFileSystem(FileSystem):
    """DCP's local filesystem with every written stream hashed; `files` maps each written file's name (relative
    to `root`) to its manifest entry once the stream is closed."""

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
            out = HashingFile(stream, self.algo)
            yield out
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
    """FileSystemWriter (files fsynced) that checksums what it writes; `files` after the save: this rank's
    files and their manifest entries (rank 0's include `.metadata`)."""

    def __init__(self, path: Path, algo: str):
        super().__init__(str(path), sync_files=True)
        self.fs = _HashingFileSystem(Path(path), algo)

    @property
    def files(self) -> dict[str, dict]:
        return dict(self.fs.files)


def write_state(path: Path, state: dict, algo: str) -> dict:
    """torch.save `state` to `path` (fsynced); returns its manifest entry, hashed while written."""
    with open(path, "wb") as f:
        out = HashingFile(f, algo)
        torch.save(state, out)
        f.flush()
        os.fsync(f.fileno())
    return out.entry(algo)


def make_stager(cuda: bool):
    """A stager whose host buffers are reused across saves (pinned, with non-blocking copies, on CUDA), or None
    where this torch lacks one (DCP then stages as it always did)."""
    import torch.distributed.checkpoint as dcp

    try:
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
    except ImportError:
        return None
    if "async_stager" not in inspect.signature(dcp.async_save).parameters:
        return None
    # Staging is synchronous: the copy must be complete before the next optimizer step changes the weights, and
    # the training step gives no place to wait for a copy still running. Non-blocking copies on the current
    # stream come after the optimizer step that produced the weights; the stager synchronizes before returning.
    return DefaultStager(StagingOptions(use_pinned_memory=cuda, use_shared_memory=False, use_async_staging=False,
                                        use_non_blocking_copy=cuda))


def async_save(state: dict, writer: HashingWriter, group, stager):
    """Start DCP's async save of `state` (staged by `stager` where given); returns the future of the write."""
    import torch.distributed.checkpoint as dcp

    extra = {"async_stager": stager} if stager is not None else {}
    response = dcp.async_save(state, storage_writer=writer, process_group=group, **extra)
    return getattr(response, "upload_completion", response)  # torch >= 2.9 answers with both futures
