"""A run's logs read back after a failure: the exception that ended a rank (its log's last traceback line), the
rank whose failure the others followed, what each attempt did (from metrics.jsonl), and `FailureStory`, which
turns torchrun's agent output and rank 0's console into one line per failure on the console and a JSON line in
<run.dir>/logs/failures.jsonl (the report's Recovery section reads them). An attempt the hang watchdog ended is
told from its verdict (hangs.py): the hung rank, its host, where it hung. Beside proc.py, which writes the rank
logs; no torch.
"""

import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import IO

from bessemer.hangs import append_hang_event, describe, latest_verdict
from bessemer.proc import LOGS, describe_exit, launcher_log, rank_log

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
        self.final_hang: dict | None = None  # the verdict of a hang that ended the run (no restart to log it)
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
            if self.final_hang is not None:  # every rank has exited: nobody else writes metrics.jsonl now
                append_hang_event(self.run_dir / "metrics.jsonl", self.final_hang)
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
        failure, head = self._hang(attempt, code, when) or self._exit(rank, code, attempt, when)
        source = "as the hang watchdog found it" if "hang" in failure else "as torchrun reports it"
        with open(rank_log(self.run_dir, failure["rank"]), "a", encoding="utf-8") as log:  # a killed rank could
            log.write(f"==== {head} ({source}) ====\n")  # not write its own end
        if self.failures <= self.max_restarts:
            self.pending = {**failure, "head": head}
            return
        left = (f"no restarts left (--max-restarts {self.max_restarts})" if self.max_restarts else
                "training stopped (--max-restarts 0)")
        self.exit_code = code if code > 0 and "hang" not in failure else None
        self.final = True
        self.final_hang = failure.get("verdict")
        self._record(failure)
        self._print(f"{head}; {left}: see {failure['see']} (torchrun's output: {launcher_log(self.run_dir)})")

    def _exit(self, rank: int, code: int, attempt: int, when: str) -> tuple[dict, str]:
        """A rank that exited: the one torchrun saw, or the root cause among the ranks' logs."""
        reported = rank
        rank, error = root_cause(self.run_dir, rank, code, attempt)
        log = str(rank_log(self.run_dir, rank))
        failure = {"time": round(time.time(), 3), "rank": rank, "exit": describe_exit(code), "exit_code": code,
                   "attempt": attempt, "when": when, "log": log, "see": log}
        if error:
            failure["error"] = error if len(error) <= 160 else error[:157] + "..."
        if rank == reported:
            head = f"rank {rank} exited ({failure['exit']}{': ' + failure['error'] if error else ''}) {when}"
        else:  # torchrun saw another rank go first: it had lost its connection to this one
            failure |= {"exit": "failed", "reported_rank": reported}
            head = f"rank {rank} failed ({failure['error']}) {when}"
        return failure, head

    def _hang(self, attempt: int, code: int, when: str) -> tuple[dict, str] | None:
        """An attempt the hang watchdog ended (its verdict written before any rank exited): the hung rank(s),
        where, and the dumps."""
        verdict = latest_verdict(self.run_dir, attempt, since=self.since)
        if verdict is None:
            return None
        ranks = [c["rank"] for c in verdict["culprits"]]
        message = describe(verdict)
        failure = {"time": round(time.time(), 3), "rank": ranks[0], "ranks": ranks, "exit": "hung",
                   "exit_code": code, "attempt": attempt, "when": when, "log": str(rank_log(self.run_dir, ranks[0])),
                   "hang": message if len(message) <= 600 else message[:597] + "...", "see": verdict["dir"],
                   "verdict": verdict}
        return failure, f"hang: {message}"

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
                    f"see {failure['see']}")

    def _record(self, failure: dict) -> None:
        record = {k: v for k, v in failure.items() if k not in ("see", "verdict")}
        if "verdict" in failure:
            record["dumps"] = failure["see"]
        with open(self.run_dir / LOGS / "failures.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def _print(self, text: str) -> None:
        self.log.write(f"[console] {text}\n")
        self.log.flush()
        try:
            print(text, file=self.out, flush=True)
        except (OSError, ValueError):
            pass
