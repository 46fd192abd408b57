"""Where checkpoints live and which is the newest — no torch, so the launcher can check before starting ranks."""

from pathlib import Path
from typing import TYPE_CHECKING

from bessemer.errors import BessemerError

if TYPE_CHECKING:
    from bessemer.config import CheckpointConfig, JobConfig

LATEST = "latest"


def checkpoint_dir(cfg: "CheckpointConfig", run_dir: Path) -> Path:
    return Path(cfg.dir) if cfg.dir else Path(run_dir) / "checkpoints"


def step_dir(directory: Path, step: int) -> Path:
    return directory / f"step_{step:08d}"


def latest_step(directory: Path) -> int | None:
    """The step the `latest` pointer names; None when there is no checkpoint."""
    pointer = directory / LATEST
    if not pointer.is_file():
        return None
    name = pointer.read_text().strip()
    if not (directory / name).is_dir():
        raise BessemerError(f"{pointer} names {name}, which does not exist")
    return int(name.removeprefix("step_"))


def check_resume(cfg: "JobConfig", resume: bool) -> int | None:
    """A fresh run must not start over a run that has checkpoints; returns the step a resume starts from."""
    directory = checkpoint_dir(cfg.checkpoint, Path(cfg.run.dir))
    latest = latest_step(directory)
    if latest is not None and not resume:
        raise BessemerError(f"{directory} already holds a checkpoint (step {latest}); pass --resume to continue "
                            f"that run, or choose another run.dir")
    return latest
