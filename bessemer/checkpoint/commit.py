"""The commit: what turns a directory of written files into a checkpoint, on the rank that owns the directory,
and the news of its outcome for the training thread.

`write_manifest` (every file's size and checksum, computed while the files were written, fsynced) comes last
inside `step_N.tmp/`; then the directory is fsynced, renamed to `step_N/`, the tier directory fsynced and
`latest` replaced. A failure before the rename leaves only a `.tmp` (never loaded), which is renamed aside and
deleted. Commits of shared tiers run on the owner's housekeeping thread, so the training thread never waits
for them — except that a save waits for the commit before it (`wait`): a new save writing while the previous
one is uncommitted could fill the disk under the previous one's manifest.
"""

import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bessemer.checkpoint.components import text
from bessemer.checkpoint.housekeeping import Housekeeper, trash
from bessemer.checkpoint.manifest import write_manifest
from bessemer.checkpoint.paths import LATEST, fsync_dir
from bessemer.checkpoint.retention import prune
from bessemer.config import CheckpointConfig
from bessemer.errors import BessemerError

Event = Callable[..., None]  # event(name, step, **fields)


def _ignore(*args, **fields) -> None:
    pass


@dataclass(frozen=True)
class CheckpointHooks:
    """What the checkpointer calls out to, each optional. `event(name, step, **fields)` reports committed saves,
    failed ones and checkpoints skipped during recovery; `midway(step)` runs halfway through a save (fault
    injection); `committed(tier, step, path)` runs on rank 0's housekeeping thread after each commit (the cold
    tier's hand-off)."""

    event: Event | None = None
    midway: Callable[[int], None] | None = None
    committed: Callable[[str, int, Path], None] | None = None


class Commits:
    """Commits, discards and retention for the tiers `owns(tier)` says this rank owns; `hooks.committed` runs on
    rank 0 after each commit. `meta` goes into every manifest, `config` into macro ones. At most one commit is
    pending."""

    def __init__(self, cfg: CheckpointConfig, tiers: dict[str, Path], owns: Callable[[str], bool], rank: int,
                 meta: dict, config: str, hooks: CheckpointHooks):
        self.cfg, self.tiers, self.owns, self.rank = cfg, tiers, owns, rank
        self.meta, self.config = meta, config
        self.event, self.committed = hooks.event or _ignore, hooks.committed or _ignore
        self.housekeeper = Housekeeper()
        self._news: queue.SimpleQueue = queue.SimpleQueue()  # outcomes, from the housekeeping thread
        self._pending: threading.Event | None = None

    # ------------------------------------------------------------------------------------------- pending

    def run(self, what: str, work: Callable[[], None]) -> None:
        """Run `work` (a save's end: agreement and commit) on the housekeeping thread as the pending commit."""
        done = self._pending = threading.Event()

        def run() -> None:
            try:
                work()
            finally:
                done.set()

        self.housekeeper.submit(what, run)

    def wait(self) -> None:
        """Until the pending commit (if any) is done, committed or failed."""
        if self._pending is not None:
            self._pending.wait()
            self._pending = None

    # ------------------------------------------------------------------------------------------- commit

    def commit(self, tmp: Path, final: Path, tier: str, step: int, files: dict, fields: Callable[[], dict]) -> None:
        """The owner, on its housekeeping thread: the manifest of every rank's files, then the rename; the
        outcome (with `fields()` for the checkpoint_saved event) goes to `report`."""
        meta = {**self.meta, "tier": tier, "versions": dict(self.meta["versions"])}
        if tier == "macro" and self.config:
            meta["config"] = self.config
        try:  # everything up to the rename: a failure here leaves only a .tmp behind
            self.write(tmp, final, step, meta, files)
        except OSError as e:
            self.discard(tier, tmp)
            self._news.put(("failed", step, tier, text(e)))
            return
        self.after(tier, step, final)
        self._news.put(("saved", step, fields()))

    def write(self, tmp: Path, final: Path, step: int, meta: dict, files: dict) -> None:
        """Write the manifest into `tmp`, rename it to `final` (an older checkpoint of that step is set aside)
        and point `latest` at it, each step fsynced."""
        write_manifest(tmp, step, self.cfg.checksum, meta, files=files)
        fsync_dir(tmp)
        if final.exists():
            self.housekeeper.delete(trash(final))
        os.replace(tmp, final)
        fsync_dir(final.parent)
        try:  # the checkpoint is committed; the pointer is a convenience
            pointer = final.parent / (LATEST + ".tmp")
            pointer.write_text(final.name + "\n")
            os.replace(pointer, final.parent / LATEST)
        except OSError as e:
            self.housekeeper.errors.append(f"updating {final.parent / LATEST}: {e}")

    def after(self, tier: str, step: int, final: Path) -> None:
        """The owner's housekeeping, in the background: hand the checkpoint to the cold tier, prune."""
        if self.owns(tier):
            if self.rank == 0:
                self.housekeeper.submit(f"backing up step {step}", lambda: self.committed(tier, step, final))
            keep = getattr(self.cfg, tier).keep
            self.housekeeper.submit(f"pruning the {tier} tier", lambda: prune(self.tiers[tier], keep, step))

    def discard(self, tier: str, tmp: Path) -> None:
        """The owner renames a partial save aside at once (so no `.tmp` is left where the next save goes) and
        deletes it in the background."""
        if self.owns(tier):
            try:
                self.housekeeper.delete(trash(tmp))
            except OSError:  # never created, or a full disk refusing even the rename: delete it where it is
                self.housekeeper.delete(tmp)

    def failed_later(self, step: int, tier: str, reason: str) -> None:
        """From the housekeeping thread: a save that failed there, for `report` to alert."""
        self._news.put(("failed", step, tier, reason))

    # ------------------------------------------------------------------------------------------- news

    def report(self, step: int) -> None:
        """On the training thread: events for the commits finished in the background since the last call, and
        alerts for housekeeping that failed. A failed save with checkpoint.on_error = "stop" raises here."""
        while True:
            try:
                news = self._news.get_nowait()
            except queue.Empty:
                break
            if news[0] == "failed":
                self.alert_failed(*news[1:])
            else:
                self.event("checkpoint_saved", news[1], **news[2])
        for message in self.housekeeper.take_errors():
            self.event("alert", step, kind="checkpoint_housekeeping", message=message)

    def alert_failed(self, step: int, tier: str, reason: str) -> None:
        self.event("alert", step, kind="checkpoint_failed", tier=tier,
                   message=f"{tier} checkpoint at step {step} failed and was removed ({reason}); the previous "
                           f"checkpoints are intact")
        if self.cfg.on_error == "stop":
            raise BessemerError(f"checkpoint at step {step} failed: {reason} (checkpoint.on_error = \"stop\")")


def saved_fields(tier: str, final: Path, t0: float, stall_s: float | None = None) -> dict:
    """The fields of a checkpoint_saved event: `seconds` until committed; for an async save also the stall."""
    fields = {"tier": tier, "path": str(final), "seconds": round(time.perf_counter() - t0, 3)}
    if stall_s is not None:
        fields |= {"stall_seconds": round(stall_s, 3), "background": True}
    return fields
