"""Host checks of the hardware: NUMA placement of the process against its NICs/HCAs/GPUs, GPU health over NVML,
and the checkpoint storage's free space and write bandwidth. No torch."""

import os
import shutil
import tempfile
import time
from pathlib import Path

from bessemer.doctor.check import Check
from bessemer.doctor.host_context import GIB, NOT_UNDER_ROOT, CheckInfo, HostContext, format_cpulist, gib, parse_cpulist
from bessemer.doctor.host_gpu import GPU_CLASSES
from bessemer.doctor.host_gpu_setup import expected_gpus_problem, gpu_modes

NUMA = CheckInfo("numa.affinity", "process CPU binding on the NUMA node(s) of its NICs, HCAs and GPUs")
GPU = CheckInfo("gpu.health", "GPU ECC errors, row remapping, retired pages, clock throttling, temperature, power")
STORAGE = CheckInfo("storage.checkpoint", "checkpoint storage: free space and fsync'd write bandwidth")

GPU_VENDORS = {"0x10de": "NVIDIA", "0x1002": "AMD"}


def _numa_node(ctx: HostContext, path: str) -> int | None:
    text = ctx.read(path)
    try:
        node = int(text) if text is not None else -1
    except ValueError:
        return None
    return node if node >= 0 else None  # -1: the firmware doesn't say


def _numa_devices(ctx: HostContext) -> dict[str, list[tuple[str, int | None]]]:
    """{"network": [(label, node)], "gpu": [...]}. When RDMA devices exist only they count as network (a
    management NIC on the other node is not what NCCL uses); otherwise every NIC with a physical device."""
    ib = {dev: _numa_node(ctx, f"/sys/class/infiniband/{dev}/device/numa_node")
          for dev in ctx.listdir("/sys/class/infiniband")}
    nics, covered = [], set()
    for ifname in ctx.listdir("/sys/class/net"):
        if not ctx.path(f"/sys/class/net/{ifname}/device").exists():
            continue  # virtual: lo, bridges, veth, ifb
        hcas = [d for d in ctx.listdir(f"/sys/class/net/{ifname}/device/infiniband") if d in ib]
        if ib and not hcas:
            continue
        covered.update(hcas)
        label = f"NIC {ifname}" + (f" ({','.join(hcas)})" if hcas else "")
        nics.append((label, _numa_node(ctx, f"/sys/class/net/{ifname}/device/numa_node")))
    nics += [(f"HCA {dev}", node) for dev, node in ib.items() if dev not in covered]
    gpus = []
    for addr in ctx.listdir("/sys/bus/pci/devices"):
        base = f"/sys/bus/pci/devices/{addr}"
        vendor = ctx.read(f"{base}/vendor")
        if ctx.read(f"{base}/class") in GPU_CLASSES and vendor in GPU_VENDORS:
            gpus.append((f"GPU {addr} ({GPU_VENDORS[vendor]})", _numa_node(ctx, f"{base}/numa_node")))
    return {"network": nics, "gpu": gpus}


def check_numa_affinity(ctx: HostContext) -> Check:
    measured = (f"{ctx.path('/sys/devices/system/node')}/node*/cpulist, {ctx.path('/sys/class/net')}/*/device/"
                f"numa_node, {ctx.path('/sys/class/infiniband')}/*/device/numa_node, "
                f"{ctx.path('/sys/bus/pci/devices')}/*/numa_node, {ctx.path('/proc/self/status')}")
    nodes = {}
    for entry in ctx.listdir("/sys/devices/system/node"):
        if entry.startswith("node") and entry[4:].isdigit():
            cpus = parse_cpulist(ctx.read(f"/sys/devices/system/node/{entry}/cpulist") or "")
            if cpus:  # memory-only nodes (CXL, HBM) have no CPUs to bind to
                nodes[int(entry[4:])] = cpus
    if len(nodes) <= 1:
        return NUMA.result("skip", f"{len(nodes) or 1} NUMA node: nothing to bind", measured=measured)
    status_text = ctx.read("/proc/self/status") or ""
    allowed_line = next((ln for ln in status_text.splitlines() if ln.startswith("Cpus_allowed_list:")), None)
    if allowed_line is None:
        return NUMA.result("skip", f"no Cpus_allowed_list in {ctx.path('/proc/self/status')}", measured=measured)
    allowed = parse_cpulist(allowed_line.partition(":")[2])
    bound = sorted(n for n, cpus in nodes.items() if cpus & allowed)
    devices = _numa_devices(ctx)
    placed = [(label, node) for kind in devices.values() for label, node in kind]
    where = "; ".join(f"{label} on node {node if node is not None else '?'}" for label, node in placed)
    binding = f"process CPUs {format_cpulist(allowed)} = node {','.join(map(str, bound))}"
    details = {"nodes": {n: format_cpulist(c) for n, c in nodes.items()}, "allowed_cpus": format_cpulist(allowed),
               "bound_nodes": bound, "devices": {k: [list(d) for d in v] for k, v in devices.items()}}
    fix = ("bind each rank to its GPU's and NIC's node: numactl --cpunodebind=N --membind=N, "
           "torchrun --numa-binding=node, or srun --cpu-bind=ldoms; `nvidia-smi topo -m` shows the affinity")
    if not placed:
        return NUMA.result("pass", f"{len(nodes)} NUMA nodes, no NIC/HCA/GPU with a physical device; {binding}",
                           measured=measured, **details)
    if len(bound) == len(nodes):
        return NUMA.result("warn", f"{len(nodes)} NUMA nodes, process not bound ({binding}): threads and pinned "
                                   f"memory land on remote nodes; {where}", fix=fix, measured=measured, **details)
    # Bound: each kind of device needs one on a bound node (ranks use one GPU and one NIC; the others are
    # other ranks'). A kind with every device remote means every transfer crosses the inter-socket link.
    remote = []
    for found in devices.values():
        known = [(label, node) for label, node in found if node is not None]
        if known and not any(node in bound for _, node in known):
            remote += [f"{label} on node {node}" for label, node in known]
    if remote:
        return NUMA.result("fail", f"{'; '.join(remote)}; {binding}", fix=fix, measured=measured, **details)
    return NUMA.result("pass", f"{binding}; {where}", measured=measured, **details)


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


STORAGE_FAIL, STORAGE_WARN = 5 * GIB, 50 * GIB
BANDWIDTH_WARN_MB_S = 200.0
PROBE_BYTES, PROBE_CHUNK = 64 * 1024**2, 4 * 1024**2


def _existing(path: Path) -> Path:
    """The path itself or its nearest existing parent (a run directory not created yet lives on its parent's disk)."""
    path = path.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def write_probe(directory: Path, nbytes: int = PROBE_BYTES, chunk: int = PROBE_CHUNK) -> float:
    """MB/s of writing `nbytes` in `chunk`s to a temp file in `directory` and fsync'ing it; the file is deleted.
    Random bytes, so compressing or deduplicating filesystems can't shortcut the write."""
    block = os.urandom(chunk)
    fd, name = tempfile.mkstemp(prefix=".bessemer-doctor-", dir=directory)
    try:
        start = time.perf_counter()
        for _ in range(nbytes // chunk):
            os.write(fd, block)
        os.fsync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(name)
    return nbytes / 1e6 / max(elapsed, 1e-9)


def check_storage_checkpoint(ctx: HostContext) -> Check:
    if not ctx.live:
        return STORAGE.result("skip", f"{NOT_UNDER_ROOT} (free space and a write probe need the live filesystem)",
                              measured="shutil.disk_usage + write probe")
    candidates = ctx.ckpt_dirs or [Path.cwd(), Path(tempfile.gettempdir())]
    seen_devices, locations = set(), []
    for path in candidates:
        existing = _existing(path)
        device = existing.stat().st_dev
        if ctx.ckpt_dirs or device not in seen_devices:  # explicit dirs are all probed; defaults once per device
            seen_devices.add(device)
            locations.append((path, existing))
    fails, warns, lines, details = [], [], [], []
    for path, existing in locations:
        free = shutil.disk_usage(existing).free
        try:
            mb_s = write_probe(existing)
        except OSError as e:
            fails.append(f"{path}: cannot write ({e.strerror or e})")
            details.append({"path": str(path), "free_bytes": free, "write_mb_s": None})
            continue
        lines.append(f"{path}: {gib(free)} free, write+fsync {mb_s:.0f} MB/s")
        details.append({"path": str(path), "free_bytes": free, "write_mb_s": round(mb_s, 1)})
        if free < STORAGE_FAIL:
            fails.append(f"{path}: only {gib(free)} free (< 5 GiB)")
        elif free < STORAGE_WARN:
            warns.append(f"{path}: {gib(free)} free (< 50 GiB)")
        if mb_s < BANDWIDTH_WARN_MB_S:
            warns.append(f"{path}: write+fsync {mb_s:.0f} MB/s (< {BANDWIDTH_WARN_MB_S:.0f} MB/s)")
    fix = ""
    if fails or warns:
        fix = ("free space or point the checkpoint dirs elsewhere (checkpoint.micro.keep / .macro.keep limit the "
               "retained steps); slow writes stall training at every save: local NVMe for the hot tier, measure "
               "with fio")
    status = "fail" if fails else "warn" if warns else "pass"
    return STORAGE.result(status, "; ".join(fails + warns + lines),
                          fix=fix, measured=f"shutil.disk_usage; write {PROBE_BYTES // 1024**2} MiB in "
                                            f"{PROBE_CHUNK // 1024**2} MiB chunks + fsync", locations=details)
