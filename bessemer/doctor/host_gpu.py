"""Host checks of a GPU node's hardware: XID errors in the kernel log, PCIe links trained below their maximum,
NVLink state and error counters (the software setup is in host_gpu_setup.py). sysfs and procfs are read under
--root; tool output comes from NVML or the command live and from a fixture file under --root. No torch."""

import re
from typing import Any

from bessemer.doctor.check import Check
from bessemer.doctor.host_context import CheckInfo, HostContext

XID = CheckInfo("gpu.xid", "NVIDIA XID errors in the kernel log (a GPU fallen off the bus, memory or NVLink errors)")
PCIE = CheckInfo("gpu.pcie", "each NVIDIA GPU's PCIe link trained at its maximum width and speed")
NVLINK = CheckInfo("gpu.nvlink", "NVLink links active and free of replay, recovery and CRC errors")

NVIDIA = "0x10de"
GPU_CLASSES = {"0x030000", "0x030200"}  # VGA controller, 3D controller
NVSWITCH_CLASS = "0x068000"  # bridge, other: how an NVSwitch shows on the PCI bus
SMI_Q, SMI_NVLINK_S, SMI_NVLINK_E = "nvidia_smi_q.txt", "nvidia_smi_nvlink_s.txt", "nvidia_smi_nvlink_e.txt"


def pci_devices(ctx: HostContext, vendor: str, classes: set[str]) -> list[str]:
    """Addresses (`0000:18:00.0`) of the PCI devices of `vendor` whose class is one of `classes`."""
    return [addr for addr in ctx.listdir("/sys/bus/pci/devices")
            if ctx.read(f"/sys/bus/pci/devices/{addr}/vendor") == vendor
            and ctx.read(f"/sys/bus/pci/devices/{addr}/class") in classes]


def nvidia_gpus(ctx: HostContext) -> list[str]:
    return pci_devices(ctx, NVIDIA, GPU_CLASSES)


# --- gpu.xid -------------------------------------------------------------------------------------------------

_XID_LINE = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+)(?:, (.*))?")
# The XIDs that mean the hardware is unusable or its memory/links corrupt (NVIDIA's XID catalog): 48 double-bit
# ECC, 63/64 row remapping (pending/failed), 74 NVLink, 79 fallen off the bus, 92 high single-bit ECC rate,
# 94/95 contained/uncontained ECC, 119/120 GSP firmware timeout/error. Others (13, 31, 43...) are usually the
# application's own faults.
XID_FAIL = {48, 63, 64, 74, 79, 92, 94, 95, 119, 120}
_XID_FIX = {
    79: "XID 79: the GPU fell off the bus: drain the node, reboot, then check seating, power and PCIe (RMA if it "
        "recurs)",
    74: "XID 74: NVLink error: nvidia-smi nvlink -e, reset the GPUs (nvidia-smi -r) or reboot; RMA the baseboard if "
        "it recurs",
    119: "XID 119/120: GSP firmware error: reset the GPU or reboot and update the driver",
}
_XID_MEMORY_FIX = ("XID 48/63/64/92/94/95: memory errors: nvidia-smi -q -d ECC,ROW_REMAPPER, reset the GPU "
                   "(nvidia-smi -r) or reboot so pending remaps apply; RMA when remapping failed (64)")


def parse_xids(text: str) -> dict[tuple[int, str], dict[str, Any]]:
    """{(xid, pci): {"count": n, "message": first message}} from kernel log lines `NVRM: Xid (PCI:0000:18:00): 79,
    pid=..., GPU has fallen off the bus.`"""
    found: dict[tuple[int, str], dict[str, Any]] = {}
    for match in _XID_LINE.finditer(text):
        key = (int(match.group(2)), match.group(1))
        message = re.sub(r"^pid=[^,]*, name=[^,]*, ", "", (match.group(3) or "").strip())  # drivers >= 450 add these
        entry = found.setdefault(key, {"count": 0, "message": message})
        entry["count"] += 1
    return found


def _kernel_log(ctx: HostContext) -> tuple[str | None, str]:
    """(text, source) of the first readable kernel log: dmesg, the journal's kernel messages, /var/log/kern.log
    (under --root: ROOT/dmesg.txt, ROOT/journalctl_k.txt, ROOT/var/log/kern.log); (None, the reasons) if none is."""
    reasons = []
    sources = ((["dmesg"], "dmesg.txt"), (["journalctl", "-k", "-b", "-q", "--no-pager"], "journalctl_k.txt"))
    for argv, fixture in sources:
        out = ctx.tool_output(argv, fixture)
        if out.ok:
            return out.text, out.source
        reasons.append(out.text)
    text = ctx.read("/var/log/kern.log")
    if text is not None:
        return text, str(ctx.path("/var/log/kern.log"))
    return None, "; ".join(reasons + [f"{ctx.path('/var/log/kern.log')} not readable"])


def check_xid(ctx: HostContext) -> Check:
    text, source = _kernel_log(ctx)
    if text is None:
        return XID.result("skip", f"no kernel log readable: {source}", measured="dmesg, journalctl -k, kern.log")
    xids = parse_xids(text)
    if not xids:
        return XID.result("pass", f"no NVRM Xid lines in {source}", measured=source)
    entries = [f"XID {xid} on PCI:{pci} x{e['count']}" + (f" ({e['message'][:80]})" if e["message"] else "")
               for (xid, pci), e in sorted(xids.items())]
    codes = {xid for xid, _ in xids}
    details = {"xids": [{"xid": x, "pci": p, **e} for (x, p), e in sorted(xids.items())]}
    if codes & XID_FAIL:
        fixes = [_XID_FIX[c] for c in (79, 74) if c in codes]
        fixes += [_XID_FIX[119]] if codes & {119, 120} else []
        fixes += [_XID_MEMORY_FIX] if codes & {48, 63, 64, 92, 94, 95} else []
        return XID.result("fail", f"{sum(e['count'] for e in xids.values())} XID event(s) in {source}: "
                                  f"{'; '.join(entries)}", fix="; ".join(fixes), measured=source, **details)
    return XID.result("warn", f"{'; '.join(entries)} in {source}",
                      fix="these XIDs usually come from the application (illegal address, MMU fault): check the "
                          "job's logs at those times; see NVIDIA's XID catalog", measured=source, **details)


# --- gpu.pcie ------------------------------------------------------------------------------------------------

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


# --- gpu.nvlink ----------------------------------------------------------------------------------------------

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
