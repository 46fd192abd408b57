"""What every host check receives: where to read the machine from (the live `/` or a snapshot under `--root`),
the environment to judge, and the user's options. Reading files and running tools goes through here so that a
snapshot of another node can be checked with the same code. No torch."""

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bessemer.doctor.check import Check, Status

TOOL_TIMEOUT_S = 2.0
NOT_UNDER_ROOT = "not available under --root"


@dataclass(frozen=True)
class CheckInfo:
    """A host check's stable id and its one-line description; `result` builds the Check it returns."""

    id: str
    description: str

    def result(self, status: Status, evidence: str, fix: str = "", measured: str = "", **details) -> Check:
        return Check(self.id, self.description, status, evidence, fix=fix, measured=measured, details=details)


@dataclass
class ToolOutput:
    """The output of a command (live) or of the file holding it (`--root`). `text` is the reason when not `ok`."""

    ok: bool
    text: str
    source: str


@dataclass
class HostContext:
    """`root` None means the live machine; otherwise /proc, /sys, /etc and /dev/shm are read under it and checks
    that need live commands or probes skip unless a fixture file provides their data."""

    root: Path | None = None
    environ: Mapping[str, str] = field(default_factory=dict)
    ckpt_dirs: list[Path] = field(default_factory=list)
    checkpoint_save_s: float | None = None  # seconds one checkpoint save takes, when known (nccl.env)
    expect_gpus: int | None = None  # GPUs the node must have (gpu.health fails with fewer), None: don't count
    expect_link_rate_gbps: float | None = None  # Gb/s every RDMA port in use must reach (rdma.links), None: any
    timeout_s: float | None = None  # the run's collective timeout, parallel.timeout_s of `--config` (nccl.env)
    save_basis: str = ""  # how checkpoint_save_s was obtained, or why it is unknown (nccl.env's evidence)

    @classmethod
    def build(cls, root: str | Path | None = None, environ: Mapping[str, str] | None = None,
              ckpt_dirs: list[str | Path] | None = None, checkpoint_save_s: float | None = None,
              expect_gpus: int | None = None, expect_link_rate_gbps: float | None = None,
              timeout_s: float | None = None, save_basis: str = "") -> "HostContext":
        root = Path(root) if root is not None else None
        if environ is None:
            environ = dict(os.environ) if root is None else read_environ_file(root / "environ")
        return cls(root, environ, [Path(d) for d in ckpt_dirs or []], checkpoint_save_s, expect_gpus,
                   expect_link_rate_gbps, timeout_s, save_basis)

    @property
    def live(self) -> bool:
        return self.root is None

    def path(self, absolute: str) -> Path:
        """`/proc/sys/vm/max_map_count` on the live machine, `ROOT/proc/sys/vm/max_map_count` under --root."""
        return Path(absolute) if self.root is None else self.root / absolute.lstrip("/")

    def read(self, absolute: str | Path) -> str | None:
        """The stripped text of a file, or None when it is absent or unreadable (sysfs files of absent
        hardware, permissions)."""
        target = absolute if isinstance(absolute, Path) else self.path(absolute)
        try:
            return target.read_text(errors="replace").strip()
        except OSError:
            return None

    def listdir(self, absolute: str) -> list[str]:
        try:
            return sorted(os.listdir(self.path(absolute)))
        except OSError:
            return []

    def tool_output(self, argv: list[str], fixture: str) -> ToolOutput:
        """Run `argv` (live, `TOOL_TIMEOUT_S` at most) or read ROOT/`fixture` (under --root), which holds that
        command's output as captured on the node."""
        if self.root is not None:
            text = self.read(self.root / fixture)
            if text is None:
                return ToolOutput(False, f"{NOT_UNDER_ROOT} (no {fixture} in {self.root})", fixture)
            return ToolOutput(True, text, str(self.root / fixture))
        command = " ".join(argv)
        if shutil.which(argv[0]) is None:
            return ToolOutput(False, f"{argv[0]} not installed", command)
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            return ToolOutput(False, f"`{command}` timed out after {TOOL_TIMEOUT_S:g} s", command)
        except OSError as e:
            return ToolOutput(False, f"`{command}` could not run: {e}", command)
        if proc.returncode != 0:
            why = (proc.stderr or proc.stdout).strip().splitlines()
            return ToolOutput(False, f"`{command}` exited {proc.returncode}: {why[0] if why else 'no output'}",
                              command)
        return ToolOutput(True, proc.stdout.strip(), command)

    def has_infiniband(self) -> bool:
        return bool(self.listdir("/sys/class/infiniband"))


def read_environ_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines, or a copy of /proc/<pid>/environ (NUL-separated). Absent file: an empty environment."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return {}
    env = {}
    for entry in text.replace("\0", "\n").splitlines():
        key, sep, value = entry.strip().partition("=")
        if sep and key and not key.startswith("#"):
            env[key.removeprefix("export ")] = value
    return env


def parse_cpulist(text: str) -> set[int]:
    """`0-3,8,10-11` (the kernel's cpulist format) as {0, 1, 2, 3, 8, 10, 11}."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def format_cpulist(cpus: set[int]) -> str:
    """The inverse of `parse_cpulist`: {0, 1, 2, 3, 8} as `0-3,8`."""
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in runs)


GIB = 1024**3


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"
