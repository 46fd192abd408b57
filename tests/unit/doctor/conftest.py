"""Node snapshots for `bessemer doctor --root`: the few /proc and /sys files the host checks read, written into a
directory the way the kernel lays them out (symlinks in real sysfs are plain directories here)."""

from pathlib import Path

import pytest

LIMITS = """Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max open files            {nofile}              1048576              files
Max locked memory         {memlock}            {memlock}            bytes
"""

CHRONY = """Reference ID    : A9FEA97B (169.254.169.123)
Stratum         : 4
Ref time (UTC)  : Tue Dec 02 16:00:00 2025
System time     : {offset} seconds {direction} of NTP time
Last offset     : +0.000001234 seconds
RMS offset      : 0.000012345 seconds
Frequency       : 12.345 ppm slow
Leap status     : {leap}
"""


def write(root: Path, path: str, text: str) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text + "\n")


def ib_port(root: Path, dev: str, port: int, state: str = "4: ACTIVE", phys: str = "5: LinkUp",
            rate: str = "200 Gb/sec (4X HDR)", link_layer: str = "InfiniBand", **counters: int) -> None:
    base = f"/sys/class/infiniband/{dev}/ports/{port}"
    for name, text in (("state", state), ("phys_state", phys), ("rate", rate), ("link_layer", link_layer)):
        write(root, f"{base}/{name}", text)
    for name in ("port_rcv_errors", "symbol_error", "link_downed", "port_xmit_discards",
                 "port_rcv_remote_physical_errors", "local_link_integrity_errors"):
        write(root, f"{base}/counters/{name}", str(counters.get(name, 0)))


def make_node(root: Path, healthy: bool) -> Path:
    """A two-socket node (CPUs 0-15 on node 0, 16-31 on node 1) with NIC eth0 = HCA mlx5_0 on node 1 and a
    second HCA mlx5_1 (two ports), one NVIDIA GPU per node. The broken node has the kernel's default
    vm.max_map_count, port errors and a DOWN port, and its process bound to node 0 only."""
    write(root, "/proc/sys/vm/max_map_count", "1048576" if healthy else "65530")
    write(root, "/sys/devices/system/node/node0/cpulist", "0-15")
    write(root, "/sys/devices/system/node/node1/cpulist", "16-31")
    write(root, "/proc/self/status", "Name:\tpython\nCpus_allowed_list:\t" + ("16-31" if healthy else "0-15")
          + "\nMems_allowed_list:\t0-1")
    write(root, "/sys/class/net/eth0/device/numa_node", "1")
    (root / "sys/class/net/eth0/device/infiniband/mlx5_0").mkdir(parents=True)
    (root / "sys/class/net/lo").mkdir(parents=True)
    write(root, "/sys/class/infiniband/mlx5_0/device/numa_node", "1")
    write(root, "/sys/class/infiniband/mlx5_1/device/numa_node", "1")
    ib_port(root, "mlx5_0", 1)
    if healthy:
        ib_port(root, "mlx5_1", 1)
        ib_port(root, "mlx5_1", 2)
    else:
        ib_port(root, "mlx5_1", 1, port_rcv_errors=17, symbol_error=3)
        ib_port(root, "mlx5_1", 2, state="1: DOWN", phys="3: Disabled", rate="10 Gb/sec (4X SDR)")
    for addr, node in (("0000:17:00.0", "0"), ("0000:b1:00.0", "1")):
        write(root, f"/sys/bus/pci/devices/{addr}/class", "0x030200")
        write(root, f"/sys/bus/pci/devices/{addr}/vendor", "0x10de")
        write(root, f"/sys/bus/pci/devices/{addr}/numa_node", node)
    write(root, "/proc/self/limits", LIMITS.format(nofile=1048576, memlock="unlimited"))
    write(root, "/proc/mounts", "tmpfs /dev/shm tmpfs rw,nosuid,nodev,size=67108864k 0 0")
    write(root, "/etc/hostname", "gpu-017" if healthy else "gpu-042")
    write(root, "/chronyc_tracking.txt", CHRONY.format(offset="0.000012345", direction="fast", leap="Normal"))
    write(root, "/environ", "NCCL_DEBUG=WARN\nNCCL_SOCKET_IFNAME=eth\nNCCL_IB_HCA=mlx5_0,mlx5_1")
    return root


class Snapshot:
    """The builders above, handed to tests as the `snap` fixture (test modules can't import a conftest)."""

    LIMITS, CHRONY = LIMITS, CHRONY
    write, ib_port, make_node = staticmethod(write), staticmethod(ib_port), staticmethod(make_node)


@pytest.fixture
def snap() -> type[Snapshot]:
    return Snapshot


@pytest.fixture
def healthy(tmp_path) -> Path:
    return make_node(tmp_path / "healthy", healthy=True)


@pytest.fixture
def broken(tmp_path) -> Path:
    return make_node(tmp_path / "broken", healthy=False)
