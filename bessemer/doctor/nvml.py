"""Small NVML helpers shared by the doctor's host check and the telemetry sampler. pynvml is imported lazily and
every call is wrapped: a driver too old for a function, or a GPU that doesn't support a query, yields None
instead of an exception. No torch."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# nvmlClocksEventReason* bits (named nvmlClocksThrottleReason* before driver 535; same values).
THROTTLE_REASONS: dict[int, str] = {
    0x1: "GpuIdle",
    0x2: "ApplicationsClocksSetting",
    0x4: "SwPowerCap",
    0x8: "HwSlowdown",
    0x10: "SyncBoost",
    0x20: "SwThermalSlowdown",
    0x40: "HwThermalSlowdown",
    0x80: "HwPowerBrakeSlowdown",
    0x100: "DisplayClockSetting",
}
# Clocks cut by hardware (by half or more): a GPU that overheats or a power brake asserted by the board/chassis.
HW_SLOWDOWN = 0x8 | 0x40 | 0x80
# Clocks lowered by the driver to stay inside the power or thermal budget: slow, not broken.
SW_SLOWDOWN = 0x4 | 0x20


def decode_throttle_reasons(mask: int) -> list[str]:
    """The names of the set bits of an NVML clocks-event (throttle) reason mask, lowest bit first; bits this
    table doesn't know appear as hex (`0x200`)."""
    names = []
    bit = 1
    while bit <= mask:
        if mask & bit:
            names.append(THROTTLE_REASONS.get(bit, hex(bit)))
        bit <<= 1
    return names


class NvmlUnavailable(Exception):
    """NVML could not be loaded or initialised (no driver, no GPU, pynvml missing); the message says which."""


@contextmanager
def nvml_session() -> Iterator[Any]:
    """nvmlInit ... nvmlShutdown around the block; yields the pynvml module."""
    try:
        import pynvml
    except ImportError as e:
        raise NvmlUnavailable(f"pynvml not installed ({e}): pip install nvidia-ml-py") from e
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        raise NvmlUnavailable(str(e)) from e
    try:
        yield pynvml
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def nvml_call(nvml: Any, names: str | tuple[str, ...], *args: Any) -> Any:
    """`nvml.<name>(*args)` for the first of `names` this pynvml has; None when none exists or the call raises
    NVMLError (not supported on this GPU, function missing from an old driver, no permission)."""
    for name in (names,) if isinstance(names, str) else names:
        fn: Callable | None = getattr(nvml, name, None)
        if fn is None:
            continue
        try:
            value = fn(*args)
        except nvml.NVMLError:
            return None
        return value.decode() if isinstance(value, bytes) else value
    return None


def gpu_snapshot(nvml: Any, index: int) -> dict[str, Any]:
    """One GPU's health values; a key is None when the GPU or driver cannot say."""
    h = nvml.nvmlDeviceGetHandleByIndex(index)

    def c(names: str | tuple[str, ...], *args: Any) -> Any:
        return nvml_call(nvml, names, h, *args)

    def const(name: str, default: int) -> int:  # enum values, in case an old pynvml lacks the name
        return getattr(nvml, name, default)

    uncorrected = const("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
    ecc = c("nvmlDeviceGetEccMode")  # (current, pending)
    remapped = c("nvmlDeviceGetRemappedRows")  # (corrected rows, uncorrected rows, pending, failure occurred)
    retired = c("nvmlDeviceGetRetiredPages", const("NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1))
    util = c("nvmlDeviceGetUtilizationRates")
    power_mw, limit_mw = c("nvmlDeviceGetPowerUsage"), c("nvmlDeviceGetEnforcedPowerLimit")
    reasons = c(("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"))
    return {
        "index": index,
        "name": c("nvmlDeviceGetName"),
        "ecc_enabled": bool(ecc[0]) if ecc else None,
        "ecc_uncorrected_volatile": c("nvmlDeviceGetTotalEccErrors", uncorrected, const("NVML_VOLATILE_ECC", 0)),
        "ecc_uncorrected_aggregate": c("nvmlDeviceGetTotalEccErrors", uncorrected,
                                       const("NVML_AGGREGATE_ECC", 1)),
        "remapped_rows_uncorrectable": remapped[1] if remapped else None,
        "remap_pending": bool(remapped[2]) if remapped else None,
        "remap_failure": bool(remapped[3]) if remapped else None,
        "retired_pages_dbe": len(retired) if retired is not None else None,
        "retired_pages_pending": _bool(c("nvmlDeviceGetRetiredPagesPendingStatus")),
        "sm_clock_mhz": c("nvmlDeviceGetClockInfo", const("NVML_CLOCK_SM", 1)),
        "sm_clock_max_mhz": c("nvmlDeviceGetMaxClockInfo", const("NVML_CLOCK_SM", 1)),
        "throttle_mask": reasons,
        "throttle_reasons": decode_throttle_reasons(reasons) if reasons is not None else None,
        "temperature_c": c("nvmlDeviceGetTemperature", const("NVML_TEMPERATURE_GPU", 0)),
        "power_w": power_mw / 1000 if power_mw is not None else None,
        "power_limit_w": limit_mw / 1000 if limit_mw is not None else None,
        "utilization_pct": getattr(util, "gpu", None),
    }


def _bool(value: Any) -> bool | None:
    return None if value is None else bool(value)


def gpu_settings(nvml: Any, index: int) -> dict[str, Any]:
    """One GPU's operator-set modes (gpu.settings): persistence, ECC and MIG, current and pending; None where the
    GPU or driver cannot say (MIG on a GPU without MIG support)."""
    h = nvml.nvmlDeviceGetHandleByIndex(index)
    pci = nvml_call(nvml, ("nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo"), h)
    ecc = nvml_call(nvml, "nvmlDeviceGetEccMode", h)  # (current, pending)
    mig = nvml_call(nvml, "nvmlDeviceGetMigMode", h)  # (current, pending)
    bus_id = getattr(pci, "busId", None)
    return {
        "index": index,
        "bus_id": bus_id.decode() if isinstance(bus_id, bytes) else bus_id,
        "name": nvml_call(nvml, "nvmlDeviceGetName", h),
        "persistence": _bool(nvml_call(nvml, "nvmlDeviceGetPersistenceMode", h)),
        "ecc": bool(ecc[0]) if ecc else None,
        "ecc_pending": bool(ecc[1]) if ecc else None,
        "mig": bool(mig[0]) if mig else None,
        "mig_pending": bool(mig[1]) if mig else None,
    }


# nvmlNvLinkErrorCounter_t: replays (a flit resent), recoveries (the link retrained), CRC errors on flits and data.
NVLINK_ERROR_COUNTERS = {"replay": ("NVML_NVLINK_ERROR_DL_REPLAY", 0),
                         "recovery": ("NVML_NVLINK_ERROR_DL_RECOVERY", 1),
                         "crc_flit": ("NVML_NVLINK_ERROR_DL_CRC_FLIT", 2),
                         "crc_data": ("NVML_NVLINK_ERROR_DL_CRC_DATA", 3)}


def nvlink_status(nvml: Any, index: int) -> dict[int, dict[str, Any]]:
    """{link: {"active": bool, "replay": n, "recovery": n, "crc_flit": n, "crc_data": n}} for the NVLinks this GPU
    has; empty for a GPU without NVLink (every link query unsupported). Counters are None where unsupported."""
    h = nvml.nvmlDeviceGetHandleByIndex(index)
    links = {}
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        state = nvml_call(nvml, "nvmlDeviceGetNvLinkState", h, link)
        if state is None:
            continue
        links[link] = {"active": state == 1}
        for key, (name, default) in NVLINK_ERROR_COUNTERS.items():
            links[link][key] = nvml_call(nvml, "nvmlDeviceGetNvLinkErrorCounter", h, link, getattr(nvml, name, default))
    return links
