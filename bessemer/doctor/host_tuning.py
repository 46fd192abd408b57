"""Host check of the kernel and firmware settings that slow training down (host.tuning): an IOMMU that
translates GPU DMA, ACS redirecting peer-to-peer traffic, transparent hugepages, NUMA balancing, the CPU frequency
governor. No torch."""

import re

from bessemer.doctor.check import Check
from bessemer.doctor.host_context import CheckInfo, HostContext
from bessemer.doctor.host_pci import nvidia_gpus

TUNING = CheckInfo("host.tuning", "IOMMU/ACS that break GPU peer-to-peer, transparent hugepages, NUMA balancing, "
                                  "CPU frequency governor")
_ACS_REDIRECT = re.compile(r"ACSCtl:.*\b(ReqRedir|CmpltRedir)\+")


def _iommu_translating(ctx: HostContext) -> list[str]:
    """GPUs whose IOMMU group translates DMA (type DMA or DMA-FQ, not identity): every peer-to-peer and GPUDirect
    transfer then goes through the IOMMU, or up to the root complex. Without group types, the kernel command
    line: intel_iommu=on / amd_iommu=on without iommu=pt."""
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
