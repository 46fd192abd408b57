"""Saving and restoring the registry of Stateful components, in tiers, with an atomic commit.

The trainer hands over a dict name -> object with state_dict()/load_state_dict(); nothing is saved ad hoc.
One checkpoint, in any tier and with any number of ranks (one process included):

    step_00000050/
      __0_0.distcp ...   model and optimizer through torch.distributed.checkpoint: each rank writes its
      .metadata          shards, keyed by parameter name, so another layout (or one process) can load them
      rank00000.pt ...   each rank's small state: loss scaler, loader position, RNG, counters, LR schedule
      manifest.json      size + checksum of every file, step, tier, layout, versions (macro: the config)

The commit protocol: write under `step_N.tmp/` (every file fsynced), checksum the files (split over the
ranks), write the manifest last, rename to `step_N/`, fsync the tier directory, replace `latest`. A crash at
any point leaves either the previous checkpoints alone or a complete new one; `.tmp` directories are never
loaded and are removed by the next save.
"""

import contextlib
import hashlib
import os
import shutil
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException

from bessemer import __version__
from bessemer.checkpoint.manifest import (check, describe_files, files_of, fsync_dir, read_manifest,
                                          write_manifest)
from bessemer.checkpoint.paths import LATEST, candidates, committed, step_dir, tier_dirs
from bessemer.config import CheckpointConfig
from bessemer.errors import BessemerError
from bessemer.parallel.reduce import local

SHARDED = ("model", "optimizer")
ABSURD = 1e10  # |x| above this in weights or optimizer moments: a checkpoint not worth resuming from

# DCP warns on every save and load in a single process that it assumes one process: it is right.
warnings.filterwarnings("ignore", message="torch.distributed is (disabled, )?unavailable or uninitialized")

Event = Callable[..., None]  # event(name, step, **fields)

if TYPE_CHECKING:
    from bessemer.checkpoint.backup import ColdTier


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


@contextlib.contextmanager
def _restoring(path: Path, what: str):
    """A checkpoint that does not fit this run (another model size or vocabulary) is a user error, not a
    traceback."""
    try:
        yield
    except BessemerError:
        raise
    except (Exception, CheckpointException) as e:
        raise BessemerError(f"cannot restore {what} from {path} — was it written for another model or "
                            f"config? {_reason(e)}") from None


def _save_file(path: Path, state: dict) -> None:
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())


def rank_file(path: Path, rank: int) -> Path:
    return path / f"rank{rank:05d}.pt"


def config_hash(config_toml: str) -> str:
    return hashlib.sha256(config_toml.encode()).hexdigest()[:16]


class Checkpointer:
    """Saves to the micro and macro tiers and recovers from the newest intact checkpoint among them.

    `meta` goes into every manifest (layout, config hash); `config` (the resolved TOML) into macro ones.
    `event(name, step, **fields)` reports committed saves, failed ones and checkpoints skipped during
    recovery. `midway(step)` runs halfway through a save (fault injection).
    """

    def __init__(self, cfg: CheckpointConfig, run_dir: Path, states: dict[str, Stateful], rank: int = 0,
                 world_size: int = 1, meta: dict | None = None, config: str = "", event: Event | None = None,
                 midway: Callable[[int], None] | None = None,
                 committed: Callable[[str, int, Path], None] | None = None):
        self.cfg = cfg
        self.tiers = tier_dirs(cfg, run_dir)
        self.states = states
        self.rank, self.world_size = rank, world_size
        self.distributed = world_size > 1 and dist.is_initialized()
        self.meta = {**(meta or {}), "world_size": world_size, "components": sorted(states),
                     "versions": {"bessemer": __version__, "torch": torch.__version__}}
        if config:
            self.meta["config_hash"] = config_hash(config)
        self.config = config
        self.event = event or (lambda *a, **k: None)
        self.midway = midway or (lambda step: None)
        self.committed = committed or (lambda tier, step, path: None)  # rank 0, after each commit
        self.pending = None  # (future, tmp, final, tier, step, t0) of the async save in flight
        self.last_save_s: float | None = None  # the training time the last save cost (the stall, when async)
        self.last_micro_step = 0
        self.micro_interval = cfg.micro.interval if cfg.micro.interval != "auto" else 1  # auto: measure first
        # An async save runs DCP's collectives in a background thread: on the training loop's group they could
        # pair with the loop's own collectives in a different order on each rank, and NCCL groups cannot run
        # them at all. So async saves get a gloo group of their own (created on every rank, in order).
        self.async_group = dist.new_group(backend="gloo") if cfg.async_save and self.distributed else None

    # ------------------------------------------------------------------------------------------- when

    def due(self, step: int) -> str | None:
        """The tier to save to after `step`, if any (macro wins when both are due)."""
        if self.cfg.macro.interval and step % self.cfg.macro.interval == 0:
            return "macro"
        if not self.micro_interval:
            return None
        if self.cfg.micro.interval == "auto":  # the interval moves with the measurements: count from the last save
            return "micro" if step - self.last_micro_step >= self.micro_interval else None
        # Fixed intervals fall on multiples, so a resumed run saves at the steps an uninterrupted one does.
        return "micro" if step % self.micro_interval == 0 else None

    # ------------------------------------------------------------------------------------------- save

    def _barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def _any(self, flag: bool) -> bool:
        """Whether any rank raised `flag`."""
        if not self.distributed:
            return flag
        t = torch.tensor([int(flag)], device=_collective_device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def save(self, step: int, tier: str) -> Path | None:
        """Save every component as checkpoint `step` of `tier`; returns its path, or None when the save failed
        and checkpoint.on_error is "continue" (the partial save removed, an alert raised)."""
        t0 = time.perf_counter()
        self.finish()  # at most one save in flight
        final = step_dir(self.tiers[tier], step)
        tmp = final.with_name(final.name + ".tmp")
        error = None
        try:
            if self.rank == 0:
                shutil.rmtree(tmp, ignore_errors=True)
                tmp.mkdir(parents=True)
        except OSError as e:
            error = e
        if self._any(error is not None):
            return self._failed(step, tier, tmp, error)
        future = None
        try:
            sharded = {k: self.states[k] for k in SHARDED if k in self.states}
            import torch.distributed.checkpoint as dcp

            if self.cfg.async_save:
                future = dcp.async_save(sharded, checkpoint_id=str(tmp), process_group=self.async_group)
            else:
                dcp.save(sharded, checkpoint_id=str(tmp))
            self.midway(step)
            _save_file(rank_file(tmp, self.rank), {k: v.state_dict() for k, v in self.states.items() if k not in SHARDED})
        except (Exception, CheckpointException) as e:  # DCP raises on every rank when any rank's write fails
            error = e
        if self._any(error is not None):
            if future is not None:  # let the background write end before its directory is removed
                with contextlib.suppress(Exception, CheckpointException):
                    future.result()
            return self._failed(step, tier, tmp, error)
        self.last_micro_step = step  # a macro save also resets the micro count
        if future is not None:
            self.last_save_s = time.perf_counter() - t0  # the stall: what training waited for
            self.pending = (future, tmp, final, tier, step, t0)
            return final
        path = self._commit(tmp, final, tier, step)
        self.last_save_s = time.perf_counter() - t0
        self.event("checkpoint_saved", step, tier=tier, path=str(path), seconds=round(self.last_save_s, 3))
        return path

    def finish(self) -> Path | None:
        """Wait for the save in flight (if any) and commit it."""
        if self.pending is None:
            return None
        future, tmp, final, tier, step, t0 = self.pending
        self.pending = None
        error = None
        try:
            future.result()
        except (Exception, CheckpointException) as e:
            error = e
        if self._any(error is not None):
            self._failed(step, tier, tmp, error)
            return None
        path = self._commit(tmp, final, tier, step)
        self.event("checkpoint_saved", step, tier=tier, path=str(path), stall_seconds=round(self.last_save_s, 3),
                   seconds=round(time.perf_counter() - t0, 3), background=True)
        return path

    def _failed(self, step: int, tier: str, tmp: Path, error: BaseException | None) -> None:
        self._barrier()
        if self.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        reason = _reason(error) if error is not None else "failed on another rank"
        self.event("alert", step, kind="checkpoint_failed", tier=tier,
                   message=f"{tier} checkpoint at step {step} failed and was removed ({reason}); the previous "
                           f"checkpoints are intact")
        if self.cfg.on_error == "stop":
            raise BessemerError(f"checkpoint at step {step} failed: {reason} (checkpoint.on_error = \"stop\")")
        return None

    def _commit(self, tmp: Path, final: Path, tier: str, step: int) -> Path:
        # Every rank checksums its share of the files; rank 0 writes the manifest and renames.
        names = files_of(tmp) if self.rank == 0 else None
        if self.distributed:
            box = [names]
            dist.broadcast_object_list(box, src=0)
            names = box[0]
        error, mine = None, {}
        try:
            mine = describe_files(tmp, self.cfg.checksum, names[self.rank::self.world_size])
        except OSError as e:
            error = e
        parts = [mine]
        if self.distributed:
            parts = [None] * self.world_size
            dist.gather_object(mine, parts if self.rank == 0 else None, dst=0)
        if self.rank == 0 and error is None:
            try:  # everything up to the rename: a failure here leaves only a .tmp behind
                files = {k: v for part in parts for k, v in part.items()}
                meta = {**self.meta, "tier": tier, "versions": dict(self.meta["versions"])}
                if tier == "macro" and self.config:
                    meta["config"] = self.config
                write_manifest(tmp, step, self.cfg.checksum, meta, files=files)
                fsync_dir(tmp)
                if final.exists():
                    shutil.rmtree(final)
                os.replace(tmp, final)
            except OSError as e:
                error = e
        if self._any(error is not None):
            return self._failed(step, tier, tmp, error)
        if self.rank == 0:
            try:  # the checkpoint is committed; what follows may fail without undoing it
                pointer = final.parent / (LATEST + ".tmp")
                pointer.write_text(final.name + "\n")
                os.replace(pointer, final.parent / LATEST)
                fsync_dir(final.parent)
                self._prune(tier, keep_step=step)
                self.committed(tier, step, final)
            except Exception as e:  # noqa: BLE001 - a pointer, pruning or backup problem must not stop training
                self.event("alert", step, kind="checkpoint_housekeeping",
                           message=f"{tier} checkpoint at step {step} is committed, but {_reason(e)}")
        self._barrier()
        return final

    def _prune(self, tier: str, keep_step: int) -> None:
        """Remove unfinished saves and all but the newest `keep` committed checkpoints — never `keep_step`, the
        one just committed (damaged checkpoints were renamed aside by recovery, so they do not count)."""
        keep = getattr(self.cfg, tier).keep
        directory = self.tiers[tier]
        for old in directory.glob("step_*.tmp"):  # saves that died before their commit
            shutil.rmtree(old, ignore_errors=True)
        if keep > 0:
            done = [p for s, p in committed(directory) if s <= keep_step]
            for old in done[:-keep]:
                shutil.rmtree(old, ignore_errors=True)

    # ------------------------------------------------------------------------------------------- load

    def load(self, path: Path) -> None:
        """Restore every component from the checkpoint at `path` (any layout's)."""
        import torch.distributed.checkpoint as dcp

        if not (path / ".metadata").is_file():
            raise BessemerError(f"{path} is not a checkpoint (no .metadata)")
        with _restoring(path, "model and optimizer"):
            dcp.load({k: self.states[k] for k in SHARDED if k in self.states}, checkpoint_id=str(path))
        # A rank that did not exist when the checkpoint was written (another layout) takes rank 0's small
        # state: the loader position and counters are layout-independent at step boundaries.
        own = rank_file(path, self.rank)
        self._load_file(own if own.is_file() else rank_file(path, 0), [k for k in self.states if k not in SHARDED])

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

    def problems(self, path: Path) -> list[str]:
        """What is wrong with the files of checkpoint `path` (manifest, sizes, checksums), the reading split
        over the ranks; every rank gets the same list."""
        box = [None]
        if self.rank == 0:
            try:
                box = [(sorted(read_manifest(path)["files"]), None)]
            except (ValueError, OSError) as e:
                box = [(None, str(e))]
        if self.distributed:
            dist.broadcast_object_list(box, src=0)
        names, error = box[0]
        if error:
            return [error]
        try:
            found = check(path, files=names[self.rank::self.world_size])
        except (ValueError, OSError) as e:  # an unknown checksum algorithm, an unreadable file
            found = [f"{path}: {e}"]
        if self.distributed:
            everyone = [None] * self.world_size
            dist.all_gather_object(everyone, found)
            found = [p for part in everyone for p in part]
        return sorted(set(found))

    def nonfinite(self) -> str | None:
        """The first weight or optimizer tensor of this rank (after a load) holding NaN, inf or |x| > 1e10 —
        agreed over all ranks."""
        bad = None
        for name in SHARDED:
            if name not in self.states:
                continue
            for key, value in _tensors(self.states[name].state_dict()):
                t = local(value)
                if t.is_floating_point() and t.numel() and not bool((t.abs() <= ABSURD).all()):  # NaN fails too
                    bad = f"{name} {key}"
                    break
            if bad:
                break
        if self.distributed:
            everyone = [None] * self.world_size
            dist.all_gather_object(everyone, bad)
            bad = next((b for b in everyone if b), None)
        return bad

    def recover(self, run_dir: Path, cold: "ColdTier | None" = None, cold_available: bool = False,
                cold_url: str = "") -> tuple[int, str, Path] | None:
        """Load the newest intact checkpoint across the local tiers (micro, then macro, at equal steps), then the
        cold tier (`cold`: rank 0's; `cold_available` on every rank); damaged ones are skipped with a
        `checkpoint_skipped` event and set aside. Returns (step, tier, path) or None."""
        for step, tier, path in candidates(self.cfg, run_dir):
            if self._try(step, tier, path):
                return step, tier, path
        box = [(None, None)]
        if cold_available and self.rank == 0:
            try:
                box = [(cold.restore_newest(self.tiers["macro"]), None)]
            except Exception as e:  # noqa: BLE001 - a tampered object, a wrong key, storage errors: all ranks hear
                box = [(None, str(e) if isinstance(e, BessemerError) else _reason(e))]
        if self.distributed:
            dist.broadcast_object_list(box, src=0)
        restored, error = box[0]
        if error:
            self.event("checkpoint_skipped", 0, tier="cold", path=cold_url, reason=error, problems=1)
        if restored is not None:
            step, path = restored
            if self._try(step, "cold", Path(path)):
                return step, "cold", Path(path)
        return None

    def _try(self, step: int, tier: str, path: Path) -> bool:
        problems = self.problems(path)
        if not problems:
            self.load(path)
            bad = self.nonfinite()
            if not bad:
                self.last_micro_step = step
                return True
            problems = [f"non-finite or absurd values (|x| > {ABSURD:g}) in {bad}"]
        self.event("checkpoint_skipped", step, tier=tier, path=str(path), reason=problems[0], problems=len(problems))
        self._set_aside(path)
        return False

    def _set_aside(self, path: Path) -> None:
        """Rename a damaged checkpoint to step_N.damaged (kept for inspection): it is no longer a candidate and
        does not count against the tier's `keep`."""
        self._barrier()  # every rank is done reading it
        if self.rank == 0 and path.is_dir():
            aside = path.with_name(path.name + ".damaged")
            shutil.rmtree(aside, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.replace(path, aside)
        self._barrier()


def _reason(error: BaseException) -> str:
    """One line for an alert: DCP's exceptions carry each rank's whole traceback; its last line is the cause."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if len(lines) > 1 else f"{type(error).__name__}: {error}"


def _tensors(state, prefix: str = ""):
    """(dotted key, tensor) for every tensor in a nested state dict."""
    if isinstance(state, torch.Tensor):
        yield prefix, state
    elif isinstance(state, dict):
        for k, v in state.items():
            yield from _tensors(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(state, (list, tuple)):
        for i, v in enumerate(state):
            yield from _tensors(v, f"{prefix}.{i}")


def _collective_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
