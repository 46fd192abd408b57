"""The manifest: what a complete checkpoint holds, with a checksum and size per file — no torch.

Written last, inside the temporary directory, after every file is fsynced; the directory is then renamed
into place. So a checkpoint with a manifest was complete when committed, and `check` tells whether it still
is: no file missing, truncated, grown or altered since. A checkpoint without a valid manifest is never
loaded.
"""

import hashlib
import json
import os
import platform
import time
from pathlib import Path

from bessemer.checkpoint.paths import MANIFEST, step_of

FORMAT = 1
_CHUNK = 8 << 20


def hasher(algo: str):
    if algo == "xxh3":
        import xxhash

        return xxhash.xxh3_128()
    if algo == "sha256":
        return hashlib.sha256()
    raise ValueError(f"unknown checksum {algo!r}")


class HashingFile:
    """A write-only file that hashes and counts what goes through it, so a file's manifest entry is known the
    moment it is written: no second read of a checkpoint to checksum it."""

    def __init__(self, f, algo: str):
        self.f, self.h, self.size = f, hasher(algo), 0

    def write(self, data) -> int:
        self.h.update(data)
        self.size += memoryview(data).nbytes  # len() counts elements, not bytes, of a typed buffer
        return self.f.write(data)

    def entry(self, algo: str) -> dict:
        """This file's manifest entry {"size", algo}."""
        return {"size": self.size, algo: self.h.hexdigest()}

    def __getattr__(self, name):  # tell, flush, fileno (for fsync), close: the file's own
        return getattr(self.f, name)


def checksum(path: Path, algo: str) -> str:
    h = hasher(algo)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def files_of(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST)


def describe_files(directory: Path, algo: str, names: list[str] | None = None) -> dict:
    """{relative path: {"size", algo}} for `names` (default: every file of `directory`)."""
    return {rel: {"size": (directory / rel).stat().st_size, algo: checksum(directory / rel, algo)}
            for rel in (files_of(directory) if names is None else names)}


def write_manifest(directory: Path, step: int, algo: str, meta: dict, files: dict | None = None) -> dict:
    """Write manifest.json (fsynced) for `directory`: `files` as `describe_files` gives them (computed here
    when not given), step, checksum algorithm and `meta`."""
    files = describe_files(directory, algo) if files is None else files
    meta = dict(meta)
    manifest = {"format": FORMAT, "step": step, "checksum": algo, "files": files, "created": time.time(),
                "versions": {"python": platform.python_version(), **meta.pop("versions", {})}, **meta}
    tmp = directory / (MANIFEST + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / MANIFEST)
    return manifest


def read_manifest(directory: Path) -> dict:
    """The manifest, or ValueError saying why there is no valid one."""
    path = directory / MANIFEST
    if not path.is_file():
        raise ValueError(f"{path}: no manifest (the save never completed)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: unreadable manifest ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or not isinstance(manifest.get("files"), dict):
        raise ValueError(f"{path}: not a format-{FORMAT} manifest")
    return manifest


def check(directory: Path, files: list[str] | None = None) -> list[str]:
    """Problems with the checkpoint at `directory` (empty = intact): manifest, step, and every file's size and
    checksum (or only `files`, to split the reading between ranks)."""
    try:
        manifest = read_manifest(directory)
    except ValueError as e:
        return [str(e)]
    problems = [p for p in [step_problem(directory, manifest)] if p]
    algo = manifest.get("checksum")
    for rel, want in sorted(manifest["files"].items()):
        if files is not None and rel not in files:
            continue
        problem = file_problem(directory / rel, want, algo)
        if problem:
            problems.append(problem)
    return problems


def step_problem(directory: Path, manifest: dict) -> str | None:
    if step_of(directory) is not None and manifest.get("step") != step_of(directory):
        return (f"{directory / MANIFEST}: manifest step {manifest.get('step')} but directory {directory.name} "
                f"(edited or moved)")
    return None


def file_problem(path: Path, want: dict, algo: str, size: int | None = None, digest: str | None = None) -> str | None:
    """What is wrong with one file against its manifest entry `want`, or None. Given the `size` and `digest` of
    the bytes already read, nothing is read again."""
    if size is None:
        if not path.is_file():
            return f"{path}: missing"
        size = path.stat().st_size
    if size != want.get("size"):
        return f"{path}: {size} bytes, manifest says {want.get('size')} (truncated or altered)"
    if (digest if digest is not None else checksum(path, algo)) != want.get(algo):
        return f"{path}: {algo} checksum does not match the manifest (corrupted)"
    return None
