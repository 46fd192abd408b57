"""Saving and restoring the registry of Stateful components (single process).

The trainer hands over a dict name -> object with state_dict()/load_state_dict(); nothing is saved ad hoc.
Layout: <dir>/step_00000050/state.pt and <dir>/latest (the name of the newest complete checkpoint). A
checkpoint is written under a temporary name, fsynced and renamed, so a crash never leaves a half-written
one that looks complete.
"""

import os
import shutil
from pathlib import Path
from typing import Protocol

import torch

from bessemer.config import CheckpointConfig
from bessemer.errors import BessemerError

LATEST = "latest"
STATE_FILE = "state.pt"


class Stateful(Protocol):
    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Checkpointer:
    def __init__(self, cfg: CheckpointConfig, run_dir: Path, states: dict[str, Stateful]):
        self.cfg = cfg
        self.dir = Path(cfg.dir) if cfg.dir else run_dir / "checkpoints"
        self.states = states

    def due(self, step: int) -> bool:
        return self.cfg.interval > 0 and step % self.cfg.interval == 0

    def latest_step(self) -> int | None:
        pointer = self.dir / LATEST
        if not pointer.is_file():
            return None
        name = pointer.read_text().strip()
        if not (self.dir / name / STATE_FILE).is_file():
            raise BessemerError(f"{pointer} names {name}, which has no {STATE_FILE}")
        return int(name.removeprefix("step_"))

    def save(self, step: int) -> Path:
        final = self.dir / f"step_{step:08d}"
        tmp = self.dir / f"step_{step:08d}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        state = {name: obj.state_dict() for name, obj in self.states.items()}
        with open(tmp / STATE_FILE, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        pointer_tmp = self.dir / (LATEST + ".tmp")
        pointer_tmp.write_text(final.name + "\n")
        os.replace(pointer_tmp, self.dir / LATEST)
        _fsync_dir(self.dir)
        self._prune()
        return final

    def load(self, step: int | None = None) -> int:
        """Restore every registered component from checkpoint `step` (default: the latest); returns the step."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise BessemerError(f"no checkpoint to resume from in {self.dir}")
        path = self.dir / f"step_{step:08d}" / STATE_FILE
        if not path.is_file():
            raise BessemerError(f"no checkpoint for step {step} at {path}")
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # truncated or corrupted file: say which, don't dump a pickle traceback
            raise BessemerError(f"cannot read checkpoint {path}: {e}") from None
        missing = [name for name in self.states if name not in state]
        if missing:
            raise BessemerError(f"checkpoint {path} lacks {', '.join(missing)}: refusing a partial restore")
        for name, obj in self.states.items():
            obj.load_state_dict(state[name])
        return step

    def _prune(self) -> None:
        if self.cfg.keep <= 0:
            return
        done = sorted(p for p in self.dir.glob("step_*") if p.is_dir() and not p.name.endswith(".tmp"))
        for old in done[:-self.cfg.keep]:
            shutil.rmtree(old, ignore_errors=True)
