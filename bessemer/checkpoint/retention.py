"""Which checkpoints a tier keeps: the newest `keep` committed ones; saves that died before the newest commit go,
damaged checkpoints are renamed aside (kept for inspection, no longer candidates, not counted). No torch.

Runs on the directory owner's housekeeping thread (housekeeping.py): a newer save in progress is never touched.
"""

import contextlib
import os
import shutil
from pathlib import Path

from bessemer.checkpoint.housekeeping import Housekeeper, trash
from bessemer.checkpoint.paths import committed

DAMAGED = ".damaged"


def tmp_step(path: Path) -> int | None:
    """The step of an unfinished save's directory (`step_N.tmp`), or None."""
    try:
        return int(path.name.removeprefix("step_").removesuffix(".tmp"))
    except ValueError:
        return None


def prune(directory: Path, keep: int, keep_step: int) -> None:
    """Remove saves that died before `keep_step`'s and all but the newest `keep` committed checkpoints up to
    `keep_step` (keep = 0: every committed one stays) — never `keep_step`, the one just committed."""
    for old in directory.glob("step_*.tmp"):
        if (step := tmp_step(old)) is not None and step < keep_step:
            shutil.rmtree(old, ignore_errors=True)
    if keep > 0:
        done = [p for s, p in committed(directory) if s <= keep_step]
        for old in done[:-keep]:
            shutil.rmtree(old, ignore_errors=True)


def set_aside(path: Path, housekeeper: Housekeeper) -> None:
    """Rename a damaged checkpoint to step_N.damaged (an older one of that name is deleted in the background)."""
    aside = path.with_name(path.name + DAMAGED)
    with contextlib.suppress(OSError):
        if aside.exists():
            housekeeper.delete(trash(aside))
        os.replace(path, aside)
