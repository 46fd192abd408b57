import sys
import types

import pytest

from bessemer.doctor.host_context import HostContext
from bessemer.doctor.host_gpu_health import check_gpu_health
from bessemer.doctor.nvml import decode_throttle_reasons


def test_decode_throttle_reasons():
    assert decode_throttle_reasons(0x40 | 0x1) == ["GpuIdle", "HwThermalSlowdown"]
    assert decode_throttle_reasons(0) == []
    assert decode_throttle_reasons(0x4 | 0x200) == ["SwPowerCap", "0x200"]


class NVMLError(Exception):
    pass


def fake_pynvml(gpus: list[dict], missing: tuple[str, ...] = ()) -> types.ModuleType:
    """A pynvml stand-in: one dict of values per GPU; names in `missing` are absent (an old driver) and values
    that are exceptions are raised (not supported on this GPU)."""
    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError
    m.nvmlInit = m.nvmlShutdown = lambda: None
    m.nvmlSystemGetDriverVersion = lambda: b"550.54.15"  # old pynvml returns bytes
    m.nvmlDeviceGetCount = lambda: len(gpus)
    m.nvmlDeviceGetHandleByIndex = lambda i: gpus[i]

    def getter(key):
        def get(handle, *args):
            value = handle[key]
            if isinstance(value, Exception):
                raise value
            return value
        return get

    for key in ("Name", "EccMode", "TotalEccErrors", "RemappedRows", "RetiredPages", "RetiredPagesPendingStatus",
                "ClockInfo", "MaxClockInfo", "CurrentClocksEventReasons", "CurrentClocksThrottleReasons",
                "Temperature", "PowerUsage", "EnforcedPowerLimit", "UtilizationRates"):
        if f"nvmlDeviceGet{key}" not in missing:
            setattr(m, f"nvmlDeviceGet{key}", getter(key))
    return m


def gpu(**overrides) -> dict:
    values = {"Name": "NVIDIA H100 80GB HBM3", "EccMode": (1, 1), "TotalEccErrors": 0, "RemappedRows": (0, 0, 0, 0),
              "RetiredPages": [], "RetiredPagesPendingStatus": 0, "ClockInfo": 1980, "MaxClockInfo": 1980,
              "CurrentClocksEventReasons": 0x1, "CurrentClocksThrottleReasons": 0x1, "Temperature": 41,
              "PowerUsage": 71000, "EnforcedPowerLimit": 700000, "UtilizationRates": types.SimpleNamespace(gpu=0)}
    values.update(overrides)
    return values


def gpu_check(monkeypatch, gpus, missing=()):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(gpus, missing))
    return check_gpu_health(HostContext.build(environ={}))


def test_healthy_gpus_pass(monkeypatch):
    check = gpu_check(monkeypatch, [gpu(), gpu()])
    assert check.status == "pass", check.evidence
    assert "driver 550.54.15" in check.evidence and "GPU1 NVIDIA H100 80GB HBM3 41C 71/700 W" in check.evidence
    assert check.details["gpus"][0]["throttle_reasons"] == ["GpuIdle"]


@pytest.mark.parametrize("overrides, status, words", [
    ({"TotalEccErrors": 2}, "fail", "uncorrectable ECC"),
    ({"RemappedRows": (0, 1, 0, 1)}, "fail", "row remapping failed"),
    ({"RemappedRows": (0, 1, 1, 0)}, "fail", "pending"),
    ({"CurrentClocksEventReasons": 0x40}, "fail", "HwThermalSlowdown"),
    ({"CurrentClocksEventReasons": 0x80 | 0x8}, "fail", "HwPowerBrakeSlowdown"),
    ({"CurrentClocksEventReasons": 0x20, "UtilizationRates": types.SimpleNamespace(gpu=97)}, "warn",
     "SwThermalSlowdown"),
    ({"CurrentClocksEventReasons": 0x4 | 0x1}, "pass", "SwPowerCap"),  # idle: a power cap costs nothing
])
def test_gpu_problems(monkeypatch, overrides, status, words):
    check = gpu_check(monkeypatch, [gpu(), gpu(**overrides)])
    assert check.status == status, check.evidence
    assert words in check.evidence


def test_old_driver_and_unsupported_queries_do_not_crash(monkeypatch):
    missing = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetRemappedRows")
    check = gpu_check(monkeypatch, [gpu(CurrentClocksThrottleReasons=0x40, TotalEccErrors=NVMLError("Not Supported"))],
                      missing)
    assert check.status == "fail" and "HwThermalSlowdown" in check.evidence  # the pre-535 name is used
    assert check.details["gpus"][0]["remap_failure"] is None
    assert check.details["gpus"][0]["ecc_uncorrected_volatile"] is None


def test_no_nvml_skips(monkeypatch):
    m = fake_pynvml([])

    def fail():
        raise NVMLError("NVML Shared Library Not Found")

    m.nvmlInit = fail
    monkeypatch.setitem(sys.modules, "pynvml", m)
    check = check_gpu_health(HostContext.build(environ={}))
    assert check.status == "skip" and check.evidence == "NVML not available: NVML Shared Library Not Found"
