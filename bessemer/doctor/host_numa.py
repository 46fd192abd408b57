"""Host check of the process's NUMA placement against its NICs, HCAs and GPUs (numa.affinity). No torch."""

from bessemer.doctor.check import Check
from bessemer.doctor.host_context import CheckInfo, HostContext, format_cpulist, parse_cpulist
from bessemer.doctor.host_pci import GPU_CLASSES

NUMA = CheckInfo("numa.affinity", "process CPU binding on the NUMA node(s) of its NICs, HCAs and GPUs")

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
