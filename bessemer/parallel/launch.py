"""`bessemer train`: in this process, as one rank under a torchrun already running, or — with `--nproc N` (or
`--max-restarts K`) outside a launcher — on N local ranks under a torchrun started here, so nobody writes
launcher boilerplate. Importing this module imports no torch: the trainer is imported only where it trains.

A failure reads as one story on the console: rank 0's own lines (step lines, summaries, alerts), and one line
per failure — the rank, how it ended, the last step, and the step and tier the restarted ranks resume from.
Everything else is in files under <run.dir>/logs/: each rank's stdout and stderr in rankN.log (tracebacks
included), torchrun's agent in launcher.log, and the failures as JSON lines in failures.jsonl (the report's
Recovery section reads them).
"""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING

from bessemer.proc import LOGS, describe_exit, launcher_log, rank_log, redirect_to_rank_log, under_launcher

if TYPE_CHECKING:
    from bessemer.config import JobConfig

__all__ = ["run_torchrun", "train", "under_launcher"]

# torchrun's agent when a worker dies: "... failed (exitcode: -9) local_rank: 3 (pid: 1234) of binary: ..."
_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+)")
_TAIL_BYTES = 1 << 18  # the end of metrics.jsonl (or of a rank log) that holds the current attempt's lines
# The last exception of a rank's traceback ("[rank0]: NameError: name 'x' is not defined"; the prefix is torch's).
_EXCEPTION = re.compile(r"^(?:\[rank\d+\]: )?([\w.]*(?:Error|Exception|Interrupt|Exit)\b.*)$")
# What a rank raises when a peer went away: a consequence of a failure elsewhere, not its cause.
_PEER_LOST = re.compile(r"Connection (closed|reset) by peer|Broken pipe|ECONNRESET|Socket closed")


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - _TAIL_BYTES))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def last_exception(log: Path, attempt: int) -> str | None:
    """The exception that ended attempt `attempt` of the rank writing `log` (its traceback's last line), if any."""
    text = _tail(log)
    rank = log.stem.removeprefix("rank")
    header = text.rfind(f"==== rank {rank}, attempt {attempt},")
    found = None
    for line in text[max(0, header):].splitlines():
        m = _EXCEPTION.match(line)
        if m:
            found = m.group(1)
    return found


def root_cause(run_dir: Path, rank: int, code: int, attempt: int) -> tuple[int, str | None]:
    """The rank whose failure the others followed, and its exception. torchrun names the rank it saw exit first;
    when that rank only lost a peer (a gloo or NCCL connection error) and another rank raised something else,
    that other rank is the cause (the lowest, if several)."""
    own = last_exception(rank_log(run_dir, rank), attempt)
    if code < 0 and code != -signal.SIGTERM or own is None or not _PEER_LOST.search(own):
        return rank, own
    logs = [p for p in (run_dir / LOGS).glob("rank*.log") if p.stem.removeprefix("rank").isdigit()]
    for log in sorted(logs, key=lambda p: int(p.stem.removeprefix("rank"))):
        other = last_exception(log, attempt)
        if other is not None and not _PEER_LOST.search(other):
            return int(log.stem.removeprefix("rank")), other
    return rank, own


def attempts(metrics: Path, since: float) -> dict[int, dict]:
    """Per attempt of the job started at time `since`, from the end of its metrics.jsonl: the step it started at
    (`start`), the last step it logged (`last`, None before its first step) and the checkpoint it loaded
    (`loaded`: (step, tier) or None). An attempt begins with its `run_started` event, preceded by a `restart`
    event from the second attempt on."""
    lines = _tail(metrics).splitlines()
    out: dict[int, dict] = {}
    current, restart = None, None
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:  # the first, cut line of the tail, or a line being written
            continue
        event = rec.get("event")
        if event == "restart":
            restart = rec.get("attempt", 0)
        elif event == "run_started":
            current = (restart or 0) if rec.get("time", 0) >= since else None
            if current is not None:
                out[current] = {"start": rec["step"], "last": None, "loaded": None}
            restart = None
        elif current is None:
            continue
        elif event == "checkpoint_loaded":
            out[current]["loaded"] = (rec["step"], rec.get("tier", ""))
        elif event is None and "step" in rec:
            out[current]["last"] = rec["step"]
    return out


class FailureStory:
    """Turns torchrun's agent output and rank 0's console into the console story: rank 0's lines pass through,
    the agent's go to launcher.log, and each failure the agent reports becomes one line — printed once the
    restarted rank 0 has said where it resumed (before its first console line), or at once for the last one.
    What the failed attempt's rank 0 still prints while torchrun stops it (its SIGTERM handler's "stopping at
    the next log step (at most N steps), then saving", which it will not get to do: its next collective fails
    on the lost peer) goes to the logs only."""

    def __init__(self, run_dir: Path, nproc: int, max_restarts: int, out: IO[str] | None = None,
                 err: IO[str] | None = None):
        self.run_dir, self.nproc, self.max_restarts = run_dir, nproc, max_restarts
        self.out, self.err = out or sys.stdout, err or sys.stderr
        self.exit_code: int | None = None  # the last failure's, when it was a plain exit status
        self.final = False  # the failure that ended the run has been told
        self.stopping = False  # torchrun was told to stop: what rank 0 says then is for the user
        self.quiet = False  # a failed attempt is being torn down: its rank 0's lines go to the log only
        self.since = time.time() - 1.0  # metrics "time" is rounded to the millisecond
        self.failures = 0
        self.pending: dict | None = None  # a failure whose restart has not yet said where it resumed
        self.lock = threading.Lock()
        self.log = open(launcher_log(run_dir), "a", encoding="utf-8")
        self.log.write(f"==== launcher, pid {os.getpid()}, {time.strftime('%Y-%m-%d %H:%M:%S')} ====\n")
        self.log.flush()

    def agent(self, line: str) -> None:
        """A line of torchrun's stderr: to launcher.log; a worker failure is counted. Rank 0's one-line errors
        (`bessemer train: error: ...`, proc.to_console) arrive here too, and go on to our stderr."""
        with self.lock:
            self.log.write(line)
            self.log.flush()
            if line.startswith("bessemer "):
                try:
                    print(line.rstrip("\n"), file=self.err, flush=True)
                except (OSError, ValueError):
                    pass
            if "death signal" in line:  # torchrun itself was told to stop (Ctrl-C, SIGTERM): ranks save and say so
                self.stopping = True
            elif "closing signal" in line and not self.stopping:  # a rank failed: the others are being stopped
                self.quiet = True
            m = _FAILED.search(line)
            if m:
                self._failed(int(m.group(2)), int(m.group(1)))

    def console(self, line: str) -> None:
        """A line of rank 0's console (torchrun's stdout): to our stdout, after the pending failure's line once
        the restarted attempt has started."""
        with self.lock:
            if self.pending is not None:
                self._resolve(final=False)
            if self.quiet:  # the failed attempt's rank 0 while it is being stopped: its log has it
                self.log.write(f"[console, not shown] {line}")
                self.log.flush()
            else:
                self._print(line.rstrip("\n"))

    def finish(self, status: int) -> None:
        """torchrun exited with `status`: say what is still unsaid."""
        with self.lock:
            if self.pending is not None:
                self._resolve(final=True)
            if status != 0 and not self.final:  # stopped by a signal, or torchrun itself failed
                self._print(f"torchrun exited with {describe_exit(status)}: see {launcher_log(self.run_dir)}")
            self.log.close()

    def _failed(self, rank: int, code: int) -> None:
        if self.pending is not None:  # the restarted ranks failed before rank 0 said anything
            self._resolve(final=True)
        attempt = self.failures
        self.failures += 1
        info = attempts(self.run_dir / "metrics.jsonl", self.since).get(attempt)
        if info is None:
            when = "during start-up"
        elif info["last"] is None or info["last"] <= info["start"]:
            when = f"during start-up (at step {info['start']})"
        else:
            when = f"after step {info['last']}"
        reported = rank
        rank, error = root_cause(self.run_dir, rank, code, attempt)
        failure = {"time": round(time.time(), 3), "rank": rank, "exit": describe_exit(code), "exit_code": code,
                   "attempt": attempt, "when": when, "log": str(rank_log(self.run_dir, rank))}
        if error:
            failure["error"] = error if len(error) <= 160 else error[:157] + "..."
        if rank == reported:
            head = f"rank {rank} exited ({failure['exit']}{': ' + failure['error'] if error else ''}) {when}"
        else:  # torchrun saw another rank go first: it had lost its connection to this one
            failure |= {"exit": "failed", "reported_rank": reported}
            head = f"rank {rank} failed ({failure['error']}) {when}"
        with open(failure["log"], "a", encoding="utf-8") as log:  # a killed rank could not write its own end
            log.write(f"==== {head} (as torchrun reports it) ====\n")
        if self.failures <= self.max_restarts:
            self.pending = {**failure, "head": head}
            return
        left = (f"no restarts left (--max-restarts {self.max_restarts})" if self.max_restarts else
                "training stopped (--max-restarts 0)")
        self.exit_code = code if code > 0 else None
        self.final = True
        self._record(failure)
        self._print(f"{head}; {left}: see {failure['log']} (torchrun's output: {launcher_log(self.run_dir)})")

    def _resolve(self, final: bool) -> None:
        """Print the pending failure's line with where its restart resumed, once the restarted rank 0 has
        started (`final`: print what is known now)."""
        failure = self.pending
        restart = self.failures
        info = attempts(self.run_dir / "metrics.jsonl", self.since).get(restart)
        if info is None and not final:
            return  # still the failed attempt's rank 0 talking (e.g. the agent's SIGTERM reaching it)
        if info is None:
            where = ""
        elif info["loaded"] is None:
            where = " from step 0 (no checkpoint yet)"
        else:
            where = f" from step {info['loaded'][0]} ({info['loaded'][1]} checkpoint)"
            failure["resumed_from"], failure["tier"] = info["loaded"]
        self.pending = None
        self.quiet = False
        failure["restart"] = restart
        head = failure.pop("head")
        self._record(failure)
        self._print(f"{head}; restarting all {self.nproc} ranks{where}, restart {restart} of {self.max_restarts}: "
                    f"see {failure['log']}")

    def _record(self, failure: dict) -> None:
        with open(self.run_dir / LOGS / "failures.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(failure) + "\n")

    def _print(self, text: str) -> None:
        self.log.write(f"[console] {text}\n")
        self.log.flush()
        try:
            print(text, file=self.out, flush=True)
        except (OSError, ValueError):
            pass


def _pump(stream: IO[str], handle) -> None:
    for line in stream:
        handle(line)


def fresh_logs(run_dir: Path) -> None:
    """A run that starts over starts its logs over too (a resumed or restarted one appends)."""
    logs = run_dir / LOGS
    logs.mkdir(parents=True, exist_ok=True)
    for old in [*logs.glob("rank*.log"), logs / "launcher.log", logs / "failures.jsonl"]:
        old.unlink(missing_ok=True)


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
        trainer.close()
    if trainer.is_main:
        print(f"done: {trainer.run_dir / 'metrics.jsonl'}")
    return 0
