"""File work that no other rank waits for: pruning old checkpoints, deleting failed saves, handing committed
checkpoints to the cold tier — on one background thread of the rank that owns the directory, in the order
submitted. No torch.

Collectives never wait on it: the training loop goes on while it deletes. Work that a later save could
collide with is first renamed aside (`.trash-*`, a cheap rename) and deleted here.
"""

import queue
import shutil
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

from bessemer.checkpoint.paths import TRASH, leftovers


class Housekeeper:
    def __init__(self):
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []  # reported by the main thread (events are not written from this one)

    def submit(self, what: str, fn: Callable[[], None]) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="checkpoint-housekeeping", daemon=True)
            self._thread.start()
        self._queue.put((what, fn))

    def delete(self, *paths: Path) -> None:
        for path in paths:
            self.submit(f"deleting {path}", lambda p=path: shutil.rmtree(p, ignore_errors=True))

    def wait(self) -> None:
        """Until everything submitted so far is done (the end of a run)."""
        if self._thread is not None:
            self._queue.join()

    def take_errors(self) -> list[str]:
        errors, self.errors = self.errors, []
        return errors

    def _run(self) -> None:
        while True:
            what, fn = self._queue.get()
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - reported, never fatal: the checkpoints are committed
                self.errors.append(f"{what}: {type(e).__name__}: {e}")
            finally:
                self._queue.task_done()


def trash(path: Path) -> Path:
    """Rename `path` aside under a unique hidden name (to be deleted later); returns the new name."""
    aside = path.with_name(f"{TRASH}{path.name}-{uuid.uuid4().hex[:8]}")
    path.rename(aside)
    return aside


def clear_leftovers(directories: list[Path]) -> None:
    """At start-up, before the process group exists: what a killed process left in these tier directories is
    renamed aside at once (so no new save meets it) and deleted on a daemon thread."""
    doomed = []
    for directory in directories:
        for path in leftovers(directory):
            try:
                doomed.append(path if path.name.startswith(TRASH) else trash(path))
            except OSError:
                continue
    if doomed:
        threading.Thread(target=lambda: [shutil.rmtree(p, ignore_errors=True) for p in doomed],
                         name="checkpoint-leftovers", daemon=True).start()
