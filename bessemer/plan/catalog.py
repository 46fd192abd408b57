"""Accelerator catalog: memory and peak dense throughput from the vendors' data sheets. No torch."""

from dataclasses import dataclass


@dataclass(frozen=True)
class GPU:
    name: str
    memory_gb: float
    bf16_tflops: float  # dense (no 2:4 sparsity)
    fp8_tflops: float  # dense; 0 = no FP8 tensor cores
    match: tuple[str, ...]  # substrings of the device name reported by the driver (lower case)


GPUS: dict[str, GPU] = {g.name: g for g in [
    GPU("a100-40gb", 40, 312, 0, ("a100-sxm4-40gb", "a100-pcie-40gb", "a100 40gb")),
    GPU("a100-80gb", 80, 312, 0, ("a100-sxm4-80gb", "a100 80gb", "a100-80gb", "a100")),
    GPU("h100-sxm", 80, 989, 1979, ("h100 80gb hbm3", "h100-sxm", "h100 sxm")),
    GPU("h100-pcie", 80, 756, 1513, ("h100 pcie", "h100-pcie")),
    GPU("h200", 141, 989, 1979, ("h200",)),
    GPU("b200", 180, 2250, 4500, ("b200",)),
    GPU("mi300x", 192, 1307, 2615, ("mi300x",)),
]}


def match_gpu(device_name: str) -> GPU | None:
    """The catalog entry for a driver-reported name such as 'NVIDIA H100 80GB HBM3'; None if unknown."""
    name = device_name.lower()
    for gpu in GPUS.values():
        if any(m in name for m in gpu.match):
            return gpu
    return None
