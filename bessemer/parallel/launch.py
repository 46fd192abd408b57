"""`bessemer train --nproc N`: start torchrun ourselves so nobody writes launcher boilerplate. No torch import."""

import os
import signal
import subprocess
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bessemer.config import JobConfig


def under_launcher() -> bool:
    """True inside a process started by torchrun (or another launcher that sets the rendezvous variables)."""
    return "LOCAL_RANK" in os.environ or "TORCHELASTIC_RUN_ID" in os.environ


def run_torchrun(nproc: int, bessemer_args: list[str], max_restarts: int = 0) -> int:
    """Run `bessemer <args>` on `nproc` local ranks (standalone rendezvous on a free local port); returns the
    exit status. torchrun forwards Ctrl-C to the ranks, which save and stop together. With `max_restarts`,
    torchrun's agent restarts all ranks when one dies (each restart resumes from the newest checkpoint)."""
    env = dict(os.environ)
    # Share the cores between the ranks unless the user chose: N ranks x all cores each would oversubscribe.
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           f"--max-restarts={max_restarts}", "--module", "bessemer.cli", *bessemer_args]
    proc = subprocess.Popen(cmd, env=env)
    # Ctrl-C reaches torchrun and the ranks directly (same process group); this process only waits for them
    # to finish the step and save, instead of killing torchrun midway.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return proc.wait()
    finally:
        signal.signal(signal.SIGINT, previous)


def train(cfg: "JobConfig", config_path: str, argv: list[str], nproc: int, resume: bool,
          max_restarts: int = 0) -> int:
    """Train `cfg`: on `nproc` local ranks through torchrun when asked and not already under a launcher
    (the layout and run directory are checked here first, before any process starts), else in this
    process. `argv` are the command-line overrides, passed on to the ranks."""
    if (nproc > 1 or max_restarts > 0) and not under_launcher():
        from bessemer.checkpoint.paths import check_resume
        from bessemer.parallel.layout import check_job

        check_job(cfg, nproc)
        check_resume(cfg, resume)
        return run_torchrun(nproc, ["train", config_path, *(["--resume"] if resume else []), *argv], max_restarts)
    from bessemer.train.trainer import Trainer

    trainer = Trainer(cfg, resume=resume)
    try:
        trainer.train()
    finally:
        trainer.close()
    if trainer.is_main:
        print(f"done: {trainer.run_dir / 'metrics.jsonl'}")
    return 0
