"""`bessemer train`: in this process, as one rank under a torchrun already running, or — with `--nproc N` (or
`--max-restarts K`) outside a launcher — on N local ranks under a torchrun started here, so nobody writes
launcher boilerplate. Importing this module imports no torch: the trainer is imported only where it trains.

A failure reads as one story on the console: rank 0's own lines (step lines, summaries, alerts), and one line
per failure — the rank, how it ended, the last step, and the step and tier the restarted ranks resume from.
Everything else is in files under <run.dir>/logs/: each rank's stdout and stderr in rankN.log (tracebacks
included), torchrun's agent in launcher.log, the failures as JSON lines in failures.jsonl (the report's
Recovery section reads them), and what the hang watchdog dumped in hang/. The story is told by failures.py
(FailureStory), beside the rank logs.
"""

import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, TYPE_CHECKING

from bessemer.failures import FailureStory
from bessemer.hangs import hangs_dir
from bessemer.proc import LOGS, redirect_to_rank_log, under_launcher

if TYPE_CHECKING:
    from bessemer.config import JobConfig

__all__ = ["run_torchrun", "train", "under_launcher"]


def _pump(stream: IO[str], handle) -> None:
    for line in stream:
        handle(line)


def fresh_logs(run_dir: Path) -> None:
    """A run that starts over starts its logs over too (a resumed or restarted one appends)."""
    logs = run_dir / LOGS
    logs.mkdir(parents=True, exist_ok=True)
    for old in [*logs.glob("rank*.log"), logs / "launcher.log", logs / "failures.jsonl"]:
        old.unlink(missing_ok=True)
    shutil.rmtree(hangs_dir(run_dir), ignore_errors=True)


def run_torchrun(nproc: int, bessemer_args: list[str], max_restarts: int = 0, run_dir: str | Path = ".",
                 resume: bool = False) -> int:
    """Run `bessemer <args>` on `nproc` local ranks (standalone rendezvous on a free local port); returns the
    exit status. Ctrl-C (or a SIGTERM that torchrun passes on) reaches every rank; the ranks agree on it at the
    next log step (at most metrics.log_interval steps later), save a checkpoint there and exit with
    128 + the signal's number (130 for Ctrl-C), together. With `max_restarts`,
    torchrun's agent restarts all ranks when one dies (each restart resumes from the newest checkpoint).
    The ranks write their logs under `run_dir`/logs (proc.redirect_to_rank_log); rank 0 keeps torchrun's
    stdout as its console, which is passed on here, while torchrun's own stderr goes to logs/launcher.log."""
    run_dir = Path(run_dir)
    if not resume:
        fresh_logs(run_dir)
    (run_dir / LOGS).mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    # Share the cores between the ranks unless the user chose: N ranks x all cores each would oversubscribe.
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    env["PYTHONUNBUFFERED"] = "1"  # the agent's lines reach launcher.log (and the failure line) when written
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           f"--max-restarts={max_restarts}", "--module", "bessemer.cli", *bessemer_args]
    story = FailureStory(run_dir, nproc, max_restarts)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            encoding="utf-8", errors="replace", bufsize=1)
    pumps = [threading.Thread(target=_pump, args=(proc.stdout, story.console), daemon=True),
             threading.Thread(target=_pump, args=(proc.stderr, story.agent), daemon=True)]
    for t in pumps:
        t.start()
    # Ctrl-C reaches torchrun and the ranks directly (same process group); this process only waits for them
    # to reach the next log step and save there, instead of killing torchrun midway.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        status = proc.wait()
        for t in pumps:
            t.join(timeout=10)  # a rank that outlived torchrun may hold the pipes; don't wait for it
    finally:
        signal.signal(signal.SIGINT, previous)
    story.finish(status)
    # A rank's own exit status says more than torchrun's 1 (2: a user error, 130: Ctrl-C).
    return (story.exit_code or status) if status else 0


def train(cfg: "JobConfig", config_path: str, argv: list[str], nproc: int, resume: bool,
          max_restarts: int = 0) -> int:
    """Train `cfg`. Outside a launcher, with `nproc` > 1 or `max_restarts` > 0: check the layout and the run
    directory (before any process starts), then run `bessemer train` on `nproc` local ranks through torchrun and
    return its status (`argv`: the command-line overrides, passed on to the ranks). Otherwise train in this
    process; a rank under a launcher first sends its output to its rank log (rank 0 keeps the console too)."""
    if (nproc > 1 or max_restarts > 0) and not under_launcher():
        from bessemer.checkpoint.paths import check_resume
        from bessemer.parallel.layout import check_job

        check_job(cfg, nproc)
        check_resume(cfg, resume)
        return run_torchrun(nproc, ["train", config_path, *(["--resume"] if resume else []), *argv], max_restarts,
                            cfg.run.dir, resume)
    if under_launcher():  # a rank: its output goes to its log before torch says anything
        from bessemer.parallel.dims import Launch, restart_attempt

        rank = Launch.from_env().rank
        redirect_to_rank_log(cfg.run.dir, rank, restart_attempt(), console=rank == 0)
    from bessemer.doctor.runtime import trainer_checks
    from bessemer.train.trainer import Trainer

    trainer = Trainer(cfg, resume=resume, runtime_checks=trainer_checks)
    try:
        trainer.train()
    finally:
        # The training loop's SIGTERM handler is gone once an exception leaves it, and the traceback is printed
        # only after this block: a SIGTERM from torchrun (stopping the ranks because a peer died) arriving
        # during close() would end the rank silently, its log without the error that ended it. torchrun still
        # sends SIGKILL after its grace period if close() does not return.
        previous = signal.signal(signal.SIGTERM, signal.SIG_IGN) if under_launcher() else None
        try:
            trainer.close()
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
    if trainer.is_main:
        print(f"done: {trainer.run_dir / 'metrics.jsonl'}")
    return 0
