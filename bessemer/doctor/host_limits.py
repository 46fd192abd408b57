"""Host checks of the kernel's and the process's limits: vm.max_map_count, the size of /dev/shm, the open-file
and locked-memory rlimits. No torch."""

import os
import re
import resource

from bessemer.doctor.check import Check
from bessemer.doctor.host_context import GIB, NOT_UNDER_ROOT, CheckInfo, HostContext, gib

MAP_COUNT = CheckInfo("vm.max_map_count", "memory map areas a process may hold (mmap'd shards x dataloader workers)")
SHM = CheckInfo("shm.size", "size of /dev/shm, where dataloader workers pass batches to the trainer")
LIMITS = CheckInfo("limits", "open-file and locked-memory limits (RLIMIT_NOFILE, RLIMIT_MEMLOCK)")

MAP_COUNT_KERNEL_DEFAULT = 65530
MAP_COUNT_GOOD = 262144
SHM_FAIL, SHM_WARN = 1 * GIB, 8 * GIB
NOFILE_WARN = 65536

_SYSCTL_FIX = ("sysctl -w vm.max_map_count=1048576; persist it: echo 'vm.max_map_count = 1048576' > "
               "/etc/sysctl.d/90-max-map-count.conf")


def check_vm_max_map_count(ctx: HostContext) -> Check:
    measured = str(ctx.path("/proc/sys/vm/max_map_count"))
    text = ctx.read("/proc/sys/vm/max_map_count")
    if text is None or not text.isdigit():
        return MAP_COUNT.result("skip", f"{measured} not readable", measured=measured)
    value = int(text)
    if value <= MAP_COUNT_KERNEL_DEFAULT:
        return MAP_COUNT.result(
            "fail", f"vm.max_map_count = {value} (kernel default {MAP_COUNT_KERNEL_DEFAULT}): dataloader workers "
                    f"mapping many shards die with ENOMEM / 'cannot allocate memory'",
            fix=_SYSCTL_FIX, measured=measured, value=value)
    if value < MAP_COUNT_GOOD:
        return MAP_COUNT.result("warn", f"vm.max_map_count = {value} (< {MAP_COUNT_GOOD})", fix=_SYSCTL_FIX,
                                measured=measured, value=value)
    return MAP_COUNT.result("pass", f"vm.max_map_count = {value}", measured=measured, value=value)


def _shm_from_mounts(ctx: HostContext) -> tuple[int, int | None] | str:
    """(size, free or None) of /dev/shm from a snapshot's /proc/mounts (size= option; a tmpfs without one gets
    half of MemTotal), or the reason it can't be told. A snapshot directory's own statvfs would describe the
    disk the snapshot sits on, not the node's tmpfs."""
    mounts = ctx.read("/proc/mounts")
    if mounts is None:
        return f"{NOT_UNDER_ROOT} (no proc/mounts in {ctx.root})"
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[1] == "/dev/shm":
            match = re.search(r"(?:^|,)size=(\d+)([kmgKMG%]?)", fields[3])
            if match and match.group(2) != "%":
                scale = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[match.group(2).lower()]
                return int(match.group(1)) * scale, None
            meminfo = ctx.read("/proc/meminfo") or ""
            total = re.search(r"^MemTotal:\s+(\d+) kB", meminfo, re.M)
            if total is None:
                return f"/dev/shm mounted without a size and no proc/meminfo in {ctx.root}"
            pct = int(match.group(1)) if match else 50
            return int(total.group(1)) * 1024 * pct // 100, None
    return f"no /dev/shm mount in {ctx.path('/proc/mounts')}"


def check_shm_size(ctx: HostContext) -> Check:
    if ctx.live:
        measured = "os.statvfs('/dev/shm')"
        try:
            st = os.statvfs("/dev/shm")
        except OSError as e:
            return SHM.result("fail", f"/dev/shm not usable: {e}", fix="mount -t tmpfs -o size=16g tmpfs /dev/shm",
                              measured=measured)
        size, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    else:
        measured = str(ctx.path("/proc/mounts"))
        found = _shm_from_mounts(ctx)
        if isinstance(found, str):
            return SHM.result("skip", found, measured=measured)
        size, free = found
    evidence = f"/dev/shm {gib(size)}" + (f", {gib(free)} free" if free is not None else "")
    fix = "docker run --shm-size=16g ... (Kubernetes: an emptyDir with medium: Memory); on a host: " \
          "mount -o remount,size=16g /dev/shm"
    details = {"size_bytes": size, "free_bytes": free}
    if size < SHM_FAIL:
        return SHM.result("fail", f"{evidence} (< 1 GiB; Docker's default is 64 MiB): dataloader workers die "
                                  f"with 'bus error' or 'No space left on device'", fix=fix, measured=measured,
                          **details)
    if size < SHM_WARN:
        return SHM.result("warn", f"{evidence} (< 8 GiB)", fix=fix, measured=measured, **details)
    return SHM.result("pass", evidence, measured=measured, **details)


def _limits_from_proc(text: str) -> dict[str, tuple[float, float]]:
    """{'Max open files': (soft, hard)} from the /proc/<pid>/limits table; 'unlimited' is inf."""
    limits = {}
    for line in text.splitlines()[1:]:
        # Names have spaces ("Max cpu time"): the name ends where the first value (a number or unlimited) starts.
        match = re.match(r"(.+?)\s+(unlimited|\d+)\s+(unlimited|\d+)(?:\s|$)", line.strip())
        if match:
            limits[match.group(1)] = tuple(float("inf") if v == "unlimited" else float(v) for v in match.groups()[1:])
    return limits


def _fmt_limit(value: float, unit: str = "") -> str:
    return "unlimited" if value == float("inf") else f"{int(value)}{unit}"


def check_limits(ctx: HostContext) -> Check:
    if ctx.live:
        measured = "resource.getrlimit"
        nofile, memlock = (tuple(float("inf") if v == resource.RLIM_INFINITY else float(v)
                                 for v in resource.getrlimit(which))
                           for which in (resource.RLIMIT_NOFILE, resource.RLIMIT_MEMLOCK))
    else:
        measured = str(ctx.path("/proc/self/limits"))
        text = ctx.read("/proc/self/limits")
        if text is None:
            return LIMITS.result("skip", f"{NOT_UNDER_ROOT} (no proc/self/limits in {ctx.root})", measured=measured)
        table = _limits_from_proc(text)
        if "Max open files" not in table or "Max locked memory" not in table:
            return LIMITS.result("skip", f"{measured}: no 'Max open files' / 'Max locked memory' rows",
                                 measured=measured)
        nofile, memlock = table["Max open files"], table["Max locked memory"]
    evidence = (f"nofile soft {_fmt_limit(nofile[0])} hard {_fmt_limit(nofile[1])}; memlock soft "
                f"{_fmt_limit(memlock[0], ' B')} hard {_fmt_limit(memlock[1], ' B')}")
    problems, fixes = [], []
    if nofile[0] < NOFILE_WARN:
        problems.append(f"open files {_fmt_limit(nofile[0])} < {NOFILE_WARN} (shards, sockets and worker pipes "
                        f"run out: 'Too many open files')")
        fixes.append("ulimit -n 1048576")
    cannot_pin = memlock[0] != float("inf") and ctx.has_infiniband()
    if cannot_pin:
        problems.append("locked memory is limited on a node with RDMA devices (NCCL/verbs cannot pin buffers)")
        fixes.append("ulimit -l unlimited")
    details = {"nofile": list(nofile), "memlock": list(memlock)}
    if problems:
        fix = "; ".join(fixes) + " (persist in /etc/security/limits.conf, or LimitNOFILE=/LimitMEMLOCK= for " \
                                 "systemd services, or docker run --ulimit)"
        # Too few files is a slow failure mode; an RDMA transport that cannot pin memory fails at the first collective.
        status = "fail" if cannot_pin else "warn"
        return LIMITS.result(status, f"{evidence}: {'; '.join(problems)}", fix=fix, measured=measured, **details)
    return LIMITS.result("pass", evidence, measured=measured, **details)
