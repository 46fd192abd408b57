"""Saving and restoring the registry of Stateful components.

The trainer hands over a dict name -> object with state_dict()/load_state_dict(); nothing is saved ad hoc.
Layout: <dir>/step_00000050/ and <dir>/latest (the name of the newest complete checkpoint).

- One process: step_N/state.pt holds every component.
- Several ranks: the sharded components (model, optimizer) go through torch.distributed.checkpoint (each
  rank writes its shards; keys are parameter names, so another layout can load them), the small per-rank
  ones (loader position, RNG, counters, schedule) to step_N/rank00000.pt, rank00001.pt, ...

A checkpoint is written under a temporary name, fsynced and renamed, so a crash never leaves a half-written
one that looks complete.
"""

import contextlib
import os
import shutil
from pathlib import Path
from typing import Protocol

import torch
from torch import nn

from bessemer.checkpoint.paths import LATEST, checkpoint_dir, latest_step, step_dir
from bessemer.config import CheckpointConfig
from bessemer.errors import BessemerError

STATE_FILE = "state.pt"


class Stateful(Protocol):
    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class ModelParts:
    """The model parts of this rank (one, or one per pipeline stage) as one Stateful keyed by parameter name."""

    def __init__(self, parts: list[nn.Module]):
        self.parts = parts

    def state_dict(self) -> dict:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return {k: v for part in self.parts for k, v in get_model_state_dict(part).items()}

    def load_state_dict(self, state: dict) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        for part in self.parts:
            missing = set_model_state_dict(part, state, options=StateDictOptions(strict=False)).missing_keys
            if missing:
                raise BessemerError(f"checkpoint lacks model weights {', '.join(sorted(missing)[:5])}"
                                    f"{' ...' if len(missing) > 5 else ''}")


SHARDED = ("model", "optimizer")


@contextlib.contextmanager
def _restoring(path: Path, what: str):
    """A checkpoint that does not fit this run (another model size or vocabulary) is a user error, not a
    traceback."""
    try:
        yield
    except BessemerError:
        raise
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise BessemerError(f"cannot restore {what} from {path} — was it written for another model or "
                            f"config? {first}") from None


def _save_file(path: Path, state: dict) -> None:
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Checkpointer:
    def __init__(self, cfg: CheckpointConfig, run_dir: Path, states: dict[str, Stateful], rank: int = 0,
                 world_size: int = 1):
        self.cfg = cfg
        self.dir = checkpoint_dir(cfg, run_dir)
        self.states = states
        self.rank, self.world_size = rank, world_size

    def due(self, step: int) -> bool:
        return self.cfg.interval > 0 and step % self.cfg.interval == 0

    def latest_step(self) -> int | None:
        return latest_step(self.dir)

    def save(self, step: int) -> Path:
        if self.world_size > 1:
            return self._save_distributed(step)
        final = step_dir(self.dir, step)
        tmp = final.with_name(final.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        _save_file(tmp / STATE_FILE, {name: obj.state_dict() for name, obj in self.states.items()})
        _fsync_dir(tmp)
        self._commit(tmp, final)
        return final

    def _commit(self, tmp: Path, final: Path) -> None:
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        pointer_tmp = self.dir / (LATEST + ".tmp")
        pointer_tmp.write_text(final.name + "\n")
        os.replace(pointer_tmp, self.dir / LATEST)
        _fsync_dir(self.dir)
        self._prune()

    def _rank_file(self, path: Path, rank: int) -> Path:
        return path / f"rank{rank:05d}.pt"

    def _save_distributed(self, step: int) -> Path:
        import torch.distributed as dist
        import torch.distributed.checkpoint as dcp

        final = step_dir(self.dir, step)
        tmp = final.with_name(final.name + ".tmp")
        if self.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        dist.barrier()
        dcp.save({k: self.states[k] for k in SHARDED}, checkpoint_id=str(tmp))
        _save_file(self._rank_file(tmp, self.rank),
                   {name: obj.state_dict() for name, obj in self.states.items() if name not in SHARDED})
        dist.barrier()
        if self.rank == 0:
            _fsync_dir(tmp)
            self._commit(tmp, final)
        dist.barrier()
        return final

    def _load_distributed(self, path: Path) -> None:
        import torch.distributed.checkpoint as dcp

        if not (path / ".metadata").is_file():
            raise BessemerError(f"{path} is not a sharded checkpoint (no .metadata)")
        with _restoring(path, "model and optimizer"):
            dcp.load({k: self.states[k] for k in SHARDED}, checkpoint_id=str(path))
        # A rank that did not exist when the checkpoint was written (another layout) takes rank 0's small
        # state: the loader position and counters are layout-independent at step boundaries.
        own = self._rank_file(path, self.rank)
        self._load_file(own if own.is_file() else self._rank_file(path, 0),
                        [k for k in self.states if k not in SHARDED])

    def _load_file(self, path: Path, names: list[str]) -> None:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # truncated or corrupted file: say which, don't dump a pickle traceback
            raise BessemerError(f"cannot read checkpoint {path}: {e}") from None
        missing = [name for name in names if name not in state]
        if missing:
            raise BessemerError(f"checkpoint {path} lacks {', '.join(missing)}: refusing a partial restore")
        for name in names:
            with _restoring(path, name):
                self.states[name].load_state_dict(state[name])

    def load(self, step: int | None = None) -> int:
        """Restore every registered component from checkpoint `step` (default: the latest); returns the step."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise BessemerError(f"no checkpoint to resume from in {self.dir}")
        path = step_dir(self.dir, step)
        if not path.is_dir():
            raise BessemerError(f"no checkpoint for step {step} at {path}")
        if self.world_size > 1:
            self._load_distributed(path)
        else:
            if not (path / STATE_FILE).is_file():
                raise BessemerError(f"{path} has no {STATE_FILE} (a sharded checkpoint needs the same launch "
                                    f"with several ranks)")
            self._load_file(path / STATE_FILE, list(self.states))
        return step

    def _prune(self) -> None:
        if self.cfg.keep <= 0:
            return
        done = sorted(p for p in self.dir.glob("step_*") if p.is_dir() and not p.name.endswith(".tmp"))
        for old in done[:-self.cfg.keep]:
            shutil.rmtree(old, ignore_errors=True)
