"""Host check of the checkpoint storage: free space and fsync'd write bandwidth (storage.checkpoint), and the
write probe `bessemer doctor --config` also uses to time a checkpoint save. No torch."""

import os
import shutil
import tempfile
import time
from pathlib import Path

from bessemer.doctor.check import Check
from bessemer.doctor.host_context import GIB, NOT_UNDER_ROOT, CheckInfo, HostContext, gib

STORAGE = CheckInfo("storage.checkpoint", "checkpoint storage: free space and fsync'd write bandwidth")

STORAGE_FAIL, STORAGE_WARN = 5 * GIB, 50 * GIB
BANDWIDTH_WARN_MB_S = 200.0
PROBE_BYTES, PROBE_CHUNK = 64 * 1024**2, 4 * 1024**2


def _existing(path: Path) -> Path:
    """The path itself or its nearest existing parent (a run directory not created yet lives on its parent's disk)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def write_probe(directory: Path, nbytes: int = PROBE_BYTES, chunk: int = PROBE_CHUNK) -> float:
    """MB/s of writing `nbytes` in `chunk`s to a temp file in `directory` and fsync'ing it; the file is deleted.
    Random bytes, so compressing or deduplicating filesystems can't shortcut the write."""
    block = os.urandom(chunk)
    fd, name = tempfile.mkstemp(prefix=".bessemer-doctor-", dir=directory)
    try:
        start = time.perf_counter()
        for _ in range(nbytes // chunk):
            os.write(fd, block)
        os.fsync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(name)
    return nbytes / 1e6 / max(elapsed, 1e-9)


def check_storage_checkpoint(ctx: HostContext) -> Check:
    if not ctx.live:
        return STORAGE.result("skip", f"{NOT_UNDER_ROOT} (free space and a write probe need the live filesystem)",
                              measured="shutil.disk_usage + write probe")
    candidates = ctx.ckpt_dirs or [Path.cwd(), Path(tempfile.gettempdir())]
    seen_devices, locations = set(), []
    for path in candidates:
        existing = _existing(path)
        device = existing.stat().st_dev
        if ctx.ckpt_dirs or device not in seen_devices:  # explicit dirs are all probed; defaults once per device
            seen_devices.add(device)
            locations.append((path, existing))
    fails, warns, lines, details = [], [], [], []
    for path, existing in locations:
        free = shutil.disk_usage(existing).free
        try:
            mb_s = write_probe(existing)
        except OSError as e:
            fails.append(f"{path}: cannot write ({e.strerror or e})")
            details.append({"path": str(path), "free_bytes": free, "write_mb_s": None})
            continue
        lines.append(f"{path}: {gib(free)} free, write+fsync {mb_s:.0f} MB/s")
        details.append({"path": str(path), "free_bytes": free, "write_mb_s": round(mb_s, 1)})
        if free < STORAGE_FAIL:
            fails.append(f"{path}: only {gib(free)} free (< 5 GiB)")
        elif free < STORAGE_WARN:
            warns.append(f"{path}: {gib(free)} free (< 50 GiB)")
        if mb_s < BANDWIDTH_WARN_MB_S:
            warns.append(f"{path}: write+fsync {mb_s:.0f} MB/s (< {BANDWIDTH_WARN_MB_S:.0f} MB/s)")
    fix = ""
    if fails or warns:
        fix = ("free space or point the checkpoint dirs elsewhere (checkpoint.micro.keep / .macro.keep limit the "
               "retained steps); slow writes stall training at every save: local NVMe for the hot tier, measure "
               "with fio")
    status = "fail" if fails else "warn" if warns else "pass"
    return STORAGE.result(status, "; ".join(fails + warns + lines),
                          fix=fix, measured=f"shutil.disk_usage; write {PROBE_BYTES // 1024**2} MiB in "
                                            f"{PROBE_CHUNK // 1024**2} MiB chunks + fsync", locations=details)
