"""Host check of the software stack's versions: Python, torch, CUDA, NCCL and the GPU driver (versions). Torch
is never imported: its version comes from the installed distribution's metadata."""

import re

from bessemer.doctor.check import Check
from bessemer.doctor.host_context import CheckInfo, HostContext

VERSIONS = CheckInfo("versions", "Python, torch, CUDA, NCCL and GPU driver versions")
MIN_PYTHON, MIN_TORCH = (3, 11), (2, 6)
NCCL_DISTS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11")
CUDA_DISTS = ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11")


def _dist_version(*names: str) -> str | None:
    import importlib.metadata

    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version.split("+")[0])[:2])


def _driver_version(ctx: HostContext) -> tuple[str | None, str]:
    """The NVIDIA kernel module's version from /proc/driver/nvidia/version (no NVML init needed), else NVML."""
    text = ctx.read("/proc/driver/nvidia/version")
    match = re.search(r"Kernel Module(?: for \w+)?\s+([\d.]+)", text or "")
    if match:
        return match.group(1), str(ctx.path("/proc/driver/nvidia/version"))
    if not ctx.live:
        return None, "no proc/driver/nvidia/version"
    from bessemer.doctor.nvml import NvmlUnavailable, nvml_call, nvml_session

    try:
        with nvml_session() as nvml:
            return nvml_call(nvml, "nvmlSystemGetDriverVersion"), "NVML"
    except NvmlUnavailable as e:
        return None, f"NVML not available: {e}"


def check_versions(ctx: HostContext) -> Check:
    """Versions of the interpreter running the doctor (under --root too: a snapshot has no interpreter to ask)."""
    import platform

    python = platform.python_version()
    torch = _dist_version("torch")  # the distribution's metadata: importing torch would take seconds
    cuda = _dist_version(*CUDA_DISTS)
    if cuda is None and torch and "+cu" in torch:
        suffix = torch.split("+cu", 1)[1]
        cuda = f"{suffix[:-1]}.{suffix[-1]}" if suffix.isdigit() and len(suffix) >= 3 else None
    nccl = _dist_version(*NCCL_DISTS)
    driver, driver_source = _driver_version(ctx)
    evidence = (f"python {python}, torch {torch or 'not installed'}, CUDA {cuda or 'none'}, NCCL {nccl or 'none'}, "
                f"driver {driver or 'none'}" + ("" if driver else f" ({driver_source})"))
    details = {"python": python, "torch": torch, "cuda": cuda, "nccl": nccl, "driver": driver}
    measured = "platform.python_version, importlib.metadata, " + driver_source
    problems = []
    if _release(python) < MIN_PYTHON:
        problems.append(f"python {python} < {'.'.join(map(str, MIN_PYTHON))}")
    if torch is None:
        problems.append("torch not installed")
    elif _release(torch) < MIN_TORCH:
        problems.append(f"torch {torch} < {'.'.join(map(str, MIN_TORCH))}")
    if problems:
        return VERSIONS.result("warn", f"{'; '.join(problems)} [{evidence}]",
                               fix="pip install -e . in a Python >= 3.11 environment (pyproject pins torch>=2.6)",
                               measured=measured, **details)
    return VERSIONS.result("pass", evidence, measured=measured, **details)
