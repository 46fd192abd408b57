"""Saving and restoring the registry of Stateful components, in tiers, with an atomic commit.

The trainer hands over a dict name -> object with state_dict()/load_state_dict(); nothing is saved ad hoc.
One checkpoint of a shared tier (macro; micro unless node-local), with any number of ranks:

    step_00000050/
      __0_0.distcp ...   model and optimizer through torch.distributed.checkpoint: each rank writes its
      .metadata          shards, keyed by parameter name, so another layout (or one process) can load them
      rank00000.pt ...   each rank's small state: loss scaler, loader position, RNG, counters, LR schedule
      manifest.json      size + checksum of every file, step, tier, layout, versions (macro: the config)

A node-local micro tier (`{node}` in its directory) holds each node's part in local.py's format instead, and
the commit record (paths.py) says which steps every node committed.

The commit protocol: every rank writes under `step_N.tmp/` (every file fsynced), checksumming each file while
writing it (writer.py); the ranks exchange those entries; the directory's owner (rank 0; a node's local rank 0
for its node-local part) writes the manifest last, renames to `step_N/`, fsyncs the tier directory and
replaces `latest`. A crash at any point leaves either the previous checkpoints alone or a complete new one;
`.tmp` directories are never loaded. No collective waits on one rank's file work: the entries are known when
the files are, the shared tiers' commit and pruning run on the owner's housekeeping thread (housekeeping.py),
an async save's agreement and commit on every rank's housekeeping thread over the async group, a cold restore
on rank 0's thread while the others poll.
"""

import contextlib
import hashlib
import io
import os
import queue
import shutil
import threading
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
from bessemer.checkpoint.housekeeping import Housekeeper, clear_leftovers, trash
from bessemer.checkpoint.local import STORAGE, load_sharded, read_rank, save_rank
from bessemer.checkpoint.manifest import check, fsync_dir, read_manifest, step_problem, write_manifest
from bessemer.checkpoint.paths import (LATEST, candidates, committed, node_local, read_commits, step_dir, step_of,
                                       tier_dirs, write_commits)
from bessemer.checkpoint.reading import Damaged, VerifyingReader, read_verified
from bessemer.checkpoint.writer import HashingWriter, async_save, make_stager, write_state
from bessemer.config import CheckpointConfig
from bessemer.errors import BessemerError
from bessemer.parallel.reduce import local

SHARDED = ("model", "optimizer")
ABSURD = 1e10  # |x| above this in weights or optimizer moments: a checkpoint not worth resuming from
POLL_S = 1.0  # while rank 0 restores from the cold tier, the others ask every POLL_S whether it is done

# DCP warns on every save and load in a single process that it assumes one process: it is right.
warnings.filterwarnings("ignore", message="torch.distributed is (disabled, )?unavailable or uninitialized")

Event = Callable[..., None]  # event(name, step, **fields)
Candidate = tuple[int, str, Path]  # (step, tier, path)

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


def rank_file(path: Path, rank: int) -> Path:
    return path / f"rank{rank:05d}.pt"


def config_hash(config_toml: str) -> str:
    return hashlib.sha256(config_toml.encode()).hexdigest()[:16]


def owned_dirs(cfg: CheckpointConfig, run_dir: Path, rank: int, local_rank: int, node: int) -> list[Path]:
    """The tier directories whose commits and housekeeping are this rank's: the shared ones on rank 0, a
    node-local micro directory on its node's local rank 0."""
    dirs = tier_dirs(cfg, run_dir, node)
    mine = [dirs["macro"]] + ([] if node_local(cfg) else [dirs["micro"]]) if rank == 0 else []
    return mine + ([dirs["micro"]] if node_local(cfg) and local_rank == 0 else [])


def clear_tier_leftovers(cfg: CheckpointConfig, run_dir: Path, rank: int = 0, local_rank: int = 0,
                         node: int = 0) -> None:
    """Call before the process group exists, on every rank (each node's ranks clear their own directories in
    parallel): what a killed attempt left behind is set aside, then deleted in the background."""
    clear_leftovers(owned_dirs(cfg, run_dir, rank, local_rank, node))


class Checkpointer:
    """Saves to the micro and macro tiers and recovers from the newest intact checkpoint among them.

    `meta` goes into every manifest (layout, config hash); `config` (the resolved TOML) into macro ones.
    `event(name, step, **fields)` reports committed saves, failed ones and checkpoints skipped during
    recovery. `midway(step)` runs halfway through a save (fault injection). `node` and `local_rank` place
    this rank for a node-local micro tier.
    """

    def __init__(self, cfg: CheckpointConfig, run_dir: Path, states: dict[str, Stateful], rank: int = 0,
                 world_size: int = 1, meta: dict | None = None, config: str = "", event: Event | None = None,
                 midway: Callable[[int], None] | None = None,
                 committed: Callable[[str, int, Path], None] | None = None, local_rank: int = 0, node: int = 0):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.node, self.local_rank = node, local_rank
        self.node_local = node_local(cfg)
        self.tiers = tier_dirs(cfg, run_dir, node)
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
        self._in_flight: threading.Event | None = None  # set once the async save in flight is committed
        self._news: queue.SimpleQueue = queue.SimpleQueue()  # commit outcomes, from the housekeeping thread
        self.last_save_s: float | None = None  # the training time the last save cost (the stall, when async)
        self.last_micro_step = 0
        self.micro_interval = cfg.micro.interval if cfg.micro.interval != "auto" else 1  # auto: measure first
        self.housekeeper = Housekeeper()
        # An async save runs DCP's collectives in a background thread: on the training loop's group they could
        # pair with the loop's own collectives in a different order on each rank, and NCCL groups cannot run
        # them at all. So async saves get a gloo group of their own (created on every rank, in order).
        self.async_group = dist.new_group(backend="gloo") if cfg.async_save and self.distributed else None
        self.stager = make_stager(torch.cuda.is_available()) if cfg.async_save else None  # buffers kept for the run
        if not self.distributed:  # distributed, the trainer does this before the process group exists
            clear_tier_leftovers(cfg, run_dir, rank, local_rank, node)

    def _owner(self, tier: str) -> bool:
        """Whether this rank commits to (and prunes) `tier`'s directory."""
        return self.local_rank == 0 if tier == "micro" and self.node_local else self.rank == 0

    def _local(self, tier: str) -> bool:
        return tier == "micro" and self.node_local

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

    # ------------------------------------------------------------------------------------------- agreement

    def _any(self, flag: bool) -> bool:
        """Whether any rank raised `flag` (on CPU: gloo carries it, also next to NCCL)."""
        if not self.distributed:
            return flag
        t = torch.tensor([int(flag)])
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def _everyone(self, obj, group=None) -> list:
        """Every rank's `obj`, in rank order, on every rank."""
        if not self.distributed:
            return [obj]
        out = [None] * self.world_size
        dist.all_gather_object(out, obj, group=group)
        return out

    def _from_rank0(self, obj):
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    # ------------------------------------------------------------------------------------------- save

    def save(self, step: int, tier: str) -> Path | None:
        """Save every component as checkpoint `step` of `tier`; returns its path, or None when the save failed
        and checkpoint.on_error is "continue" (the partial save removed, an alert raised). Across ranks the
        answer is agreed: a failed write on any rank fails the save on all. The commit (manifest, rename, prune)
        runs on the owner's housekeeping thread; a commit that fails there is reported by `report` (the
        checkpoint is then not loadable, never half-loaded)."""
        t0 = time.perf_counter()
        self._settle()
        self.report(step)
        final = step_dir(self.tiers[tier], step)
        tmp = final.with_name(final.name + ".tmp")
        error, future, writer, files = None, None, None, {}
        try:
            # Every rank: nobody waits for another to create it (a leftover was cleared at start-up).
            tmp.mkdir(parents=True, exist_ok=True)
            small = {k: v.state_dict() for k, v in self.states.items() if k not in SHARDED}
            sharded = {k: self.states[k] for k in SHARDED if k in self.states}
            if self._local(tier):
                self.midway(step)
                name = rank_file(tmp, self.rank).name
                files = {name: save_rank(tmp / name, sharded, small, self.cfg.checksum)}
            else:
                import torch.distributed.checkpoint as dcp

                writer = HashingWriter(tmp, self.cfg.checksum)
                if self.cfg.async_save:
                    future = async_save(sharded, writer, self.async_group, self.stager)
                else:
                    dcp.save(sharded, storage_writer=writer)
                self.midway(step)
                own = rank_file(tmp, self.rank)
                files = {own.name: write_state(own, small, self.cfg.checksum)}
        except (Exception, CheckpointException) as e:  # DCP raises on every rank when any rank's write fails
            error = e
        if self._local(tier):  # one exchange: every rank's outcome and files, for its node's owner
            parts = self._everyone((self.node, self.rank, files, _text(error), str(tmp.parent)))
            if any(p[3] for p in parts):
                return self._failed(step, tier, tmp, error or next(p[3] for p in parts if p[3]))
            return self._commit_local(tmp, final, step, parts, t0)
        if future is not None:
            if self._any(error is not None):
                with contextlib.suppress(Exception, CheckpointException):  # let the write end before removal
                    future.result()
                return self._failed(step, tier, tmp, error)
            self.last_micro_step = step  # a macro save also resets the micro count
            self.last_save_s = time.perf_counter() - t0  # the stall: what training waited for
            done = self._in_flight = threading.Event()
            self.housekeeper.submit(f"committing step {step}", lambda: self._finish_async(
                future, writer, files, (tmp, final, tier, step, t0), done))
            return final
        parts = self._everyone((files | (writer.files if writer else {}), _text(error)))  # no I/O waited for
        failed = next((e for _, e in parts if e), None)
        if failed:
            return self._failed(step, tier, tmp, error or failed)
        self.last_micro_step = step
        self.last_save_s = time.perf_counter() - t0
        if self.rank == 0:
            self.housekeeper.submit(f"committing step {step}", lambda: self._commit(
                tmp, final, tier, step, {k: v for f, _ in parts for k, v in f.items()}, t0))
        return final

    def finish(self) -> None:
        """Wait for the save in flight (if any) and its commit, then for this rank's housekeeping (the end of a
        run: pruning done, the last checkpoint handed to the cold tier); report what they did."""
        self._settle()
        self.housekeeper.wait()
        self.report(self.last_micro_step)

    def _settle(self) -> None:
        """Wait until the async save in flight is written, agreed and committed: at most one save in flight,
        and its collectives on the async group never overlap the next save's."""
        if self._in_flight is not None:
            self._in_flight.wait()
            self._in_flight = None

    def _finish_async(self, future, writer: HashingWriter, files: dict, where: tuple, done: threading.Event) -> None:
        """On every rank's housekeeping thread, once the background write ends: the ranks agree on its outcome
        over the async group (no I/O waited for: each rank already knows its files' entries) and rank 0 commits."""
        tmp, final, tier, step, t0 = where
        try:
            error = None
            try:
                future.result()
                files = files | writer.files
            except (Exception, CheckpointException) as e:
                error = _text(e)
            parts = self._everyone((files, error), group=self.async_group)
            failed = next((e for _, e in parts if e), None)
            if failed:
                self._discard(tier, tmp)
                self._news.put(("failed", step, tier, failed))
            elif self.rank == 0:
                self._commit(tmp, final, tier, step, {k: v for f, _ in parts for k, v in f.items()}, t0)
        finally:
            done.set()

    def report(self, step: int) -> None:
        """On the training thread: events for the commits finished in the background since the last call, and
        alerts for housekeeping that failed. A failed save with checkpoint.on_error = "stop" raises here."""
        while True:
            try:
                news = self._news.get_nowait()
            except queue.Empty:
                break
            if news[0] == "failed":
                self._alert_failed(*news[1:])
            else:
                self.event("checkpoint_saved", news[1], **news[2])
        for message in self.housekeeper.take_errors():
            self.event("alert", step, kind="checkpoint_housekeeping", message=message)

    def _failed(self, step: int, tier: str, tmp: Path, error: BaseException | str | None) -> None:
        """Every rank agreed that the save failed: its partial save goes, an alert is raised."""
        self._discard(tier, tmp)
        reason = (_reason(error) if isinstance(error, BaseException) else error) or "failed on another rank"
        self._alert_failed(step, tier, reason)

    def _discard(self, tier: str, tmp: Path) -> None:
        """The owner renames a partial save aside at once (so no `.tmp` is left where the next save goes) and
        deletes it in the background."""
        if self._owner(tier):
            try:
                self.housekeeper.delete(trash(tmp))
            except OSError:  # never created, or a full disk refusing even the rename: delete it where it is
                self.housekeeper.delete(tmp)

    def _alert_failed(self, step: int, tier: str, reason: str) -> None:
        self.event("alert", step, kind="checkpoint_failed", tier=tier,
                   message=f"{tier} checkpoint at step {step} failed and was removed ({reason}); the previous "
                           f"checkpoints are intact")
        if self.cfg.on_error == "stop":
            raise BessemerError(f"checkpoint at step {step} failed: {reason} (checkpoint.on_error = \"stop\")")

    def _saved(self, tier: str, step: int, final: Path, t0: float) -> dict:
        """The fields of a checkpoint_saved event: `seconds` until committed; for an async save also the stall."""
        fields = {"tier": tier, "path": str(final), "seconds": round(time.perf_counter() - t0, 3)}
        if self.cfg.async_save and not self._local(tier):
            fields |= {"stall_seconds": round(self.last_save_s, 3), "background": True}
        return fields

    def _commit(self, tmp: Path, final: Path, tier: str, step: int, files: dict, t0: float) -> None:
        """Rank 0, on its housekeeping thread: the manifest of every rank's files (their entries computed while
        they were written), then the rename; news of the outcome for `report`."""
        try:  # everything up to the rename: a failure here leaves only a .tmp behind
            meta = {**self.meta, "tier": tier, "versions": dict(self.meta["versions"])}
            if tier == "macro" and self.config:
                meta["config"] = self.config
            write_manifest(tmp, step, self.cfg.checksum, meta, files=files)
            self._publish(tmp, final)
        except OSError as e:
            self._discard(tier, tmp)
            self._news.put(("failed", step, tier, _text(e)))
            return
        self._after_commit(tier, step, final)
        self._news.put(("saved", step, self._saved(tier, step, final, t0)))

    def _publish(self, tmp: Path, final: Path) -> None:
        """Rename the finished `tmp` into place (an older checkpoint of the same step is set aside) and point
        `latest` at it, each step fsynced."""
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

    def _commit_local(self, tmp: Path, final: Path, step: int, parts: list, t0: float) -> Path | None:
        """A node-local part: each node's local rank 0 writes its manifest and renames (every node at once),
        the ranks agree that every node committed, and rank 0 adds the step to the commit record."""
        mine = [p for p in parts if p[0] == self.node]
        error = None
        if self.local_rank == 0:
            try:
                meta = {**self.meta, "tier": "micro", "storage": STORAGE, "node": self.node,
                        "ranks": sorted(p[1] for p in mine), "versions": dict(self.meta["versions"])}
                write_manifest(tmp, step, self.cfg.checksum, meta, files={k: v for p in mine for k, v in p[2].items()})
                self._publish(tmp, final)
            except OSError as e:
                error = f"node {self.node}: {_text(e)}"
        errors = [e for e in self._everyone(error) if e]
        if errors:
            return self._failed(step, "micro", tmp, errors[0])
        self.last_micro_step = step
        if self.rank == 0:
            entry = {"step": step, "world_size": self.world_size, "layout": self.meta.get("layout", ""),
                     "nodes": {}, "dirs": {}}
            for node, rank, _, _, directory in parts:
                entry["nodes"].setdefault(str(node), []).append(rank)
                entry["dirs"][str(node)] = directory
            try:
                keep = self.cfg.micro.keep
                entries = [e for e in read_commits(self.cfg, self.run_dir) if e["step"] < step] + [entry]
                write_commits(self.cfg, self.run_dir, entries[-keep:] if keep > 0 else entries)
            except OSError as e:
                self.event("alert", step, kind="checkpoint_failed", tier="micro",
                           message=f"micro checkpoint at step {step} is on every node, but the commit record could "
                                   f"not be written ({_text(e)}): it will not be offered for recovery")
                return final
        self._after_commit("micro", step, final)
        self.event("checkpoint_saved", step, **self._saved("micro", step, final, t0))
        return final

    def _after_commit(self, tier: str, step: int, final: Path) -> None:
        """The owner's housekeeping, in the background: hand the checkpoint to the cold tier, prune."""
        if self._owner(tier):
            if self.rank == 0:
                self.housekeeper.submit(f"backing up step {step}", lambda: self.committed(tier, step, final))
            self.housekeeper.submit(f"pruning the {tier} tier", lambda: self._prune(tier, keep_step=step))

    def _prune(self, tier: str, keep_step: int) -> None:
        """Remove saves that died before `keep_step`'s and all but the newest `keep` committed checkpoints —
        never `keep_step`, the one just committed (damaged checkpoints were renamed aside by recovery, so they
        do not count). Runs on the housekeeping thread: a newer save in progress is never touched."""
        keep = getattr(self.cfg, tier).keep
        directory = self.tiers[tier]
        for old in directory.glob("step_*.tmp"):
            if (step := _tmp_step(old)) is not None and step < keep_step:
                shutil.rmtree(old, ignore_errors=True)
        if keep > 0:
            done = [p for s, p in committed(directory) if s <= keep_step]
            for old in done[:-keep]:
                shutil.rmtree(old, ignore_errors=True)

    # ------------------------------------------------------------------------------------------- load

    def listing(self) -> list[Candidate]:
        """The checkpoints recovery may try, newest first, as rank 0 lists them (two ranks reading a shared
        filesystem may see different listings; they must try the same checkpoints). Node-local micro ones come
        from the commit record; each rank maps them to its own node's directory."""
        found = self._from_rank0(candidates(self.cfg, self.run_dir) if self.rank == 0 else None)
        return [(s, t, step_dir(self.tiers["micro"], s) if self._local(t) else Path(p)) for s, t, p in found]

    def load(self, path: Path) -> None:
        """Restore every component from the checkpoint at `path` (any layout's; node-local: its own), reading
        each file once and checking it against the manifest as it is read."""
        problems = self._load(path, self._local("micro") and path.parent == self.tiers["micro"])
        if problems:
            raise BessemerError(f"checkpoint {path} is damaged: {problems[0]}")

    def _load(self, path: Path, local: bool) -> list[str]:
        """Load the checkpoint at `path`, verifying while reading; returns the problems found by any rank
        (then what was loaded must not be used). Incompatible checkpoints raise BessemerError on every rank."""
        return self._load_local(path) if local else self._load_dcp(path)

    def _load_dcp(self, path: Path) -> list[str]:
        import torch.distributed.checkpoint as dcp

        head = None
        if self.rank == 0:
            try:
                manifest = read_manifest(path)
                head = (manifest["files"], manifest.get("checksum"), step_problem(path, manifest), None)
            except (ValueError, OSError) as e:
                head = (None, None, None, str(e))
        files, algo, step_wrong, error = self._from_rank0(head)
        if error or step_wrong:
            return [error or step_wrong]
        reader = VerifyingReader(path, files, algo)
        state, error = None, None
        try:
            dcp.load({k: self.states[k] for k in SHARDED if k in self.states}, storage_reader=reader)
            # A rank that did not exist when the checkpoint was written (another layout) takes rank 0's small
            # state: the loader position and counters are layout-independent at step boundaries.
            own = rank_file(path, self.rank).name
            rel = own if own in files else rank_file(path, 0).name
            state = _read_state(reader.verified(rel), path / rel)
        except Damaged:
            pass  # in reader.problems
        except (Exception, CheckpointException) as e:  # noqa: BLE001 - another rank's Damaged, or incompatible
            error = _text(e)
        everyone = self._everyone((sorted(reader.read), reader.problems, error))
        unread = sorted(set(files) - {rel for read, _, _ in everyone for rel in read})
        found = [p for _, problems, _ in everyone for p in problems]
        if unread:  # files no rank needed are still checked, split over the ranks
            mine = check(path, files=unread[self.rank::self.world_size])
            found += [p for part in self._everyone(mine) for p in part]
        if found:
            return sorted(set(found))
        error = next((e for _, _, e in everyone if e), None)
        if error:
            raise BessemerError(f"cannot restore model and optimizer from {path} — was it written for another "
                                f"model or config? {error}")
        self._load_small(state, path / rel)
        return []

    def _load_local(self, path: Path) -> list[str]:
        """A node-local checkpoint: each rank reads only its own file, from its own node's directory."""
        reason, manifest = None, None
        try:
            manifest = read_manifest(path)
            reason = step_problem(path, manifest) or _mismatch(manifest, self.meta, self.rank)
        except (ValueError, OSError) as e:
            reason = f"node {self.node} lacks its part: {e}"
        reasons = [r for r in self._everyone(reason) if r]
        if reasons:  # not on every node, or not this layout's: nothing read
            raise _NotHere(reasons[0])
        payload, problem = None, None
        try:
            rel = rank_file(path, self.rank).name
            payload = read_rank(read_verified(path, rel, manifest["files"], manifest["checksum"]), path / rel)
        except Damaged as e:
            problem = str(e)
        found = [p for p in self._everyone(problem) if p]
        if found:
            return found
        sharded = {k: self.states[k] for k in SHARDED if k in self.states}
        load_sharded(payload, sharded, path)
        self._load_small(payload["small"], path / rel)
        return []

    def _load_small(self, state: dict, where: Path) -> None:
        names = [k for k in self.states if k not in SHARDED]
        missing = [name for name in names if name not in state]
        if missing:
            raise BessemerError(f"checkpoint {where} lacks {', '.join(missing)}: refusing a partial restore")
        for name in names:
            with _restoring(where, name):
                self.states[name].load_state_dict(state[name])

    def problems(self, path: Path) -> list[str]:
        """What is wrong with the files of checkpoint `path` (manifest, sizes, checksums), without loading it,
        the reading split over the ranks; every rank gets the same list."""
        head = None
        if self.rank == 0:
            try:
                head = (sorted(read_manifest(path)["files"]), None)
            except (ValueError, OSError) as e:
                head = (None, str(e))
        names, error = self._from_rank0(head)
        if error:
            return [error]
        try:
            found = check(path, files=names[self.rank::self.world_size])
        except (ValueError, OSError) as e:  # an unknown checksum algorithm, an unreadable file
            found = [f"{path}: {e}"]
        return sorted({p for part in self._everyone(found) for p in part})

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
        return next((b for b in self._everyone(bad) if b), None)

    def recover(self, run_dir: Path | None = None, cold: "ColdTier | None" = None, cold_available: bool = False,
                cold_url: str = "", listed: list[Candidate] | None = None) -> Candidate | None:
        """Load the newest intact checkpoint among `listed` (default: `listing()`; micro before macro at equal
        steps), then the cold tier (`cold`: rank 0's; `cold_available` on every rank); damaged ones are skipped
        with a `checkpoint_skipped` event and set aside. Returns (step, tier, path) or None."""
        for step, tier, path in self.listing() if listed is None else listed:
            if self._try(step, tier, path):
                return step, tier, path
        if not cold_available:
            return None
        restored, error = self._on_rank0(lambda: cold.restore_newest(self.tiers["macro"]))
        if error:
            self.event("checkpoint_skipped", 0, tier="cold", path=cold_url, reason=error, problems=1)
        if restored is not None:
            step, path = restored
            if self._try(step, "cold", Path(path)):
                return step, "cold", Path(path)
        return None

    def _on_rank0(self, work: Callable[[], object]) -> tuple[object, str | None]:
        """Run `work` on rank 0's own thread; the other ranks ask every POLL_S whether it is done, so none of
        them sits in one collective for as long as the work takes (a cold restore can take an hour). Returns
        (result, error message) on every rank."""
        box, done = [None, None], threading.Event()

        def run() -> None:
            try:
                box[0] = work()
            except Exception as e:  # noqa: BLE001 - a tampered object, a wrong key, storage errors: all ranks hear
                box[1] = str(e) if isinstance(e, BessemerError) else _reason(e)
            finally:
                done.set()

        if self.rank == 0:
            threading.Thread(target=run, name="cold-restore", daemon=True).start()
        if self.distributed:
            flag = torch.zeros(1)
            while not flag.item():
                if self.rank == 0:
                    flag[0] = float(done.wait(POLL_S))
                dist.broadcast(flag, src=0)
        else:
            done.wait()
        result, error = self._from_rank0((box[0], box[1]) if self.rank == 0 else None)
        return result, error

    def _try(self, step: int, tier: str, path: Path) -> bool:
        local = self._local(tier)
        try:
            problems = self._load(path, local)
        except _NotHere as e:  # a node-local step some node lacks: skipped, nothing damaged
            self.event("checkpoint_skipped", step, tier=tier, path=str(path), reason=str(e), problems=1)
            return False
        if not problems:
            bad = self.nonfinite()
            if not bad:
                self.last_micro_step = step
                return True
            problems = [f"non-finite or absurd values (|x| > {ABSURD:g}) in {bad}"]
        self.event("checkpoint_skipped", step, tier=tier, path=str(path), reason=problems[0], problems=len(problems))
        self._set_aside(path, tier)
        return False

    def _set_aside(self, path: Path, tier: str) -> None:
        """Rename a damaged checkpoint to step_N.damaged (kept for inspection): it is no longer a candidate and
        does not count against the tier's `keep`. Every rank has finished reading it (the ranks agreed on its
        problems); the directory's owner renames it, and no rank waits for that."""
        if self._local(tier) and self.rank == 0:  # no longer complete on every node: out of the record
            step = step_of(path)
            self.housekeeper.submit("updating the commit record", lambda: write_commits(
                self.cfg, self.run_dir, [e for e in read_commits(self.cfg, self.run_dir) if e["step"] != step]))
        if not self._owner(tier if tier != "cold" else "macro") or not path.is_dir():
            return
        aside = path.with_name(path.name + ".damaged")
        with contextlib.suppress(OSError):
            if aside.exists():
                self.housekeeper.delete(trash(aside))
            os.replace(path, aside)


class _NotHere(Exception):
    """A node-local checkpoint that cannot be loaded here: a node lacks its part, or another layout saved it."""


def _mismatch(manifest: dict, meta: dict, rank: int) -> str | None:
    """Why this rank cannot load the node-local part `manifest` describes, or None."""
    where = f"node {manifest.get('node')}"
    if manifest.get("storage") != STORAGE:
        return f"{where}: not a node-local checkpoint"
    if manifest.get("world_size") != meta["world_size"] or manifest.get("layout") != meta.get("layout"):
        return (f"saved by {manifest.get('world_size')} ranks as {manifest.get('layout')!r}, this run is "
                f"{meta['world_size']} as {meta.get('layout')!r}: a node-local checkpoint loads only into its layout")
    if rank not in manifest.get("ranks", []):
        return (f"{where}'s part holds ranks {manifest.get('ranks')}, not rank {rank} (node ranks changed since the "
                f"save)")
    return None


def _tmp_step(path: Path) -> int | None:
    try:
        return int(path.name.removeprefix("step_").removesuffix(".tmp"))
    except ValueError:
        return None


def _text(error: BaseException | None) -> str | None:
    return None if error is None else _reason(error)


def _read_state(data: bytes, path: Path) -> dict:
    try:
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as e:  # verified bytes that still do not unpickle: say which file, not a pickle traceback
        raise BessemerError(f"cannot read checkpoint {path}: {e}") from None


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
