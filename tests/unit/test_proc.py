"""Process helpers: exit statuses named, a rank's output redirected to its log (Python and file-descriptor level
writes alike, rank 0 teeing its stdout to the console), and no torch import."""

import os
import subprocess
import sys

import pytest

from bessemer.proc import describe_exit


@pytest.mark.parametrize("code, text", [(-9, "SIGKILL"), (-15, "SIGTERM"), (2, "exit code 2"),
                                        (137, "exit code 137: SIGKILL"), (130, "exit code 130: SIGINT"),
                                        (1, "exit code 1"), (200, "exit code 200")])
def test_exit_statuses_read_as_signals_or_codes(code, text):
    assert describe_exit(code) == text


RANK = """
import os, sys
from bessemer.proc import redirect_to_rank_log, to_console
redirect_to_rank_log(sys.argv[1], int(sys.argv[2]), 1, console=sys.argv[2] == "0")
print("step line")
os.write(1, b"c++ stdout\\n")
os.write(2, b"c++ stderr\\n")
to_console("bessemer train: error: one line")
import torch_is_not_imported_here  # noqa: a traceback for the log
"""


@pytest.mark.parametrize("rank", [0, 1])
def test_a_rank_writes_everything_to_its_log_and_rank_0_keeps_its_console(tmp_path, rank):
    proc = subprocess.run([sys.executable, "-c", RANK, str(tmp_path), str(rank)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert proc.returncode == 1
    log = (tmp_path / "logs" / f"rank{rank}.log").read_text()
    assert log.startswith(f"==== rank {rank}, attempt 1, pid ")
    for text in ("step line", "c++ stdout", "c++ stderr", "bessemer train: error: one line",
                 "Traceback", "ModuleNotFoundError"):
        assert text in log
    if rank == 0:  # the user's lines reach the console; the traceback stays in the log
        assert proc.stdout == "step line\n" and proc.stderr == "bessemer train: error: one line\n"
    else:
        assert proc.stdout == proc.stderr == ""


def test_proc_does_not_import_torch():
    code = "import sys, bessemer.proc, bessemer.train.launch; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"
