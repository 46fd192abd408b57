"""Process helpers shared by the CLI, the launcher and the doctor: whether we run under a launcher, how a rank
leaves, its log file, and how an exit status reads. No torch here (commands that don't train import this).

Per-rank logs: each rank process started by a launcher sends its own stdout and stderr — Python's and the C++
libraries' alike (gloo, NCCL), since the redirect is of the file descriptors — to `<run.dir>/logs/rankN.log`.
Rank 0 also keeps the launcher's stdout as its console: the lines meant for the user (step lines, summaries,
alerts) go to both, tracebacks only to its log.
"""

import faulthandler
import io
import os
import signal
import sys
import time
from pathlib import Path

LOGS = "logs"  # under <run.dir>


def under_launcher() -> bool:
    """True inside a process started by torchrun (or another launcher that sets the rendezvous variables)."""
    return "LOCAL_RANK" in os.environ or "TORCHELASTIC_RUN_ID" in os.environ


def exit_rank(code: int) -> None:
    """A rank under torchrun leaves without interpreter finalization once its work is done (process group
    destroyed, files closed): gloo's worker threads can still hold tensors then, and tearing them down during
    finalization aborts the process now and then (SIGABRT, "terminate called without an active exception"),
    which would turn a finished run into a failed one."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def rank_log(run_dir: str | Path, rank: int) -> Path:
    return Path(run_dir) / LOGS / f"rank{rank}.log"


def launcher_log(run_dir: str | Path) -> Path:
    return Path(run_dir) / LOGS / "launcher.log"


def describe_exit(code: int) -> str:
    """An exit status as a person reads it: -9 (killed by a signal, as subprocess reports it) -> "SIGKILL";
    137 (a shell's 128 + 9) -> "exit code 137: SIGKILL"; 2 -> "exit code 2"."""
    if code < 0:
        return _signal_name(-code)
    if code > 128 and _signal_name(code - 128) != f"signal {code - 128}":
        return f"exit code {code}: {_signal_name(code - 128)}"
    return f"exit code {code}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class _Tee(io.TextIOBase):
    """Writes to the console and to the log; used as rank 0's sys.stdout."""

    def __init__(self, console: io.TextIOBase, log: io.TextIOBase):
        self.console, self.log = console, log

    def write(self, text: str) -> int:
        self.log.write(text)
        try:
            self.console.write(text)
        except (OSError, ValueError):  # the launcher went away: the log still gets everything
            pass
        return len(text)

    def flush(self) -> None:
        self.log.flush()
        try:
            self.console.flush()
        except (OSError, ValueError):
            pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self.log.fileno()

    @property
    def encoding(self) -> str:
        return self.log.encoding

    def writable(self) -> bool:
        return True


_console: io.TextIOBase | None = None  # rank 0's console (the launcher's stdout) once its output goes to its log
_console_err: io.TextIOBase | None = None  # and the launcher's stderr, for its one-line errors


def redirect_to_rank_log(run_dir: str | Path, rank: int, attempt: int, console: bool) -> Path:
    """Send this process's stdout and stderr (file descriptors 1 and 2) to `<run_dir>/logs/rank<rank>.log`,
    appended to, under a header naming the attempt. With `console` (rank 0), Python's sys.stdout also still
    reaches the original stdout; sys.stderr (tracebacks, warnings) goes to the log alone. A crash in C code
    (SIGSEGV, SIGABRT) leaves every thread's Python stack in the log (faulthandler)."""
    global _console, _console_err
    path = rank_log(run_dir, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = (os.dup(1), os.dup(2)) if console else None
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(fd, (f"==== rank {rank}, attempt {attempt}, pid {os.getpid()}, "
                  f"{time.strftime('%Y-%m-%d %H:%M:%S')} ====\n").encode())
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    # The streams keep their file descriptors (now the log); line buffering keeps the log in order with the
    # C++ output that goes straight to the descriptors.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(line_buffering=True)
    if saved is not None:
        _console, _console_err = (open(fd, "w", buffering=1, encoding="utf-8", errors="replace") for fd in saved)
        sys.stdout = _Tee(_console, sys.stdout)
    faulthandler.enable(file=sys.__stderr__)
    return path


def to_console(message: str) -> None:
    """A line for the user that must not stay in the log alone (a one-line error of rank 0): to stderr, and,
    once redirect_to_rank_log gave this process a console, to the console's stderr too."""
    print(message, file=sys.stderr, flush=True)
    if _console_err is not None:
        try:
            print(message, file=_console_err, flush=True)
        except (OSError, ValueError):
            pass
