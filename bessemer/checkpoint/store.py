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

The save: every rank writes under `step_N.tmp/`, checksumming each file while writing it and fsyncing it once
(writer.py; an async save copies to host memory first, staging.py); the ranks exchange those entries; the
directory's owner (rank 0; a node's local rank 0 for its node-local part) commits (commit.py: manifest last,
rename, fsyncs, `latest`). A crash at any point leaves either the previous checkpoints alone or a complete new
one; `.tmp` directories are never loaded. No collective waits on one rank's file work: the entries are known
when the files are, the shared tiers' commit and pruning run on the owner's housekeeping thread, an async save's
agreement and commit on every rank's housekeeping thread over the async group. A save first waits until the
save before it is committed (or failed): nothing of a new save is written while an older one is uncommitted (on
other ranks too: their writes start after DCP's planning exchange, which rank 0 joins only once its own wait is
over; an async save's every rank waits for its own background end).

The load (loading.py) verifies every file on the bytes read to load it; recovery tries the newest checkpoint
first and sets damaged ones aside (retention.py).
"""

import hashlib
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch.distributed.checkpoint.api import CheckpointException

from bessemer import __version__
from bessemer.checkpoint.commit import CheckpointHooks, Commits, saved_fields
from bessemer.checkpoint.components import (ABSURD, SHARDED, ModelParts, Stateful, rank_file, reason, sharded,
                                            small_names, text)
from bessemer.checkpoint.housekeeping import clear_leftovers
from bessemer.checkpoint.loading import NotHere, load_dcp, load_local, nonfinite, problems
from bessemer.checkpoint.local import STORAGE, save_rank
from bessemer.checkpoint.paths import (candidates, node_local, read_commits, step_dir, step_of, tier_dirs,
                                       write_commits)
from bessemer.checkpoint.ranks import POLL_S, Ranks
from bessemer.checkpoint.retention import set_aside
from bessemer.checkpoint.staging import StagingWait, async_save, make_stager
from bessemer.checkpoint.writer import HashingWriter, serialize_state, write_bytes, write_state
from bessemer.config import CheckpointConfig
from bessemer.errors import BessemerError
from bessemer.parallel.dims import Launch, new_group

__all__ = ["ABSURD", "POLL_S", "SHARDED", "Candidate", "CheckpointHooks", "Checkpointer", "ModelParts", "Stateful",
           "clear_tier_leftovers", "config_hash", "owned_dirs", "rank_file"]

# DCP warns on every save and load in a single process that it assumes one process: it is right.
warnings.filterwarnings("ignore", message="torch.distributed is (disabled, )?unavailable or uninitialized")

Candidate = tuple[int, str, Path]  # (step, tier, path)

if TYPE_CHECKING:
    from bessemer.checkpoint.cold_tier import ColdTier


def config_hash(config_toml: str) -> str:
    return hashlib.sha256(config_toml.encode()).hexdigest()[:16]


def owned_dirs(cfg: CheckpointConfig, run_dir: Path, launch: Launch) -> list[Path]:
    """The tier directories whose commits and housekeeping are this rank's: the shared ones on rank 0, a
    node-local micro directory on its node's local rank 0."""
    dirs = tier_dirs(cfg, run_dir, launch.node)
    mine = [dirs["macro"]] + ([] if node_local(cfg) else [dirs["micro"]]) if launch.rank == 0 else []
    return mine + ([dirs["micro"]] if node_local(cfg) and launch.local_rank == 0 else [])


def clear_tier_leftovers(cfg: CheckpointConfig, run_dir: Path, launch: Launch) -> None:
    """Call before the process group exists, on every rank (each node's ranks clear their own directories in
    parallel): what a killed attempt left behind is set aside, then deleted in the background."""
    clear_leftovers(owned_dirs(cfg, run_dir, launch))


class Checkpointer:
    """Saves to the micro and macro tiers and recovers from the newest intact checkpoint among them.

    `launch` places this rank (default: a single process; its node and local rank matter for a node-local micro
    tier). `meta` goes into every manifest (layout, model); `config` (the resolved TOML) into macro ones, and its
    hash into every one. `hooks` are what the checkpointer reports to (events, fault injection, the cold tier's
    hand-off).
    """

    def __init__(self, cfg: CheckpointConfig, run_dir: Path, states: dict[str, Stateful],
                 launch: Launch | None = None, meta: dict | None = None, config: str = "",
                 hooks: CheckpointHooks | None = None):
        launch, hooks = launch or Launch(), hooks or CheckpointHooks()
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.rank, self.world_size, self.local_rank, self.node = (launch.rank, launch.world_size,
                                                                   launch.local_rank, launch.node)
        self.node_local = node_local(cfg)
        self.tiers = tier_dirs(cfg, run_dir, self.node)
        self.states = states
        self.ranks = Ranks(self.rank, self.world_size)
        self.meta = {**(meta or {}), "world_size": self.world_size, "components": sorted(states),
                     "versions": {"bessemer": __version__, "torch": torch.__version__}}
        if config:
            self.meta["config_hash"] = config_hash(config)
        self.commits = Commits(cfg, self.tiers, self._owner, self.rank, self.meta, config, hooks)
        self.event = self.commits.event
        self.midway = hooks.midway or (lambda step: None)
        self.housekeeper = self.commits.housekeeper
        self._save_s: float | None = None  # how long the last save() took
        self.last_micro_step = 0
        self.micro_interval = cfg.micro.interval if cfg.micro.interval != "auto" else 1  # auto: measure first
        # An async save runs DCP's collectives in a background thread: on the training loop's group they could
        # pair with the loop's own collectives in a different order on each rank, and NCCL groups cannot run
        # them at all. So async saves get a gloo group of their own (created on every rank, in order).
        self.async_group = (new_group(backend="gloo", desc="checkpoint_async")
                            if cfg.async_save and self.ranks.distributed else None)
        self.stager = make_stager(torch.cuda.is_available()) if cfg.async_save else None  # buffers kept for the run
        self.staging = StagingWait()
        if not self.ranks.distributed:  # distributed, the trainer does this before the process group exists
            clear_tier_leftovers(cfg, run_dir, launch)

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

    # ------------------------------------------------------------------------------------------- save

    def save(self, step: int, tier: str) -> Path | None:
        """Save every component as checkpoint `step` of `tier`; returns its path, or None when the save failed
        and checkpoint.on_error is "continue" (the partial save removed, an alert raised). Across ranks the
        answer is agreed: a failed write on any rank fails the save on all. The commit (manifest, rename, prune)
        runs on the owner's housekeeping thread; a commit that fails there is reported by `report` (the
        checkpoint is then not loadable, never half-loaded)."""
        t0 = time.perf_counter()
        self._settle()  # the previous save is committed or failed before this one writes anything
        self.report(step)
        final = step_dir(self.tiers[tier], step)
        tmp = final.with_name(final.name + ".tmp")
        if self._local(tier):
            return self._save_local(step, tmp, final, t0)
        if self.cfg.async_save:
            return self._save_async(step, tier, tmp, final, t0)
        return self._save_sync(step, tier, tmp, final, t0)

    def _save_sync(self, step: int, tier: str, tmp: Path, final: Path, t0: float) -> Path | None:
        import torch.distributed.checkpoint as dcp

        error, files = None, {}
        try:
            tmp.mkdir(parents=True, exist_ok=True)  # every rank: nobody waits for another to create it
            small = self._small_state()
            writer = HashingWriter(tmp, self.cfg.checksum)
            dcp.save(sharded(self.states), storage_writer=writer)
            self.midway(step)
            own = rank_file(tmp, self.rank)
            files = writer.files | {own.name: write_state(own, small, self.cfg.checksum)}
        except (Exception, CheckpointException) as e:  # DCP raises on every rank when any rank's write fails
            error = e
        parts = self.ranks.everyone((files, text(error)))  # no I/O waited for: the entries are known
        failed = next((e for _, e in parts if e), None)
        if failed:
            return self._failed(step, tier, tmp, error or failed)
        self.last_micro_step = step  # a macro save also resets the micro count
        self._save_s = time.perf_counter() - t0
        if self.rank == 0:
            everything = {k: v for f, _ in parts for k, v in f.items()}
            self.commits.run(f"committing step {step}", lambda: self.commits.commit(
                tmp, final, tier, step, everything, lambda: saved_fields(tier, final, t0)))
        return final

    def _save_async(self, step: int, tier: str, tmp: Path, final: Path, t0: float) -> Path | None:
        """Training waits for the state dicts and the start of the copy to host memory; the next optimizer step
        waits for the copy's end (StagingWait). The write, this rank's small-state file, the agreement and the
        commit follow in the background."""
        error, writer, staged, upload = None, None, None, None
        try:
            tmp.mkdir(parents=True, exist_ok=True)
            small = serialize_state(self._small_state())  # the small state as it is now, written later
            writer = HashingWriter(tmp, self.cfg.checksum)
            staged, upload = async_save(sharded(self.states), writer, self.async_group, self.stager)
            self.midway(step)
        except (Exception, CheckpointException) as e:
            error = e
        finally:
            if self.stager is not None:
                self.stager.begin()  # the copy starts now that this thread is done with it
        if self.ranks.any(error is not None):
            if upload is not None:
                upload.exception()  # let the write end before the directory goes
            return self._failed(step, tier, tmp, error)
        self.staging.watch(staged, t0)
        self.last_micro_step = step
        self._save_s = time.perf_counter() - t0

        def finish() -> None:  # every rank's housekeeping thread, once the write has ended
            files, error = {}, None
            try:
                upload.result()
                own = rank_file(tmp, self.rank)
                files = writer.files | {own.name: write_bytes(own, small, self.cfg.checksum)}
            except (Exception, CheckpointException) as e:
                error = text(e)
            parts = self.ranks.everyone((files, error), group=self.async_group)
            failed = next((e for _, e in parts if e), None)
            if failed:
                self.commits.discard(tier, tmp)
                self.commits.failed_later(step, tier, failed)
            elif self.rank == 0:
                self.commits.commit(tmp, final, tier, step, {k: v for f, _ in parts for k, v in f.items()},
                                    lambda: saved_fields(tier, final, t0, self.last_save_s))

        self.commits.run(f"committing step {step}", finish)
        return final

    def _save_local(self, step: int, tmp: Path, final: Path, t0: float) -> Path | None:
        """A node-local part: every rank writes its own file; each node's local rank 0 writes its manifest and
        renames (every node at once); the ranks agree that every node committed, and rank 0 adds the step to the
        commit record."""
        error, files = None, {}
        try:
            tmp.mkdir(parents=True, exist_ok=True)
            self.midway(step)
            name = rank_file(tmp, self.rank).name
            files = {name: save_rank(tmp / name, sharded(self.states), self._small_state(), self.cfg.checksum)}
        except Exception as e:  # noqa: BLE001 - a full disk, an I/O error: the save fails on every rank
            error = e
        parts = self.ranks.everyone((self.node, self.rank, files, text(error), str(tmp.parent)))
        if any(p[3] for p in parts):
            return self._failed(step, "micro", tmp, error or next(p[3] for p in parts if p[3]))
        mine = [p for p in parts if p[0] == self.node]
        error = None
        if self.local_rank == 0:
            try:
                meta = {**self.meta, "tier": "micro", "storage": STORAGE, "node": self.node,
                        "ranks": sorted(p[1] for p in mine), "versions": dict(self.meta["versions"])}
                self.commits.write(tmp, final, step, meta, {k: v for p in mine for k, v in p[2].items()})
            except OSError as e:
                error = f"node {self.node}: {text(e)}"
        errors = [e for e in self.ranks.everyone(error) if e]
        if errors:
            return self._failed(step, "micro", tmp, errors[0])
        self.last_micro_step = step
        self._save_s = time.perf_counter() - t0
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
                                   f"not be written ({text(e)}): it will not be offered for recovery")
                return final
        self.commits.after("micro", step, final)
        self.event("checkpoint_saved", step, **saved_fields("micro", final, t0))
        return final

    def _small_state(self) -> dict:
        return {k: self.states[k].state_dict() for k in small_names(self.states)}

    def _failed(self, step: int, tier: str, tmp: Path, error: BaseException | str | None) -> None:
        """Every rank agreed that the save failed: its partial save goes, an alert is raised."""
        self.commits.discard(tier, tmp)
        why = (reason(error) if isinstance(error, BaseException) else error) or "failed on another rank"
        self.commits.alert_failed(step, tier, why)

    @property
    def last_save_s(self) -> float | None:
        """The training time the last save cost: its save() call and, when async, the time optimizer steps
        waited for its staging copy (the stall)."""
        return None if self._save_s is None else self._save_s + self.staging.waited_s

    def _settle(self) -> None:
        """Until the staging copy, the write and the commit of the save before are done: at most one save in
        flight, and its collectives on the async group never overlap the next save's."""
        self.staging.release()
        self.commits.wait()

    def report(self, step: int) -> None:
        """On the training thread: events for the commits finished in the background since the last call, and
        alerts for housekeeping that failed. A failed save with checkpoint.on_error = "stop" raises here."""
        self.commits.report(step)

    def finish(self) -> None:
        """Wait for the save in flight (if any) and its commit, then for this rank's housekeeping (the end of a
        run: pruning done, the last checkpoint handed to the cold tier); report what they did."""
        self._settle()
        self.housekeeper.wait()
        self.report(self.last_micro_step)

    # ------------------------------------------------------------------------------------------- load

    def listing(self) -> list[Candidate]:
        """The checkpoints recovery may try, newest first, as rank 0 lists them (two ranks reading a shared
        filesystem may see different listings; they must try the same checkpoints). Node-local micro ones come
        from the commit record; each rank maps them to its own node's directory."""
        found = self.ranks.from_rank0(candidates(self.cfg, self.run_dir) if self.rank == 0 else None)
        return [(s, t, step_dir(self.tiers["micro"], s) if self._local(t) else Path(p)) for s, t, p in found]

    def load(self, path: Path) -> None:
        """Restore every component from the checkpoint at `path` (any layout's; node-local: its own), reading
        each file once and checking it against the manifest as it is read."""
        found = self._load(path, self._local("micro") and path.parent == self.tiers["micro"])
        if found:
            raise BessemerError(f"checkpoint {path} is damaged: {found[0]}")

    def _load(self, path: Path, local: bool) -> list[str]:
        """Load the checkpoint at `path`, verifying while reading; returns the problems found by any rank
        (then what was loaded must not be used). Incompatible checkpoints raise BessemerError on every rank."""
        self._settle()  # a save in flight reads the tensors a load would overwrite
        if local:
            return load_local(path, self.states, self.ranks, self.meta, self.node)
        return load_dcp(path, self.states, self.ranks)

    def problems(self, path: Path) -> list[str]:
        """What is wrong with the files of checkpoint `path` (manifest, sizes, checksums), without loading it,
        the reading split over the ranks; every rank gets the same list."""
        return problems(path, self.ranks)

    def nonfinite(self) -> str | None:
        """The first weight or optimizer tensor of this rank (after a load) holding NaN, inf or |x| > 1e10 —
        agreed over all ranks."""
        return nonfinite(self.states, self.ranks)

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
        restored, error = self.ranks.on_rank0(lambda: cold.restore_newest(self.tiers["macro"]))
        if error:
            self.event("checkpoint_skipped", 0, tier="cold", path=cold_url, reason=error, problems=1)
        if restored is not None:
            step, path = restored
            if self._try(step, "cold", Path(path)):
                return step, "cold", Path(path)
        return None

    def _try(self, step: int, tier: str, path: Path) -> bool:
        try:
            found = self._load(path, self._local(tier))
        except NotHere as e:  # a node-local step some node lacks: skipped, nothing damaged
            self.event("checkpoint_skipped", step, tier=tier, path=str(path), reason=str(e), problems=1)
            return False
        if not found:
            bad = self.nonfinite()
            if not bad:
                self.last_micro_step = step
                return True
            found = [f"non-finite or absurd values (|x| > {ABSURD:g}) in {bad}"]
        self.event("checkpoint_skipped", step, tier=tier, path=str(path), reason=found[0], problems=len(found))
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
        if self._owner(tier if tier != "cold" else "macro") and path.is_dir():
            set_aside(path, self.housekeeper)
