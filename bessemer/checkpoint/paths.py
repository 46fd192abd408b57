"""Where checkpoints live and which ones are complete — no torch, so the launcher and `bessemer ckpt list`
can look before any rank starts.

Each tier has its own directory of `step_NNNNNNNN/` checkpoints and a `latest` pointer. A checkpoint is
complete when its directory holds a manifest (written last, just before the rename from `.tmp`);
`manifest.py` checks that it is also intact.

A node-local micro tier (`checkpoint.micro.dir` containing `{node}`) holds on each node only that node's
ranks' parts; which steps are complete on every node is said by the commit record, `micro_commits.json` in
the macro directory (shared storage), which rank 0 writes once every node has committed its part.
"""

import json
import os
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bessemer.errors import BessemerError

if TYPE_CHECKING:
    from bessemer.config import CheckpointConfig, JobConfig

LATEST = "latest"
MANIFEST = "manifest.json"
COMMITS = "micro_commits.json"
NODE = "{node}"
TIERS = ("micro", "macro")  # local tiers, in the order recovery prefers at equal steps
TRASH = ".trash-"  # directories renamed aside to be deleted in the background
# What a killed process leaves in a tier directory: saves that never committed, directories it was deleting,
# snapshots for cold uploads that never finished (cold_store.py names them).
LEFTOVERS = ("step_*.tmp", TRASH + "*", ".cold-staging-*")


def redact_url(url: str) -> str:
    """The URL without any user:password@ part, for messages and events."""
    return re.sub(r"^([a-zA-Z0-9+.-]+://)[^/@]*@", r"\1", url)


def node_local(cfg: "CheckpointConfig") -> bool:
    """Whether the micro tier lives on each node's own disk (its directory contains `{node}`)."""
    return NODE in cfg.micro.dir


def micro_dir(cfg: "CheckpointConfig", run_dir: Path, node: int = 0) -> Path:
    return Path(cfg.micro.dir.replace(NODE, str(node))) if cfg.micro.dir else Path(run_dir) / "checkpoints" / "micro"


def tier_dirs(cfg: "CheckpointConfig", run_dir: Path, node: int = 0) -> dict[str, Path]:
    """Each tier's directory as node `node` sees it (only a node-local micro tier depends on the node)."""
    root = Path(run_dir) / "checkpoints"
    return {"micro": micro_dir(cfg, run_dir, node), "macro": Path(cfg.macro.dir) if cfg.macro.dir else root / "macro"}


def step_dir(directory: Path, step: int) -> Path:
    return directory / f"step_{step:08d}"


def step_of(path: Path) -> int | None:
    name = path.name
    if not name.startswith("step_") or name.endswith(".tmp"):
        return None
    try:
        return int(name.removeprefix("step_"))
    except ValueError:
        return None


def committed(directory: Path) -> list[tuple[int, Path]]:
    """(step, path) of the checkpoints in `directory` that were committed (have a manifest), oldest first."""
    if not directory.is_dir():
        return []
    found = [(step_of(p), p) for p in directory.iterdir() if p.is_dir()]
    return sorted((s, p) for s, p in found if s is not None and (p / MANIFEST).is_file())


def leftovers(directory: Path) -> list[Path]:
    """What a killed process left in a tier directory (LEFTOVERS)."""
    if not directory.is_dir():
        return []
    return sorted(p for pattern in LEFTOVERS for p in directory.glob(pattern))


# ----------------------------------------------------------------------------------- the commit record


def commits_path(cfg: "CheckpointConfig", run_dir: Path) -> Path:
    return tier_dirs(cfg, run_dir)["macro"] / COMMITS


def read_commits(cfg: "CheckpointConfig", run_dir: Path) -> list[dict]:
    """The node-local micro checkpoints complete on every node, oldest first: one entry per step with
    `step`, `world_size`, `layout`, `nodes` ({node: [ranks]}) and `dirs` ({node: directory}). An unreadable
    record counts as empty: those checkpoints are then not offered, and the macro tier is."""
    path = commits_path(cfg, run_dir)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        entries = [e for e in record["steps"] if isinstance(e, dict) and isinstance(e.get("step"), int)]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return sorted(entries, key=lambda e: e["step"])


def write_commits(cfg: "CheckpointConfig", run_dir: Path, entries: list[dict]) -> None:
    """Replace the commit record atomically (written, fsynced, renamed, directory fsynced)."""
    path = commits_path(cfg, run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"format": 1, "updated": time.time(), "steps": sorted(entries, key=lambda e: e["step"])}, f,
                  indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------------- candidates


def candidates(cfg: "CheckpointConfig", run_dir: Path, node: int = 0) -> list[tuple[int, str, Path]]:
    """Every committed checkpoint of the local tiers as (step, tier, path), newest first; micro before macro
    at one step. A node-local micro tier is read from the commit record (paths as node `node` names them):
    no single node can list the others' disks. Only rank 0 calls this during training, and broadcasts."""
    dirs = tier_dirs(cfg, run_dir, node)
    out = [(s, "macro", p) for s, p in committed(dirs["macro"])]
    if node_local(cfg):
        out += [(e["step"], "micro", step_dir(dirs["micro"], e["step"])) for e in read_commits(cfg, run_dir)]
    else:
        out += [(s, "micro", p) for s, p in committed(dirs["micro"])]
    return sorted(out, key=lambda c: (-c[0], TIERS.index(c[1])))


def latest_step(cfg: "CheckpointConfig", run_dir: Path) -> int | None:
    found = candidates(cfg, run_dir)
    return found[0][0] if found else None


def resume_refusal(cfg: "JobConfig", latest: int) -> str:
    dirs = ", ".join(str(d) for d in tier_dirs(cfg.checkpoint, Path(cfg.run.dir)).values())
    return (f"{cfg.run.dir} already holds a checkpoint (step {latest}, in {dirs}); pass --resume to continue that "
            f"run, or choose another run.dir")


def check_resume(cfg: "JobConfig", resume: bool) -> int | None:
    """A fresh run must not start over a run that has checkpoints; returns the newest step a resume may start
    from (recovery may fall back to an older one if that one is damaged)."""
    latest = latest_step(cfg.checkpoint, Path(cfg.run.dir))
    if latest is not None and not resume:
        raise BessemerError(resume_refusal(cfg, latest))
    return latest
