"""`bessemer train --nproc N`: start torchrun ourselves so nobody writes launcher boilerplate. No torch import."""

import os
import subprocess
import sys


def under_launcher() -> bool:
    """True inside a process started by torchrun (or another launcher that sets the rendezvous variables)."""
    return "LOCAL_RANK" in os.environ or "TORCHELASTIC_RUN_ID" in os.environ


def run_torchrun(nproc: int, bessemer_args: list[str]) -> int:
    """Run `bessemer <args>` on `nproc` local ranks (standalone rendezvous on a free local port); returns the
    exit status. torchrun forwards Ctrl-C to the ranks, which save and stop together."""
    env = dict(os.environ)
    # Share the cores between the ranks unless the user chose: N ranks x all cores each would oversubscribe.
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "--module", "bessemer.cli", *bessemer_args]
    try:
        return subprocess.run(cmd, env=env).returncode
    except KeyboardInterrupt:
        return 130
