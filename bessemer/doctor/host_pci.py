"""The PCI devices of a node as sysfs lists them (under --root: the snapshot's): vendors, classes, the NVIDIA
GPUs and NVSwitches, and bus ids as sysfs spells them. No torch."""

from bessemer.doctor.host_context import HostContext

NVIDIA = "0x10de"
GPU_CLASSES = {"0x030000", "0x030200"}  # VGA controller, 3D controller
NVSWITCH_CLASS = "0x068000"  # bridge, other: how an NVSwitch shows on the PCI bus


def pci_devices(ctx: HostContext, vendor: str, classes: set[str]) -> list[str]:
    """Addresses (`0000:18:00.0`) of the PCI devices of `vendor` whose class is one of `classes`."""
    return [addr for addr in ctx.listdir("/sys/bus/pci/devices")
            if ctx.read(f"/sys/bus/pci/devices/{addr}/vendor") == vendor
            and ctx.read(f"/sys/bus/pci/devices/{addr}/class") in classes]


def nvidia_gpus(ctx: HostContext) -> list[str]:
    return pci_devices(ctx, NVIDIA, GPU_CLASSES)


def pci_address(bus_id: str) -> str:
    """`00000000:18:00.0` (nvidia-smi, NVML) as sysfs spells it: `0000:18:00.0`."""
    domain, _, rest = bus_id.partition(":")
    return f"{int(domain, 16):04x}:{rest.lower()}" if rest else bus_id.lower()
