"""Host checks of a GPU node's software setup: the fabric manager NVSwitch systems need, nvidia_peermem for
GPUDirect RDMA, the persistence/ECC/MIG modes, and how many GPUs answer (`--expect-gpus`). No torch."""

import re
from typing import Any

from bessemer.doctor.check import Check
from bessemer.doctor.host_context import CheckInfo, HostContext
from bessemer.doctor.host_gpu import NVIDIA, NVSWITCH_CLASS, SMI_Q, nvidia_gpus, pci_devices

FABRIC = CheckInfo("gpu.fabric", "nvidia-fabricmanager running on a node with NVSwitches")
PEERMEM = CheckInfo("gpu.peermem", "nvidia_peermem loaded where GPUs and RDMA HCAs meet (GPUDirect RDMA)")
SETTINGS = CheckInfo("gpu.settings", "persistence mode on, ECC on and MIG off on every GPU")

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


# --- nvidia-smi -q / NVML: modes and GPU count -----------------------------------------------------------------

_SMI_GPU = re.compile(r"^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$")
_MODE = {"enabled": True, "disabled": False}


def pci_address(bus_id: str) -> str:
    """`00000000:18:00.0` (nvidia-smi, NVML) as sysfs spells it: `0000:18:00.0`."""
    domain, _, rest = bus_id.partition(":")
    return f"{int(domain, 16):04x}:{rest.lower()}" if rest else bus_id.lower()


def parse_nvidia_smi_q(text: str) -> list[dict[str, Any]]:
    """One dict per GPU block of `nvidia-smi -q` (bus_id, name, persistence, ecc, ecc_pending, mig, mig_pending;
    None where it says N/A). Nested sections (`ECC Mode` / `Current`) are keyed by their path."""
    gpus: list[dict[str, Any]] = []
    values: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in text.splitlines():
        header = _SMI_GPU.match(line.strip())
        if header and not line.startswith(" "):
            values, stack = {}, []
            gpus.append({"bus_id": pci_address(header.group(1)), "values": values})
            continue
        if not gpus or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key, sep, value = line.strip().partition(" : ")
        if not sep:
            stack.append((indent, key.lower()))
            continue
        values["/".join([s for _, s in stack] + [key.strip().lower()])] = value.strip()
    for i, gpu in enumerate(gpus):
        v = gpu.pop("values")
        gpu.update(index=i, name=v.get("product name"), persistence=_mode(v, "persistence mode"),
                   ecc=_mode(v, "ecc mode/current"), ecc_pending=_mode(v, "ecc mode/pending"),
                   mig=_mode(v, "mig mode/current"), mig_pending=_mode(v, "mig mode/pending"))
    return gpus


def _mode(values: dict[str, str], key: str) -> bool | None:
    """Enabled/Disabled as True/False; N/A (a GPU without the feature) or absent as None."""
    return _MODE.get(values.get(key, "").lower())


def gpu_modes(ctx: HostContext) -> tuple[list[dict[str, Any]] | None, str]:
    """(one dict per GPU from NVML, live; from ROOT/nvidia_smi_q.txt under --root; source) or (None, the reason)."""
    if not ctx.live:
        out = ctx.tool_output(["nvidia-smi", "-q"], SMI_Q)
        if not out.ok:
            return None, out.text
        return parse_nvidia_smi_q(out.text), out.source
    from bessemer.doctor.nvml import NvmlUnavailable, gpu_settings, nvml_call, nvml_session

    try:
        with nvml_session() as nvml:
            count = nvml_call(nvml, "nvmlDeviceGetCount") or 0
            gpus = [gpu_settings(nvml, i) for i in range(count)]
    except NvmlUnavailable as e:
        return None, f"NVML not available: {e}"
    for g in gpus:
        g["bus_id"] = pci_address(g["bus_id"]) if g["bus_id"] else None
    return gpus, "NVML (pynvml)"


def check_settings(ctx: HostContext) -> Check:
    gpus, source = gpu_modes(ctx)
    if gpus is None:
        return SETTINGS.result("skip", source, measured="NVML / nvidia-smi -q")
    if not gpus:
        return SETTINGS.result("skip", f"no GPU in {source}", measured=source)
    fails, warns, fixes = [], [], []
    for g in gpus:
        tag = f"GPU{g['index']} {g['bus_id'] or ''}".strip()
        if g["persistence"] is False:
            fails.append(f"{tag} persistence mode off (the driver unloads between jobs: slow starts, lost settings)")
            fixes.append("systemctl enable --now nvidia-persistenced (or nvidia-smi -pm 1)")
        if g["ecc"] is False:
            pending = " (on after the next reset)" if g["ecc_pending"] else ""
            fails.append(f"{tag} ECC off{pending}: memory errors corrupt training silently")
            fixes.append(f"nvidia-smi -i {g['index']} -e 1, then reset the GPU (nvidia-smi -i {g['index']} -r) "
                         f"or reboot")
        if g["mig"]:
            warns.append(f"{tag} MIG mode on: a process sees one GPU instance, not the whole GPU")
            fixes.append(f"nvidia-smi -i {g['index']} -mig 0, then reset the GPU (nvidia-smi -i {g['index']} -r)")
    summary = f"{len(gpus)} GPU(s) from {source}: persistence " + _modes(gpus, "persistence") + \
              ", ECC " + _modes(gpus, "ecc") + ", MIG " + _modes(gpus, "mig")
    status = "fail" if fails else "warn" if warns else "pass"
    return SETTINGS.result(status, "; ".join(fails + warns + [summary]), fix="; ".join(dict.fromkeys(fixes)),
                           measured=source, gpus=gpus)


def _modes(gpus: list[dict[str, Any]], key: str) -> str:
    names = {True: "on", False: "off", None: "n/a"}
    counts = {name: sum(names[g[key]] == name for g in gpus) for name in names.values()}
    return "/".join(f"{n} {name}" for name, n in counts.items() if n)


def expected_gpus_problem(ctx: HostContext, answering: int | None, why: str) -> str | None:
    """With `--expect-gpus N`: the failure when fewer than N GPUs answer (`answering` None: the driver or NVML
    did not load, `why` says how); None when enough answer or no count was asked for."""
    if ctx.expect_gpus is None or (answering is not None and answering >= ctx.expect_gpus):
        return None
    on_bus = len(nvidia_gpus(ctx))
    seen = f"{answering} of {ctx.expect_gpus} expected GPUs answer" if answering is not None else \
        f"none of {ctx.expect_gpus} expected GPUs answer ({why})"
    return f"{seen}; {on_bus} NVIDIA GPU(s) on the PCI bus"
