"""Host checks of the GPUs themselves: health over NVML (ECC, row remapping, retired pages, throttling) and how
many answer (`--expect-gpus`), XID errors in the kernel log, and the persistence/ECC/MIG modes. sysfs and procfs
are read under --root; tool output comes from NVML or the command live and from a fixture file under --root.
No torch."""

import re
from typing import Any

from bessemer.doctor.check import Check
from bessemer.doctor.host_context import NOT_UNDER_ROOT, CheckInfo, HostContext
from bessemer.doctor.host_pci import nvidia_gpus, pci_address

GPU = CheckInfo("gpu.health", "GPU ECC errors, row remapping, retired pages, clock throttling, temperature, power")
XID = CheckInfo("gpu.xid", "NVIDIA XID errors in the kernel log (a GPU fallen off the bus, memory or NVLink errors)")
SETTINGS = CheckInfo("gpu.settings", "persistence mode on, ECC on and MIG off on every GPU")

SMI_Q = "nvidia_smi_q.txt"


# --- gpu.health ---------------------------------------------------------------------------------------------

_MISSING_GPU_FIX = ("load the driver and look for its errors: nvidia-smi; dmesg | grep -iE 'nvrm|xid'; lsmod | grep "
                    "nvidia; a GPU on the PCI bus that nvidia-smi does not list has fallen off the bus: drain the "
                    "node and reboot (RMA if it recurs)")


def _gpu_count_under_root(ctx: HostContext) -> Check:
    """--expect-gpus under --root: the GPUs the snapshot's `nvidia-smi -q` lists (no NVML to ask)."""
    gpus, source = gpu_modes(ctx)
    problem = expected_gpus_problem(ctx, len(gpus) if gpus is not None else None, source)
    if problem:
        return GPU.result("fail", problem, fix=_MISSING_GPU_FIX, measured=source)
    return GPU.result("pass", f"{len(gpus)} GPU(s) listed in {source} (expected {ctx.expect_gpus}); health "
                              f"{NOT_UNDER_ROOT}", measured=source)


def check_gpu_health(ctx: HostContext) -> Check:
    """Without NVML or a GPU the check skips (a CPU node is no error) unless `--expect-gpus N` says the node has
    N GPUs: then a driver that does not load, or fewer than N GPUs answering, fails."""
    if not ctx.live:
        if ctx.expect_gpus is not None:
            return _gpu_count_under_root(ctx)
        return GPU.result("skip", NOT_UNDER_ROOT, measured="NVML")
    from bessemer.doctor.nvml import HW_SLOWDOWN, SW_SLOWDOWN, NvmlUnavailable, gpu_snapshot, nvml_call, nvml_session

    try:
        with nvml_session() as nvml:
            driver = nvml_call(nvml, "nvmlSystemGetDriverVersion")
            count = nvml_call(nvml, "nvmlDeviceGetCount") or 0
            gpus = [gpu_snapshot(nvml, i) for i in range(count)]
    except NvmlUnavailable as e:
        problem = expected_gpus_problem(ctx, None, f"NVML not available: {e}")
        if problem:
            return GPU.result("fail", problem, fix=_MISSING_GPU_FIX, measured="NVML")
        return GPU.result("skip", f"NVML not available: {e}", measured="NVML")
    missing = expected_gpus_problem(ctx, len(gpus), "")
    if not gpus:
        if missing:
            return GPU.result("fail", f"{missing} (driver {driver})", fix=_MISSING_GPU_FIX, measured="NVML")
        return GPU.result("skip", f"NVML found no GPU (driver {driver})", measured="NVML")
    fails, warns, lines = [missing] if missing else [], [], []
    for g in gpus:
        tag = f"GPU{g['index']}"
        mask = g["throttle_mask"] or 0
        reasons = [r for r in g["throttle_reasons"] or [] if r != "GpuIdle"]
        ecc = {True: "on", False: "off", None: "?"}[g["ecc_enabled"]]
        lines.append(f"{tag} {g['name']} {g['temperature_c']}C {_watts(g)} SM {g['sm_clock_mhz']}/"
                     f"{g['sm_clock_max_mhz']} MHz ECC {ecc}{' throttle ' + ','.join(reasons) if reasons else ''}")
        if g["ecc_uncorrected_volatile"] or g["ecc_uncorrected_aggregate"]:
            fails.append(f"{tag} uncorrectable ECC errors: volatile {g['ecc_uncorrected_volatile']}, aggregate "
                         f"{g['ecc_uncorrected_aggregate']}")
        if g["remap_failure"] or g["remap_pending"]:
            fails.append(f"{tag} row remapping {'failed' if g['remap_failure'] else 'pending (reset needed)'}")
        if g["retired_pages_pending"]:
            fails.append(f"{tag} page retirement pending (reset needed)")
        if mask & HW_SLOWDOWN:
            fails.append(f"{tag} hardware slowdown: {','.join(r for r in reasons if r.startswith('Hw'))}")
        busy = not mask & 0x1 and (g["utilization_pct"] is None or g["utilization_pct"] > 0)
        if mask & SW_SLOWDOWN and busy:
            warns.append(f"{tag} clocks capped while busy: {','.join(r for r in reasons if r.startswith('Sw'))}")
    fixes = [_MISSING_GPU_FIX] if missing else []
    if len(fails) > len(fixes):
        fixes.append("ECC/remap/retirement: drain the node, reset the GPU (nvidia-smi -r) or reboot, RMA if the "
                     "remapping failed; HW slowdown: check cooling, fans and the chassis power (nvidia-smi -q -d "
                     "PERFORMANCE,TEMPERATURE,POWER)")
    elif warns:
        fixes.append("check airflow and the power limit (nvidia-smi -q -d POWER); the step time will be slower")
    fix = "; ".join(fixes)
    evidence = "; ".join(fails + warns + [f"driver {driver}"] + lines)
    status = "fail" if fails else "warn" if warns else "pass"
    return GPU.result(status, evidence, fix=fix, measured="NVML (pynvml)", driver=driver, gpus=gpus)


def _watts(g: dict) -> str:
    if g["power_w"] is None:
        return "power ?"
    return f"{g['power_w']:.0f}/{g['power_limit_w']:.0f} W" if g["power_limit_w"] else f"{g['power_w']:.0f} W"


# --- gpu.xid ------------------------------------------------------------------------------------------------

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


# --- gpu.settings: nvidia-smi -q / NVML modes, and the GPU count --------------------------------------------

_SMI_GPU = re.compile(r"^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$")
_MODE = {"enabled": True, "disabled": False}


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
