"""`bessemer doctor`'s host checks: the node's kernel settings, limits, clock, interconnect, NUMA placement, GPUs
and storage, each a function `(HostContext) -> Check`, run in the order of `HOST_CHECKS`. Torch is never
imported: the doctor has to run (fast) on a node where training doesn't.

    run_checks()                        # the live machine
    run_checks(root="snap/node17")      # a copy of another node's /proc, /sys, /etc (see docs/doctor.md)
"""

from collections.abc import Callable, Mapping
from pathlib import Path

from bessemer.doctor.check import STATUSES, Check
from bessemer.doctor.host_context import CheckInfo, HostContext
from bessemer.doctor.host_clock import CLOCK, check_clock_sync
from bessemer.doctor.host_gpu_health import GPU, SETTINGS, XID, check_gpu_health, check_settings, check_xid
from bessemer.doctor.host_gpu_links import (FABRIC, NVLINK, PCIE, PEERMEM, check_fabric, check_nvlink, check_pcie,
                                            check_peermem)
from bessemer.doctor.host_limits import LIMITS, MAP_COUNT, SHM, check_limits, check_shm_size, check_vm_max_map_count
from bessemer.doctor.host_nccl import NCCL_ENV, check_nccl_env
from bessemer.doctor.host_numa import NUMA, check_numa_affinity
from bessemer.doctor.host_rdma import RDMA_LINKS, RDMA_PFC, check_rdma_links, check_rdma_pfc
from bessemer.doctor.host_storage import STORAGE, check_storage_checkpoint
from bessemer.doctor.host_tuning import TUNING, check_host_tuning
from bessemer.doctor.host_versions import VERSIONS, check_versions
from bessemer.errors import BessemerError

HOST_CHECKS: list[tuple[CheckInfo, Callable[[HostContext], Check]]] = [
    (MAP_COUNT, check_vm_max_map_count),
    (NUMA, check_numa_affinity),
    (CLOCK, check_clock_sync),
    (NCCL_ENV, check_nccl_env),
    (RDMA_LINKS, check_rdma_links),
    (RDMA_PFC, check_rdma_pfc),
    (GPU, check_gpu_health),
    (SETTINGS, check_settings),
    (XID, check_xid),
    (PCIE, check_pcie),
    (NVLINK, check_nvlink),
    (FABRIC, check_fabric),
    (PEERMEM, check_peermem),
    (STORAGE, check_storage_checkpoint),
    (SHM, check_shm_size),
    (LIMITS, check_limits),
    (TUNING, check_host_tuning),
    (VERSIONS, check_versions),
]
CHECK_IDS: tuple[str, ...] = tuple(info.id for info, _ in HOST_CHECKS)


def select(only: list[str] | None) -> list[tuple[CheckInfo, Callable[[HostContext], Check]]]:
    """The registry filtered to the ids in `only` (all when None), in registry order."""
    if only is None:
        return list(HOST_CHECKS)
    unknown = [i for i in only if i not in CHECK_IDS]
    if unknown:
        raise BessemerError(f"unknown check id {', '.join(unknown)}; valid ids: {', '.join(CHECK_IDS)}")
    return [(info, fn) for info, fn in HOST_CHECKS if info.id in only]


def run_one(info: CheckInfo, fn: Callable[[HostContext], Check], ctx: HostContext) -> Check:
    """A check that raises becomes a skip saying so: one broken probe must not hide the other checks' results."""
    try:
        return fn(ctx)
    except Exception as e:  # noqa: BLE001 (any failure of the probe itself)
        return info.result("skip", f"check crashed: {type(e).__name__}: {e}")


def run_checks(root: str | Path | None = None, only: list[str] | None = None, *,
               environ: Mapping[str, str] | None = None, ckpt_dirs: list[str | Path] | None = None,
               checkpoint_save_s: float | None = None, expect_gpus: int | None = None,
               expect_link_rate_gbps: float | None = None, timeout_s: float | None = None,
               save_basis: str = "") -> list[Check]:
    """Run the host checks (those in `only`, or all) against the live machine or the snapshot under `root`.
    `environ` defaults to os.environ (live) or ROOT/environ; `ckpt_dirs` to the current and temp directories;
    `checkpoint_save_s`, when known, lets nccl.env compare the collective timeout with a checkpoint save;
    `expect_gpus` makes gpu.health fail when fewer GPUs answer (or none, the driver not loading);
    `expect_link_rate_gbps` makes rdma.links fail for slower ports; `timeout_s` is the run's collective timeout
    (default: parallel.timeout_s's) and `save_basis` says where `checkpoint_save_s` came from."""
    ctx = HostContext.build(root, environ, ckpt_dirs, checkpoint_save_s, expect_gpus=expect_gpus,
                            expect_link_rate_gbps=expect_link_rate_gbps, timeout_s=timeout_s, save_basis=save_basis)
    if ctx.root is not None and not ctx.root.is_dir():
        raise BessemerError(f"--root {ctx.root} is not a directory")
    return [run_one(info, fn, ctx) for info, fn in select(only)]


def summarize(checks: list[Check]) -> dict[str, int]:
    return {s: sum(c.status == s for c in checks) for s in STATUSES}


def host_name(root: str | Path | None = None) -> str | None:
    """This machine's name, or the snapshot's (ROOT/etc/hostname or ROOT/proc/sys/kernel/hostname) under --root."""
    if root is None:
        import socket

        return socket.gethostname()
    ctx = HostContext.build(root, environ={})
    return ctx.read("/etc/hostname") or ctx.read("/proc/sys/kernel/hostname")
