"""The cold tier's storage: compressed, encrypted backups of a checkpoint directory in object storage (any
fsspec URL), and the background uploader that puts them there.

One backup is one object, `<url>/step_NNNNNNNN.bsmr`:

    header (38 bytes, authenticated as GCM associated data)
        magic b"BSMRCOLD" | format version u16 | nonce (12 random bytes) | step u64 | key id (8 bytes)
    ciphertext   AES-256-GCM of zstd(tar(checkpoint directory))
    tag          16 bytes

All integers are big-endian. The key id is the first 8 bytes of sha256(key): it tells a wrong key apart from a
modified object without revealing anything about the key. Everything streams in 8 MiB chunks, so a checkpoint
never sits in memory whole. Restoring decrypts to a temporary file and extracts nothing until the GCM tag has
verified; the directory is then built under a temporary name and renamed into place.

A backup is complete once its marker `<name>.done` exists, written after the object. S3 has no rename (a "move"
is a server-side copy of the whole object, then a delete), so a marker is cheaper than a temporary name and
works the same on every fsspec backend, including a plain local directory. Listings ignore objects without a
marker: an upload that died halfway is never offered for a restore.

AES-GCM limits one message to 2^39 - 256 bits (about 64 GiB): a checkpoint whose compressed tar is larger is
refused with a clear error (a future format version would split the stream into separately sealed segments).

No torch here: `bessemer ckpt` commands list and fetch backups without it.
"""

import base64
import contextlib
import hashlib
import json
import logging
import os
import posixpath
import re
import shutil
import stat
import struct
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import BinaryIO

import zstandard
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from bessemer.checkpoint.paths import redact_url
from bessemer.errors import BessemerError

log = logging.getLogger(__name__)

MAGIC = b"BSMRCOLD"
VERSION = 1
HEADER = struct.Struct(">8sH12sQ8s")  # magic, version, nonce, step, key id
TAG_BYTES = 16
KEY_BYTES = 32
CHUNK = 8 << 20
# NIST SP 800-38D: at most 2^39 - 256 bits of plaintext under one (key, nonce).
GCM_MAX_BYTES = (2**39 - 256) // 8
SUFFIX = ".bsmr"
DONE = ".done"
_NAME = re.compile(r"step_(\d{8,})\.bsmr$")


# ---------------------------------------------------------------------------------------------------- keys


def key_id(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()[:8]


def _check_key(key: bytes) -> None:
    # Only the type and length go into the message, never the value.
    if not isinstance(key, bytes) or len(key) != KEY_BYTES:
        raise BessemerError(f"the backup key must be {KEY_BYTES} bytes (AES-256), got "
                            f"{len(key) if isinstance(key, bytes) else type(key).__name__}")


def _parse_key(text: str, source: str) -> bytes:
    text = text.strip()
    if len(text) == 2 * KEY_BYTES and all(c in "0123456789abcdefABCDEF" for c in text):
        return bytes.fromhex(text)
    try:
        key = base64.b64decode(text, validate=True)
    except ValueError:
        key = b""
    if len(key) == KEY_BYTES:
        return key
    raise BessemerError(f"the backup key in {source} is not {KEY_BYTES} bytes written as {2 * KEY_BYTES} hex "
                        f"characters or base64 (it has {len(text)} characters); make one with: python -c "
                        f"'import secrets; print(secrets.token_hex(32))'")


def load_key(env: str = "BESSEMER_BACKUP_KEY", key_file: str = "") -> bytes:
    """The 32-byte backup key from `key_file` if given, else from the environment variable `env`."""
    if key_file:
        path = Path(key_file).expanduser()
        try:
            mode = path.stat().st_mode
            raw = path.read_bytes()
        except OSError as e:
            raise BessemerError(f"cannot read the backup key file {path}: {e.strerror}") from None
        if mode & 0o077:
            raise BessemerError(f"the backup key file {path} can be read by group or others (mode "
                                f"{stat.S_IMODE(mode):o}); run: chmod 600 {path}")
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError:
            text = "?" * len(raw)  # binary junk: fall through to the format error, which shows no content
        return _parse_key(text, f"key file {path}")
    text = os.environ.get(env, "")
    if not text.strip():
        raise BessemerError(f"no backup key: set the environment variable {env} to {KEY_BYTES} random bytes as "
                            f"{2 * KEY_BYTES} hex characters or base64, or point key_file at a file (mode 600) "
                            f"holding it")
    return _parse_key(text, f"environment variable {env}")


# ------------------------------------------------------------------------------------------------- format


class _Sealer:
    """A write-only stream that encrypts into `out`; zstd writes its compressed frames here."""

    def __init__(self, out: BinaryIO, encryptor):
        self.out, self.encryptor, self.plain_bytes = out, encryptor, 0

    def write(self, data: bytes) -> int:
        self.plain_bytes += len(data)
        if self.plain_bytes > GCM_MAX_BYTES:
            raise BessemerError(f"the compressed checkpoint exceeds {GCM_MAX_BYTES >> 30} GiB, the most AES-GCM "
                                f"may seal under one nonce; this format version cannot back it up")
        self.out.write(self.encryptor.update(data))
        return len(data)

    def flush(self) -> None:
        self.out.flush()


@contextlib.contextmanager
def _sealed_writer(dst_file: Path, key: bytes, step: int, level: int = 3) -> Iterator[BinaryIO]:
    """Yields a stream taking the plain tar; writes header + zstd + AES-GCM + tag to `dst_file`. On error the
    partial file is removed."""
    _check_key(key)
    if not 0 <= step < 2**64:
        raise BessemerError(f"step must be a non-negative integer, got {step}")
    if not 1 <= level <= 22:
        raise BessemerError(f"zstd level must be 1..22, got {level}")
    # A random nonce per backup: NIST allows 2^32 of them under one key, far more backups than any run makes.
    nonce = os.urandom(12)
    header = HEADER.pack(MAGIC, VERSION, nonce, step, key_id(key))
    encryptor = Cipher(algorithms.AES(key), modes.GCM(nonce)).encryptor()
    encryptor.authenticate_additional_data(header)
    try:
        with open(dst_file, "wb") as out:
            out.write(header)
            sealer = _Sealer(out, encryptor)
            with zstandard.ZstdCompressor(level=level).stream_writer(sealer, closefd=False) as zw:
                yield zw
            out.write(encryptor.finalize())
            out.write(encryptor.tag)
    except BaseException:
        Path(dst_file).unlink(missing_ok=True)
        raise


def pack(src_dir: Path, dst_file: Path, key: bytes, step: int, level: int = 3) -> int:
    """Back up every file under `src_dir` into the encrypted file `dst_file`; returns its size in bytes."""
    src_dir = Path(src_dir)
    if not src_dir.is_dir():
        raise BessemerError(f"cannot back up {src_dir}: not a directory")
    entries = []
    for root, dirs, files in os.walk(src_dir):
        for name in dirs + files:
            path = Path(root, name)
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                raise BessemerError(f"cannot back up {path}: only regular files and directories are supported")
            entries.append((path.relative_to(src_dir).as_posix(), path))
    # Sorted names and fixed metadata: the same directory always gives the same tar (before encryption).
    with _sealed_writer(dst_file, key, step, level) as stream, \
            tarfile.open(fileobj=stream, mode="w|", format=tarfile.PAX_FORMAT, bufsize=CHUNK,
                         copybufsize=CHUNK) as tar:
        for rel, path in sorted(entries):
            info = tarfile.TarInfo(rel)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if path.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.mode, info.size = 0o644, path.stat().st_size
                with open(path, "rb") as f:
                    tar.addfile(info, f)
    return Path(dst_file).stat().st_size


def _read_header(head: bytes, key: bytes, where: str) -> tuple[bytes, int]:
    """(nonce, step) from the first bytes of a backup, after checking it is ours and sealed with `key`."""
    if not MAGIC.startswith(head[:len(MAGIC)]):
        raise BessemerError(f"{where} is not a bessemer cold backup (no {MAGIC.decode()} header)")
    if len(head) < HEADER.size:  # an empty or cut-off header counts as truncation
        raise BessemerError(f"{where} failed authentication: the backup was modified or truncated; refusing it")
    _, version, nonce, step, kid = HEADER.unpack(head[:HEADER.size])
    if version != VERSION:
        raise BessemerError(f"{where} has format version {version}; this bessemer reads version {VERSION}")
    if kid != key_id(key):
        raise BessemerError(f"{where} was encrypted with another key (key id {kid.hex()}, yours "
                            f"{key_id(key).hex()})")
    return nonce, step


def _safe_member(member: tarfile.TarInfo, where: str) -> PurePosixPath:
    name = PurePosixPath(member.name)
    if name.is_absolute() or ".." in name.parts or not name.parts or name.parts == (".",):
        raise BessemerError(f"{where} holds the member {member.name!r}, a path outside the checkpoint; "
                            f"refusing it")
    if not (member.isreg() or member.isdir()):
        raise BessemerError(f"{where} holds {member.name!r}, which is not a regular file or directory; "
                            f"refusing it")
    return name


def _extract(tar_zst: Path, into: Path, where: str) -> None:
    with open(tar_zst, "rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as plain, \
            tarfile.open(fileobj=plain, mode="r|", bufsize=CHUNK) as tar:
        for member in tar:
            target = into.joinpath(*_safe_member(member, where).parts)
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with tar.extractfile(member) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, CHUNK)


def unpack(src_file: Path, dst_dir: Path, key: bytes) -> int:
    """Restore the backup `src_file` as the new directory `dst_dir`; returns the step it holds. Nothing appears
    at `dst_dir` unless the whole backup authenticates and extracts."""
    _check_key(key)
    src_file, dst_dir = Path(src_file), Path(dst_dir)
    if dst_dir.exists():
        raise BessemerError(f"cannot restore into {dst_dir}: it already exists")
    dst_dir.parent.mkdir(parents=True, exist_ok=True)
    size = src_file.stat().st_size
    with open(src_file, "rb") as f:
        head = f.read(HEADER.size)
        nonce, step = _read_header(head, key, str(src_file))
        if size < HEADER.size + TAG_BYTES:
            raise BessemerError(f"{src_file} failed authentication: the backup was modified or truncated; "
                                f"refusing it")
        f.seek(size - TAG_BYTES)
        tag = f.read(TAG_BYTES)
        f.seek(HEADER.size)
        decryptor = Cipher(algorithms.AES(key), modes.GCM(nonce)).decryptor()
        decryptor.authenticate_additional_data(head)
        # The plaintext goes to disk next to the destination (not /tmp, which may be small) and is only read
        # back once the tag has verified.
        fd, plain_name = tempfile.mkstemp(dir=dst_dir.parent, prefix=f".{dst_dir.name}.", suffix=".tar.zst")
        plain = Path(plain_name)
        try:
            with os.fdopen(fd, "wb") as out:
                left = size - HEADER.size - TAG_BYTES
                while left:
                    chunk = f.read(min(CHUNK, left))
                    if not chunk:
                        raise BessemerError(f"{src_file} shrank while being read")
                    left -= len(chunk)
                    out.write(decryptor.update(chunk))
                try:
                    out.write(decryptor.finalize_with_tag(tag))
                except InvalidTag:
                    raise BessemerError(f"{src_file} failed authentication: the backup was modified or "
                                        f"truncated; refusing it") from None
            staging = Path(tempfile.mkdtemp(dir=dst_dir.parent, prefix=f".{dst_dir.name}.restore-"))
            try:
                try:
                    _extract(plain, staging, str(src_file))
                except (tarfile.TarError, zstandard.ZstdError) as e:
                    raise BessemerError(f"{src_file} authenticated but its archive is unreadable ({e}): it was "
                                        f"written by a broken or hostile key holder") from None
                os.chmod(staging, 0o755)  # mkdtemp makes it 700; give it the mode of every other directory
                os.rename(staging, dst_dir)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        finally:
            plain.unlink(missing_ok=True)
    return step


# -------------------------------------------------------------------------------------------- object store


@contextlib.contextmanager
def _storage(what: str) -> Iterator[None]:
    """Storage failures (no such bucket, access denied, disk full) as one-line errors saying what failed."""
    try:
        yield
    except BessemerError:
        raise
    except OSError as e:
        raise BessemerError(f"{what}: {e}") from None


def object_name(step: int) -> str:
    return f"step_{step:08d}{SUFFIX}"


class ColdStore:
    """Backups under one fsspec URL. `storage_options` go to fsspec (endpoint_url, credentials, ...) and are
    never logged or shown."""

    def __init__(self, url: str, key: bytes, storage_options: dict | None = None):
        import fsspec.core

        _check_key(key)
        if not url:
            raise BessemerError("the cold tier needs a URL (s3://bucket/prefix or a local path)")
        self.url = url.rstrip("/")
        self._key = key
        try:
            self.fs, root = fsspec.core.url_to_fs(self.url, **(storage_options or {}))
        except ImportError as e:  # fsspec names the missing package; say how this project installs it
            raise ImportError(f"{redact_url(self.url)} needs an fsspec backend that is not installed ({e}); for "
                              f"s3:// run: pip install 'bessemer[s3]'") from None
        self.root = root.rstrip("/")

    def __repr__(self) -> str:
        return f"ColdStore({redact_url(self.url)!r})"

    def _path(self, name: str) -> str:
        return posixpath.join(self.root, name)

    def _where(self, step: int) -> str:
        return f"{redact_url(self.url)}/{object_name(step)}"

    def upload(self, ckpt_dir: Path, step: int, level: int = 3) -> str:
        """Pack `ckpt_dir` to a temporary file beside it, upload it, then mark it complete; returns its URL."""
        from fsspec.implementations.local import LocalFileSystem

        ckpt_dir, name = Path(ckpt_dir), object_name(step)
        fd, tmp_name = tempfile.mkstemp(dir=ckpt_dir.parent, prefix=f".cold-{name}.")
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            pack(ckpt_dir, tmp, self._key, step, level)
            with _storage(f"cold backup of step {step} to {self._where(step)} failed"):
                if isinstance(self.fs, LocalFileSystem):  # object stores have no directories to make
                    self.fs.makedirs(self.root, exist_ok=True)
                # A re-upload of the same step first withdraws the old marker, so a crash in between leaves
                # the step unlisted rather than listed with a half-written object.
                with contextlib.suppress(FileNotFoundError):
                    self.fs.rm_file(self._path(name + DONE))
                self.fs.put_file(str(tmp), self._path(name))
                marker = {"format": VERSION, "step": step, "bytes": tmp.stat().st_size}
                self.fs.pipe_file(self._path(name + DONE), json.dumps(marker).encode())
        finally:
            tmp.unlink(missing_ok=True)
        return self._where(step)

    def list_steps(self) -> list[int]:
        """Steps with a complete backup, oldest first."""
        self.fs.invalidate_cache(self.root)  # another process may have uploaded or pruned since
        with _storage(f"cannot list cold backups at {redact_url(self.url)}"):
            try:
                names = {posixpath.basename(p.rstrip("/")) for p in self.fs.ls(self.root, detail=False)}
            except FileNotFoundError:  # nothing uploaded under this prefix yet
                return []
        return sorted(int(m.group(1)) for n in names if (m := _NAME.match(n)) and n + DONE in names)

    def download(self, step: int, dst_dir: Path) -> Path:
        """Fetch and restore the backup of `step` as the new directory `dst_dir`."""
        dst_dir = Path(dst_dir)
        steps = self.list_steps()
        if step not in steps:
            raise BessemerError(f"no complete cold backup of step {step} at {redact_url(self.url)} (have: "
                                f"{', '.join(map(str, steps)) or 'none'})")
        if dst_dir.exists():
            raise BessemerError(f"cannot restore into {dst_dir}: it already exists")
        remote, where = self._path(object_name(step)), self._where(step)
        dst_dir.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=dst_dir.parent, prefix=f".{dst_dir.name}.", suffix=SUFFIX)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            with _storage(f"cannot fetch {where}"):
                # The header first: a wrong key shows up before many GB are fetched.
                _read_header(self.fs.cat_file(remote, start=0, end=HEADER.size), self._key, where)
                self.fs.get_file(remote, str(tmp))
            with open(tmp, "rb") as f:
                _, held = _read_header(f.read(HEADER.size), self._key, where)
            # The header is authenticated, so once unpack verifies the tag this step is genuine; an object
            # copied over another step's name is refused here.
            if held != step:
                raise BessemerError(f"{where} holds step {held}, not {step}: the object was renamed; refusing it")
            unpack(tmp, dst_dir, self._key)
        finally:
            tmp.unlink(missing_ok=True)
        return dst_dir

    def prune(self, keep: int) -> list[int]:
        """Delete all but the newest `keep` complete backups (0 = keep all); returns the deleted steps."""
        if keep < 0:
            raise BessemerError(f"cold backups to keep must be >= 0 (0 = all), got {keep}")
        steps = self.list_steps()
        old = steps[:-keep] if keep else []
        with _storage(f"cannot prune cold backups at {redact_url(self.url)}"):
            for step in old:
                name = object_name(step)
                # Marker first: a crash halfway leaves an unlisted object, never a listed one that is gone.
                self.fs.rm_file(self._path(name + DONE))
                self.fs.rm_file(self._path(name))
        return old


# ------------------------------------------------------------------------------------------ async uploads


def _snapshot(ckpt_dir: Path, step: int) -> Path:
    """Hard-link every file of `ckpt_dir` into a fresh staging directory beside it (same filesystem) and return
    that directory. Committed checkpoint files are never rewritten in place, so the links keep the content even
    if the trainer deletes the checkpoint meanwhile. The name starts with a dot: no `step_*` glob sees it."""
    root = Path(tempfile.mkdtemp(dir=ckpt_dir.parent, prefix=f".cold-staging-step_{step:08d}-"))
    snapshot = root / ckpt_dir.name
    try:
        try:
            shutil.copytree(ckpt_dir, snapshot, copy_function=os.link)
        except shutil.Error as e:  # a filesystem without hard links: copy instead (slow, but correct)
            log.warning("cannot hard-link %s for its cold backup (%s); copying it instead", ckpt_dir,
                        e.args[0][0][2])
            shutil.rmtree(snapshot, ignore_errors=True)
            shutil.copytree(ckpt_dir, snapshot)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return snapshot


OnDone = Callable[[int, BaseException | None, float], None]


class AsyncUploader:
    """Uploads in a background thread, at most one at a time.

    `submit` snapshots the checkpoint with hard links and returns; the trainer may prune its local copy at once.
    While an upload runs, one more submission waits; a newer submission replaces the waiting one (only the
    newest backup matters) and the replaced step is skipped, logged but not reported. Each finished upload calls
    `on_done(step, error or None, seconds)` from the worker thread; failures are also kept in `errors`.
    Call `wait()` before the process exits: the thread is a daemon, and a killed upload leaves no marker.
    """

    def __init__(self, store: ColdStore, keep: int = 0, on_done: OnDone | None = None, level: int = 3):
        self.store, self.keep, self.on_done, self.level = store, keep, on_done, level
        self.errors: list[tuple[int, BaseException]] = []
        self._cond = threading.Condition()
        self._pending: tuple[int, Path] | None = None
        self._busy = False
        self._thread: threading.Thread | None = None

    def submit(self, ckpt_dir: Path, step: int) -> None:
        ckpt_dir = Path(ckpt_dir)
        if not ckpt_dir.is_dir():
            raise BessemerError(f"cannot back up {ckpt_dir}: not a directory")
        staging = _snapshot(ckpt_dir, step)  # the packed temporary goes beside it, into the same directory
        with self._cond:
            if self._pending is not None:
                old_step, old_staging = self._pending
                log.info("cold backup of step %d skipped: step %d replaces it", old_step, step)
                shutil.rmtree(old_staging.parent, ignore_errors=True)
            self._pending = (step, staging)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="bessemer-cold-upload", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until nothing is running or waiting (or `timeout` seconds); whether it is all done."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending is None and not self._busy, timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._pending is None:
                    self._thread = None  # the next submit starts a fresh thread
                    return
                (step, staging), self._pending, self._busy = self._pending, None, True
            try:
                self._upload(step, staging)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _upload(self, step: int, staging: Path) -> None:
        start, error = time.monotonic(), None
        try:
            url = self.store.upload(staging, step, self.level)
            if self.keep:
                self.store.prune(self.keep)
            log.info("cold backup of step %d uploaded to %s in %.1f s", step, url, time.monotonic() - start)
        except Exception as e:  # whatever failed, the thread lives on and the trainer hears of it
            error = e
            self.errors.append((step, e))
            log.error("cold backup of step %d failed: %s", step, e)
        finally:
            shutil.rmtree(staging.parent, ignore_errors=True)
        if self.on_done is not None:
            try:
                self.on_done(step, error, time.monotonic() - start)
            except Exception as e:  # a broken callback must not stop later uploads
                log.error("cold backup callback failed for step %d: %s", step, e)
