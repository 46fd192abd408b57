"""The cold tier as the trainer uses it: every `interval_hours` of wall time, rank 0 hands the newest macro
checkpoint to a background uploader (compressed, encrypted: cold_store.py) — from the checkpointer's housekeeping
thread, so no rank waits for the snapshot; on recovery, when no local checkpoint is intact, rank 0 downloads the
newest backup into the macro directory on a thread of its own while the other ranks poll. Snapshots that a
killed process left behind are cleared with the macro tier's other leftovers at start-up. No torch."""

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from bessemer.checkpoint.cold_store import AsyncUploader, ColdStore, load_key
from bessemer.checkpoint.paths import step_dir
from bessemer.config import ColdTierConfig
from bessemer.errors import BessemerError


def open_store(cfg: ColdTierConfig) -> ColdStore:
    options = {"endpoint_url": cfg.endpoint_url} if cfg.endpoint_url else {}
    return ColdStore(cfg.url, load_key(cfg.key_env, cfg.key_file), options)


class ColdTier:
    """Backups on a wall-clock interval, restores on demand. Only rank 0 creates one."""

    def __init__(self, cfg: ColdTierConfig, on_done: Callable[[int, BaseException | None, float], None]):
        self.cfg = cfg
        self.store = open_store(cfg)  # reads the key now: a missing key fails at start, not hours later
        self.uploader = AsyncUploader(self.store, keep=cfg.keep, on_done=on_done)
        self.last_submit: float | None = None

    def committed(self, tier: str, step: int, path: Path) -> None:
        """A checkpoint was committed: back it up if it is a macro one and the interval has passed."""
        if tier != "macro" or self.cfg.interval_hours <= 0:
            return
        now = time.monotonic()
        if self.last_submit is None or now - self.last_submit >= self.cfg.interval_hours * 3600:
            self.uploader.submit(path, step)
            self.last_submit = now

    def restore_newest(self, macro_dir: Path) -> tuple[int, Path] | None:
        """Download the newest complete backup into `macro_dir` (replacing a damaged local copy of that step)."""
        steps = self.store.list_steps()
        if not steps:
            return None
        step = steps[-1]
        dest = step_dir(macro_dir, step)
        if dest.exists():  # only reached when every local checkpoint failed its checks
            shutil.rmtree(dest)
        macro_dir.mkdir(parents=True, exist_ok=True)
        return step, self.store.download(step, dest)

    def wait(self, timeout: float | None = None) -> bool:
        return self.uploader.wait(timeout)


def restore(cfg: ColdTierConfig, macro_dir: Path, step: int | None = None) -> Path:
    """`bessemer ckpt restore`: download a backup (default: the newest) into the macro directory."""
    store = open_store(cfg)
    steps = store.list_steps()
    if not steps:
        raise BessemerError(f"no complete backups at {cfg.url}")
    step = steps[-1] if step is None else step
    if step not in steps:
        raise BessemerError(f"no backup of step {step} at {cfg.url}; there are {', '.join(map(str, steps))}")
    dest = step_dir(macro_dir, step)
    if dest.exists():
        raise BessemerError(f"{dest} exists; remove it first to restore step {step} from the backup")
    macro_dir.mkdir(parents=True, exist_ok=True)
    return store.download(step, dest)
