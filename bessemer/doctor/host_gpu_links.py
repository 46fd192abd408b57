"""Host checks of how a node's GPUs are connected: PCIe links trained below their maximum, NVLink state and
error counters, the fabric manager NVSwitch systems need, and nvidia_peermem for GPUDirect RDMA. sysfs and
procfs are read under --root; tool output comes from the command live and from a fixture file under --root.
No torch."""

import re
from typing import Any

from bessemer.doctor.check import Check
from bessemer.doctor.host_context import CheckInfo, HostContext
from bessemer.doctor.host_pci import NVIDIA, NVSWITCH_CLASS, nvidia_gpus, pci_devices

PCIE = CheckInfo("gpu.pcie", "each NVIDIA GPU's PCIe link trained at its maximum width and speed")
NVLINK = CheckInfo("gpu.nvlink", "NVLink links active and free of replay, recovery and CRC errors")
FABRIC = CheckInfo("gpu.fabric", "nvidia-fabricmanager running on a node with NVSwitches")
PEERMEM = CheckInfo("gpu.peermem", "nvidia_peermem loaded where GPUs and RDMA HCAs meet (GPUDirect RDMA)")

SMI_NVLINK_S, SMI_NVLINK_E = "nvidia_smi_nvlink_s.txt", "nvidia_smi_nvlink_e.txt"


# --- gpu.pcie -----------------------------------------------------------------------------------------------

IDLE_GT_S = 2.5  # an idle NVIDIA GPU lowers its link to PCIe Gen1 to save power; it retrains under load


def _gt_s(text: str | None) -> float | None:
    match = re.match(r"([\d.]+) GT/s", text or "")
    return float(match.group(1)) if match else None


def check_pcie(ctx: HostContext) -> Check:
    measured = f"{ctx.path('/sys/bus/pci/devices')}/*/{{current,max}}_link_{{width,speed}}"
    fails, warns, lines = [], [], []
    for addr in nvidia_gpus(ctx):
        base = f"/sys/bus/pci/devices/{addr}"
        width, max_width = ctx.read(f"{base}/current_link_width"), ctx.read(f"{base}/max_link_width")
        speed, max_speed = _gt_s(ctx.read(f"{base}/current_link_speed")), _gt_s(ctx.read(f"{base}/max_link_speed"))
        if not (width or "").isdigit() or not (max_width or "").isdigit() or speed is None or max_speed is None:
            continue
        lines.append(f"{addr} x{width}/x{max_width} {speed:g}/{max_speed:g} GT/s")
        if int(width) < int(max_width):
            fails.append(f"{addr}: x{width} on a x{max_width} GPU")
        if IDLE_GT_S < speed < max_speed:
            warns.append(f"{addr}: {speed:g} GT/s of {max_speed:g} GT/s")
    if not lines:
        return PCIE.result("skip", "no NVIDIA GPU with readable link width/speed in sysfs", measured=measured)
    fix = ("reseat the GPU or its riser/cable and check the slot's BIOS setting (bifurcation, link speed); "
           "`lspci -vv -s ADDR | grep LnkSta` shows the trained link; a link at 2.5 GT/s is an idle GPU saving "
           "power and retrains under load")
    status = "fail" if fails else "warn" if warns else "pass"
    return PCIE.result(status, "; ".join(fails + warns + lines), fix=fix if fails or warns else "", measured=measured)


# --- gpu.nvlink ---------------------------------------------------------------------------------------------

_GPU_HEADER = re.compile(r"^GPU (\d+): (.*?)(?: \(UUID: [^)]*\))?$")
_LINK_STATE = re.compile(r"^\s*Link (\d+): (.*)$")
_LINK_ERROR = re.compile(r"^\s*Link (\d+): ([A-Za-z ]+?) Errors?: (\d+)")


def parse_nvlink(state_text: str, errors_text: str) -> dict[int, dict[int, dict[str, Any]]]:
    """{gpu: {link: {"active": bool, "replay": n, "recovery": n, "crc": n, ...}}} from `nvidia-smi nvlink -s`
    (`Link 3: <inactive>`) and `nvidia-smi nvlink -e` (`Link 0: Replay Errors: 0`) output."""
    gpus: dict[int, dict[int, dict[str, Any]]] = {}
    for text, pattern in ((state_text, _LINK_STATE), (errors_text, _LINK_ERROR)):
        gpu = None
        for line in text.splitlines():
            header = _GPU_HEADER.match(line.strip())
            if header:
                gpu = gpus.setdefault(int(header.group(1)), {})
                continue
            match = pattern.match(line)
            if gpu is None or not match:
                continue
            link = gpu.setdefault(int(match.group(1)), {})
            if pattern is _LINK_STATE:
                link["active"] = "inactive" not in match.group(2).lower()
            else:
                link[match.group(2).strip().lower().replace(" ", "_")] = int(match.group(3))
    return gpus


def _nvlinks(ctx: HostContext) -> tuple[dict[int, dict[int, dict[str, Any]]] | None, str]:
    if ctx.live:
        from bessemer.doctor.nvml import NvmlUnavailable, nvlink_status, nvml_call, nvml_session

        try:
            with nvml_session() as nvml:
                count = nvml_call(nvml, "nvmlDeviceGetCount") or 0
                return {i: nvlink_status(nvml, i) for i in range(count)}, "NVML"
        except NvmlUnavailable as e:
            return None, f"NVML not available: {e}"
    state = ctx.tool_output(["nvidia-smi", "nvlink", "-s"], SMI_NVLINK_S)
    errors = ctx.tool_output(["nvidia-smi", "nvlink", "-e"], SMI_NVLINK_E)
    if not state.ok and not errors.ok:
        return None, f"{state.text}; {errors.text}"
    return (parse_nvlink(state.text if state.ok else "", errors.text if errors.ok else ""),
            ", ".join(o.source for o in (state, errors) if o.ok))


def check_nvlink(ctx: HostContext) -> Check:
    gpus, source = _nvlinks(ctx)
    if gpus is None:
        return NVLINK.result("skip", source, measured="NVML / nvidia-smi nvlink -s -e")
    gpus = {g: links for g, links in gpus.items() if links}
    if not gpus:
        return NVLINK.result("skip", f"no GPU reports NVLinks ({source})", measured=source)
    # GPUs of one node have the same number of links: fewer active than a peer (or none anywhere) is a link down.
    most = max(sum(link.get("active", True) for link in links.values()) for links in gpus.values())
    fails, warns, lines = [], [], []
    for g, links in sorted(gpus.items()):
        active = [n for n, link in links.items() if link.get("active", True)]
        lines.append(f"GPU{g} {len(active)}/{len(links)} links active")
        inactive = sorted(set(links) - set(active))
        if inactive and (len(active) < most or most == 0):
            fails.append(f"GPU{g} link(s) {','.join(map(str, inactive))} inactive")
        for n, link in sorted(links.items()):
            counts = {k: v for k, v in link.items() if k != "active" and v}
            if counts:
                where = fails if counts.get("recovery") else warns
                where.append(f"GPU{g} link {n} " + " ".join(f"{k}={v}" for k, v in counts.items()))
    fix = ("nvidia-smi nvlink -s / -e to watch the links; replays are retransmissions the link absorbs, a recovery "
           "retrains the link and stalls traffic: drain the node, reset the GPUs (nvidia-smi -r) or reboot; "
           "inactive links on an NVSwitch system: check nvidia-fabricmanager; RMA the baseboard if it recurs")
    status = "fail" if fails else "warn" if warns else "pass"
    return NVLINK.result(status, "; ".join(fails + warns + lines), fix=fix if fails or warns else "",
                         measured=source, gpus=gpus)


# --- gpu.fabric ---------------------------------------------------------------------------------------------

FABRIC_MANAGER_COMM = "nv-fabricmanage"  # /proc/PID/comm keeps 15 characters of "nv-fabricmanager"


def _process_running(ctx: HostContext, comm: str) -> bool | None:
    """Whether a process named `comm` runs, from /proc/*/comm; None when the (snapshot's) /proc lists no process."""
    pids = [p for p in ctx.listdir("/proc") if p.isdigit()]
    if not pids:
        return None
    return any(ctx.read(f"/proc/{pid}/comm") == comm for pid in pids)


def check_fabric(ctx: HostContext) -> Check:
    measured = f"{ctx.path('/sys/bus/pci/devices')}/*/class, {ctx.path('/dev')}/nvidia-nvswitch*, /proc/*/comm"
    switches = pci_devices(ctx, NVIDIA, {NVSWITCH_CLASS})
    nodes = [d for d in ctx.listdir("/dev") if re.fullmatch(r"nvidia-nvswitch\d+", d)]
    if not switches and not nodes:
        return FABRIC.result("skip", "no NVSwitch (PCI class 0x068000 or /dev/nvidia-nvswitch*)", measured=measured)
    found = f"{len(switches) or len(nodes)} NVSwitch(es)" + (f" ({', '.join(switches)})" if switches else "")
    running = _process_running(ctx, FABRIC_MANAGER_COMM)
    if running is None:
        return FABRIC.result("skip", f"{found}; no process list in {ctx.path('/proc')} to find nv-fabricmanager",
                             measured=measured)
    if not running:
        return FABRIC.result(
            "fail", f"{found} but no nv-fabricmanager process: NVLink stays down and CUDA reports "
                    f"'system not yet initialized' (error 802)",
            fix="systemctl enable --now nvidia-fabricmanager (the package must match the driver version exactly); "
                "journalctl -u nvidia-fabricmanager shows why it stopped", measured=measured, nvswitches=switches)
    return FABRIC.result("pass", f"{found}; nv-fabricmanager running", measured=measured, nvswitches=switches)


# --- gpu.peermem --------------------------------------------------------------------------------------------

PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")  # the driver's module; Mellanox's older one


def _dmabuf_capable(ctx: HostContext) -> bool:
    """NCCL >= 2.19 can use DMA-BUF instead of nvidia_peermem: it needs the open GPU kernel modules and Linux 5.12."""
    version = ctx.read("/proc/driver/nvidia/version") or ""
    kernel = re.match(r"(\d+)\.(\d+)", ctx.read("/proc/sys/kernel/osrelease") or "")
    return "Open Kernel Module" in version and kernel is not None and tuple(map(int, kernel.groups())) >= (5, 12)


def check_peermem(ctx: HostContext) -> Check:
    measured = f"{ctx.path('/proc/modules')}, {ctx.path('/sys/module')}"
    hcas, gpus = ctx.listdir("/sys/class/infiniband"), nvidia_gpus(ctx)
    if not hcas or not gpus:
        return PEERMEM.result("skip", f"{len(gpus)} NVIDIA GPU(s), {len(hcas)} RDMA HCA(s): no GPUDirect RDMA path",
                              measured=measured)
    modules = ctx.read("/proc/modules")
    loaded = [m for m in PEERMEM_MODULES if ctx.path(f"/sys/module/{m}").is_dir()
              or re.search(rf"^{m} ", modules or "", re.M)]
    where = f"{len(gpus)} NVIDIA GPU(s), HCAs {','.join(hcas)}"
    if loaded:
        return PEERMEM.result("pass", f"{where}; {loaded[0]} loaded", measured=measured, module=loaded[0])
    if modules is None:
        return PEERMEM.result("skip", f"{where}; no {ctx.path('/proc/modules')} to tell the loaded modules",
                              measured=measured)
    fix = ("modprobe nvidia_peermem, and load it at boot: echo nvidia_peermem > "
           "/etc/modules-load.d/nvidia-peermem.conf (it must be built against the installed MLNX_OFED/rdma-core)")
    if _dmabuf_capable(ctx):
        return PEERMEM.result("warn", f"{where}; nvidia_peermem not loaded (the open kernel module and this kernel "
                                      f"allow DMA-BUF, which NCCL >= 2.19 uses instead)", fix=fix, measured=measured)
    return PEERMEM.result("fail", f"{where}; nvidia_peermem not loaded: NCCL cannot register GPU memory with the HCAs "
                                  f"and copies every message through host memory (no GPUDirect RDMA)",
                          fix=fix, measured=measured)
