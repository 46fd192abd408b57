"""Host checks of the kernel and process limits: vm.max_map_count, /dev/shm, rlimits, clock sync. No torch."""

import os
import re
import resource

from bessemer.doctor.check import Check
from bessemer.doctor.host_context import GIB, NOT_UNDER_ROOT, CheckInfo, HostContext, gib

MAP_COUNT = CheckInfo("vm.max_map_count", "memory map areas a process may hold (mmap'd shards x dataloader workers)")
SHM = CheckInfo("shm.size", "size of /dev/shm, where dataloader workers pass batches to the trainer")
LIMITS = CheckInfo("limits", "open-file and locked-memory limits (RLIMIT_NOFILE, RLIMIT_MEMLOCK)")
CLOCK = CheckInfo("clock.sync", "system clock synchronised to NTP/PTP (timestamps and timeouts agree across nodes)")

MAP_COUNT_KERNEL_DEFAULT = 65530
MAP_COUNT_GOOD = 262144
SHM_FAIL, SHM_WARN = 1 * GIB, 8 * GIB
NOFILE_WARN = 65536
CLOCK_WARN_S, CLOCK_FAIL_S = 0.1, 1.0

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


_CHRONY_OFFSET = re.compile(r"^System time\s*:\s*([0-9.eE+-]+) seconds (fast|slow) of NTP time", re.M)
_CHRONY_LEAP = re.compile(r"^Leap status\s*:\s*(.+)$", re.M)
_CLOCK_FIX = "start an NTP/PTP daemon (systemctl enable --now chronyd) and check its sources: chronyc sources -v"


def parse_chronyc_tracking(text: str) -> tuple[float | None, str | None]:
    """(offset in seconds, positive = fast; leap status) from `chronyc tracking` output."""
    offset = _CHRONY_OFFSET.search(text)
    leap = _CHRONY_LEAP.search(text)
    seconds = None
    if offset:
        seconds = float(offset.group(1)) * (1 if offset.group(2) == "fast" else -1)
    return seconds, leap.group(1).strip() if leap else None


def check_clock_sync(ctx: HostContext) -> Check:
    chrony = ctx.tool_output(["chronyc", "tracking"], "chronyc_tracking.txt")
    if chrony.ok:
        offset, leap = parse_chronyc_tracking(chrony.text)
        if offset is None and leap is None:
            return CLOCK.result("skip", f"no 'System time' or 'Leap status' line in {chrony.source}",
                                measured=chrony.source)
        evidence = (f"offset {offset * 1000:+.3f} ms" if offset is not None else "offset unknown") + \
                   f", leap status {leap or 'unknown'} (chrony)"
        details = {"offset_s": offset, "leap_status": leap}
        if leap is not None and leap.lower() != "normal" and "insert" not in leap.lower() \
                and "delete" not in leap.lower():
            return CLOCK.result("fail", evidence, fix=_CLOCK_FIX, measured=chrony.source, **details)
        if offset is not None and abs(offset) > CLOCK_FAIL_S:
            return CLOCK.result("fail", f"{evidence}: > {CLOCK_FAIL_S:g} s", fix=_CLOCK_FIX + "; step it once: "
                                "chronyc makestep", measured=chrony.source, **details)
        if offset is not None and abs(offset) > CLOCK_WARN_S:
            return CLOCK.result("warn", f"{evidence}: > {CLOCK_WARN_S * 1000:g} ms", fix=_CLOCK_FIX,
                                measured=chrony.source, **details)
        return CLOCK.result("pass", evidence, measured=chrony.source, **details)
    timedatectl = ctx.tool_output(["timedatectl", "show", "-p", "NTPSynchronized"], "timedatectl_ntp.txt")
    if timedatectl.ok:
        value = timedatectl.text.partition("=")[2].strip().lower()
        if value in ("yes", "no"):
            status = "pass" if value == "yes" else "fail"
            return CLOCK.result(status, f"NTPSynchronized={value} (timedatectl; offset not reported)",
                                fix="" if status == "pass" else _CLOCK_FIX, measured=timedatectl.source,
                                ntp_synchronized=value == "yes")
    return CLOCK.result("skip", f"clock state unknown: {chrony.text}; {timedatectl.text}",
                        measured=f"{chrony.source}; {timedatectl.source}")


VERSIONS = CheckInfo("versions", "Python, torch, CUDA, NCCL and GPU driver versions")
MIN_PYTHON, MIN_TORCH = (3, 11), (2, 6)
NCCL_DISTS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11")
CUDA_DISTS = ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11")


def _dist_version(*names: str) -> str | None:
    import importlib.metadata

    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version.split("+")[0])[:2])


def _driver_version(ctx: HostContext) -> tuple[str | None, str]:
    """The NVIDIA kernel module's version from /proc/driver/nvidia/version (no NVML init needed), else NVML."""
    text = ctx.read("/proc/driver/nvidia/version")
    match = re.search(r"Kernel Module(?: for \w+)?\s+([\d.]+)", text or "")
    if match:
        return match.group(1), str(ctx.path("/proc/driver/nvidia/version"))
    if not ctx.live:
        return None, "no proc/driver/nvidia/version"
    from bessemer.doctor.nvml import NvmlUnavailable, nvml_call, nvml_session

    try:
        with nvml_session() as nvml:
            return nvml_call(nvml, "nvmlSystemGetDriverVersion"), "NVML"
    except NvmlUnavailable as e:
        return None, f"NVML not available: {e}"


def check_versions(ctx: HostContext) -> Check:
    """Versions of the interpreter running the doctor (under --root too: a snapshot has no interpreter to ask)."""
    import platform

    python = platform.python_version()
    torch = _dist_version("torch")  # the distribution's metadata: importing torch would take seconds
    cuda = _dist_version(*CUDA_DISTS)
    if cuda is None and torch and "+cu" in torch:
        suffix = torch.split("+cu", 1)[1]
        cuda = f"{suffix[:-1]}.{suffix[-1]}" if suffix.isdigit() and len(suffix) >= 3 else None
    nccl = _dist_version(*NCCL_DISTS)
    driver, driver_source = _driver_version(ctx)
    evidence = (f"python {python}, torch {torch or 'not installed'}, CUDA {cuda or 'none'}, NCCL {nccl or 'none'}, "
                f"driver {driver or 'none'}" + ("" if driver else f" ({driver_source})"))
    details = {"python": python, "torch": torch, "cuda": cuda, "nccl": nccl, "driver": driver}
    measured = "platform.python_version, importlib.metadata, " + driver_source
    problems = []
    if _release(python) < MIN_PYTHON:
        problems.append(f"python {python} < {'.'.join(map(str, MIN_PYTHON))}")
    if torch is None:
        problems.append("torch not installed")
    elif _release(torch) < MIN_TORCH:
        problems.append(f"torch {torch} < {'.'.join(map(str, MIN_TORCH))}")
    if problems:
        return VERSIONS.result("warn", f"{'; '.join(problems)} [{evidence}]",
                               fix="pip install -e . in a Python >= 3.11 environment (pyproject pins torch>=2.6)",
                               measured=measured, **details)
    return VERSIONS.result("pass", evidence, measured=measured, **details)


TUNING = CheckInfo("host.tuning", "IOMMU/ACS that break GPU peer-to-peer, transparent hugepages, NUMA balancing, "
                                  "CPU frequency governor")
_ACS_REDIRECT = re.compile(r"ACSCtl:.*\b(ReqRedir|CmpltRedir)\+")


def _iommu_translating(ctx: HostContext) -> list[str]:
    """GPUs whose IOMMU group translates DMA (type DMA or DMA-FQ, not identity): every peer-to-peer and GPUDirect
    transfer then goes through the IOMMU, or up to the root complex. Without group types, the kernel command
    line: intel_iommu=on / amd_iommu=on without iommu=pt."""
    from bessemer.doctor.host_gpu import nvidia_gpus

    gpus, found, typed = set(nvidia_gpus(ctx)), [], False
    for group in ctx.listdir("/sys/kernel/iommu_groups"):
        kind = ctx.read(f"/sys/kernel/iommu_groups/{group}/type")
        typed |= kind is not None
        members = gpus.intersection(ctx.listdir(f"/sys/kernel/iommu_groups/{group}/devices"))
        if kind in ("DMA", "DMA-FQ") and members:
            found += [f"GPU {addr} in IOMMU group {group} ({kind})" for addr in sorted(members)]
    cmdline = (ctx.read("/proc/cmdline") or "").split()
    if not typed and gpus and {"intel_iommu=on", "amd_iommu=on"} & set(cmdline) and "iommu=pt" not in cmdline:
        found.append("kernel command line enables the IOMMU without iommu=pt")
    return found


def _acs_redirecting(ctx: HostContext) -> list[str]:
    """PCI functions whose ACS control redirects peer requests or completions up to the root complex (from
    `lspci -vvv`, which shows ACSCtl only to root; ROOT/lspci_vvv.txt under --root)."""
    out = ctx.tool_output(["lspci", "-vvv"], "lspci_vvv.txt")
    if not out.ok:
        return []
    found, device = [], None
    for line in out.text.splitlines():
        if line and not line[0].isspace():
            device = line.split()[0]
        elif device and _ACS_REDIRECT.search(line):
            found.append(device)
    return found


def check_host_tuning(ctx: HostContext) -> Check:
    from bessemer.doctor.host_gpu import nvidia_gpus

    thp_path, balancing_path = "/sys/kernel/mm/transparent_hugepage/enabled", "/proc/sys/kernel/numa_balancing"
    measured = (f"{ctx.path('/sys/kernel/iommu_groups')}, {ctx.path('/proc/cmdline')}, lspci -vvv, "
                f"{ctx.path(thp_path)}, {ctx.path(balancing_path)}, "
                f"{ctx.path('/sys/devices/system/cpu')}/cpu*/cpufreq/scaling_governor")
    problems, fixes, seen = [], [], []
    if nvidia_gpus(ctx):
        iommu, acs = _iommu_translating(ctx), _acs_redirecting(ctx)
        if iommu:
            problems.append(f"{'; '.join(iommu)}: peer-to-peer and GPUDirect RDMA slow down or fail")
            fixes.append("add iommu=pt to the kernel command line (or turn the IOMMU off in the BIOS) and reboot")
        if acs:
            problems.append(f"ACS redirects peer-to-peer traffic to the root complex on {', '.join(acs)}")
            fixes.append("disable ACS in the BIOS, or per bridge: setpci -s BDF ECAP_ACS+0x6.w=0000 "
                         "(bare metal only; VMs with passthrough need it)")
    thp = re.search(r"\[(\w+)\]", ctx.read(thp_path) or "")
    if thp:
        seen.append(f"THP {thp.group(1)}")
        if thp.group(1) == "always":
            problems.append("transparent hugepages 'always': khugepaged compaction stalls the trainer")
            fixes.append(f"echo madvise > {thp_path} (kernel command line transparent_hugepage=madvise)")
    balancing = ctx.read(balancing_path)
    if balancing is not None:
        seen.append(f"numa_balancing {balancing}")
        if balancing != "0":
            problems.append("kernel.numa_balancing on: the kernel migrates pinned trainer pages between nodes")
            fixes.append("sysctl -w kernel.numa_balancing=0")
    governors: dict[str, int] = {}
    for cpu in ctx.listdir("/sys/devices/system/cpu"):
        governor = ctx.read(f"/sys/devices/system/cpu/{cpu}/cpufreq/scaling_governor") if cpu[3:].isdigit() else None
        if governor:
            governors[governor] = governors.get(governor, 0) + 1
    if governors:
        seen.append("governor " + ", ".join(f"{g} on {n} CPUs" for g, n in sorted(governors.items())))
        slow = {g: n for g, n in governors.items() if g != "performance"}
        if slow:
            problems.append(f"CPU governor {', '.join(sorted(slow))} on {sum(slow.values())} of "
                            f"{sum(governors.values())} CPUs: kernel launches and the data loader lag")
            fixes.append("cpupower frequency-set -g performance (or tuned-adm profile throughput-performance)")
    if not problems and not seen:
        return TUNING.result("skip", "no IOMMU, THP, NUMA balancing or cpufreq settings readable", measured=measured)
    status = "warn" if problems else "pass"
    return TUNING.result(status, "; ".join(problems + seen), fix="; ".join(fixes), measured=measured,
                         thp=thp.group(1) if thp else None, numa_balancing=balancing, governors=governors)
