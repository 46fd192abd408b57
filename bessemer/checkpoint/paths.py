"""Where checkpoints live and which ones are complete — no torch, so the launcher and `bessemer ckpt list`
can look before any rank starts.

Each tier has its own directory of `step_NNNNNNNN/` checkpoints and a `latest` pointer. A checkpoint is
complete when its directory holds a manifest (written last, just before the rename from `.tmp`);
`manifest.py` checks that it is also intact.
"""

import re
from pathlib import Path
from typing import TYPE_CHECKING

from bessemer.errors import BessemerError

if TYPE_CHECKING:
    from bessemer.config import CheckpointConfig, JobConfig

LATEST = "latest"
MANIFEST = "manifest.json"
TIERS = ("micro", "macro")  # local tiers, in the order recovery prefers at equal steps


def redact_url(url: str) -> str:
    """The URL without any user:password@ part, for messages and events."""
    return re.sub(r"^([a-zA-Z0-9+.-]+://)[^/@]*@", r"\1", url)


def tier_dirs(cfg: "CheckpointConfig", run_dir: Path) -> dict[str, Path]:
    root = Path(run_dir) / "checkpoints"
    return {"micro": Path(cfg.micro.dir) if cfg.micro.dir else root / "micro",
            "macro": Path(cfg.macro.dir) if cfg.macro.dir else root / "macro"}


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


def candidates(cfg: "CheckpointConfig", run_dir: Path) -> list[tuple[int, str, Path]]:
    """Every committed local checkpoint as (step, tier, path), newest first; micro before macro at one step."""
    out = [(s, tier, p) for tier, d in tier_dirs(cfg, run_dir).items() for s, p in committed(d)]
    return sorted(out, key=lambda c: (-c[0], TIERS.index(c[1])))


def latest_step(cfg: "CheckpointConfig", run_dir: Path) -> int | None:
    found = candidates(cfg, run_dir)
    return found[0][0] if found else None


def check_resume(cfg: "JobConfig", resume: bool) -> int | None:
    """A fresh run must not start over a run that has checkpoints; returns the newest step a resume may start
    from (recovery may fall back to an older one if that one is damaged)."""
    latest = latest_step(cfg.checkpoint, Path(cfg.run.dir))
    if latest is not None and not resume:
        dirs = ", ".join(str(d) for d in tier_dirs(cfg.checkpoint, Path(cfg.run.dir)).values())
        raise BessemerError(f"{cfg.run.dir} already holds a checkpoint (step {latest}, in {dirs}); pass --resume to "
                            f"continue that run, or choose another run.dir")
    return latest
