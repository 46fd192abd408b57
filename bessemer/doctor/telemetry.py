"""Hardware telemetry sampled on a background thread: every GPU of the node through NVML (clocks, throttle
reasons, temperature, power, memory, utilization, error counters) when a driver is there, and the host through
psutil (CPU, memory, this process's resident set, disk and network rates). Each sample is one dict handed to
the callbacks; a query the GPU or driver does not support is None, never an exception. No torch.
"""

import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from bessemer.doctor.nvml import decode_throttle_reasons, nvml_call

Sample = dict[str, Any]

# NVLink data-link error counters (nvmlNvLinkErrorCounter_t): replay, recovery, CRC on flits and on data.
_NVLINK_COUNTERS = ("NVML_NVLINK_ERROR_DL_REPLAY", "NVML_NVLINK_ERROR_DL_RECOVERY", "NVML_NVLINK_ERROR_DL_CRC_FLIT",
                    "NVML_NVLINK_ERROR_DL_CRC_DATA")


class _Nvml:
    """An initialised NVML with a handle per GPU and the NVLinks that are up (looked up once)."""

    def __init__(self):
        import pynvml  # ImportError / NVMLError: the caller falls back to host-only telemetry

        pynvml.nvmlInit()
        self.nvml = pynvml
        count = nvml_call(pynvml, "nvmlDeviceGetCount") or 0
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        max_links = getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)
        self.links = [[link for link in range(max_links)
                       if nvml_call(pynvml, "nvmlDeviceGetNvLinkState", h, link) == 1] for h in self.handles]
        self.counters = [getattr(pynvml, name) for name in _NVLINK_COUNTERS if hasattr(pynvml, name)]

    def gpu(self, index: int) -> Sample:
        nv, h = self.nvml, self.handles[index]
        c = lambda names, *args: nvml_call(nv, names, h, *args)  # noqa: E731
        sm = getattr(nv, "NVML_CLOCK_SM", 1)
        reasons = c(("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"))
        mem, util = c("nvmlDeviceGetMemoryInfo"), c("nvmlDeviceGetUtilizationRates")
        power_mw = c("nvmlDeviceGetPowerUsage")
        nvlink = None
        if self.links[index]:
            counts = [c("nvmlDeviceGetNvLinkErrorCounter", link, counter)
                      for link in self.links[index] for counter in self.counters]
            nvlink = sum(n for n in counts if n is not None) if any(n is not None for n in counts) else None
        return {
            "gpu": index,
            "sm_clock_mhz": c("nvmlDeviceGetClockInfo", sm),
            "sm_clock_max_mhz": c("nvmlDeviceGetMaxClockInfo", sm),
            "throttle_reasons": decode_throttle_reasons(reasons) if reasons is not None else None,
            "temperature_c": c("nvmlDeviceGetTemperature", getattr(nv, "NVML_TEMPERATURE_GPU", 0)),
            "power_w": power_mw / 1000 if power_mw is not None else None,
            "memory_used_bytes": getattr(mem, "used", None),
            "memory_total_bytes": getattr(mem, "total", None),
            "utilization_pct": getattr(util, "gpu", None),
            "ecc_uncorrected_volatile": c("nvmlDeviceGetTotalEccErrors",
                                          getattr(nv, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
                                          getattr(nv, "NVML_VOLATILE_ECC", 0)),
            "pcie_replay": c("nvmlDeviceGetPcieReplayCounter"),
            "nvlink_errors": nvlink,
        }

    def close(self) -> None:
        nvml_call(self.nvml, "nvmlShutdown")


class TelemetrySampler:
    """Samples every `period_s` seconds on a daemon thread and hands each sample to every callback (from that
    thread: a callback that writes files should queue the sample for the main thread). `gpus=False` skips NVML.
    A callback that raises is remembered in `errors` and does not stop the sampling."""

    def __init__(self, period_s: float, callbacks: Sequence[Callable[[Sample], None]] = (), gpus: bool = True):
        assert period_s > 0, period_s
        import psutil  # a dependency of bessemer; imported here to keep `import bessemer.doctor` light

        self.period_s = period_s
        self.callbacks = list(callbacks)
        self.errors: list[BaseException] = []
        self.host = socket.gethostname()
        self._psutil = psutil
        self._process = psutil.Process()
        self._nvml: _Nvml | None = None
        if gpus:
            try:
                self._nvml = _Nvml()
            except Exception:  # noqa: BLE001 - no pynvml, no driver, no GPU: host telemetry only
                self._nvml = None
        self._last: tuple[float, Any, Any] | None = None  # (time, disk counters, net counters) for rates
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        psutil.cpu_percent(interval=None)  # the first call only starts the measurement
        self._rates()

    @property
    def gpu_count(self) -> int:
        return len(self._nvml.handles) if self._nvml else 0

    def sample(self) -> Sample:
        """One sample now (also what the thread calls)."""
        ps = self._psutil
        vm = ps.virtual_memory()
        out: Sample = {"time": round(time.time(), 3), "host": self.host,
                       "cpu_percent": ps.cpu_percent(interval=None),
                       "memory_used_bytes": vm.total - vm.available, "memory_available_bytes": vm.available,
                       "rss_bytes": _guard(lambda: self._process.memory_info().rss), **self._rates()}
        if self._nvml is not None:
            out["gpus"] = [self._nvml.gpu(i) for i in range(self.gpu_count)]
        return out

    def _rates(self) -> Sample:
        """Disk and network bytes per second since the previous call (None on the first)."""
        now = time.monotonic()
        disk = _guard(self._psutil.disk_io_counters)
        net = _guard(self._psutil.net_io_counters)
        last, self._last = self._last, (now, disk, net)
        keys = ("disk_read_bytes_per_s", "disk_write_bytes_per_s", "net_recv_bytes_per_s", "net_sent_bytes_per_s")
        if last is None or now <= last[0]:
            return dict.fromkeys(keys)
        dt = now - last[0]

        def rate(new: Any, old: Any, attr: str) -> float | None:
            if new is None or old is None:
                return None
            return round(max(getattr(new, attr) - getattr(old, attr), 0) / dt, 1)

        return dict(zip(keys, (rate(disk, last[1], "read_bytes"), rate(disk, last[1], "write_bytes"),
                               rate(net, last[2], "bytes_recv"), rate(net, last[2], "bytes_sent"))))

    def start(self) -> "TelemetrySampler":
        self._thread = threading.Thread(target=self._loop, name="bessemer-telemetry", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            sample = self.sample()
            for callback in self.callbacks:
                try:
                    callback(sample)
                except Exception as e:  # noqa: BLE001 - a broken consumer must not end the telemetry
                    self.errors.append(e)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 2 * self.period_s))
            self._thread = None
        if self._nvml is not None:
            self._nvml.close()
            self._nvml = None


def _guard(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:  # noqa: BLE001 - psutil raises OSError/RuntimeError variants in containers
        return None


def flat_scalars(sample: Sample) -> dict[str, float]:
    """A sample's numbers as flat names (`gpu3/sm_clock_mhz`, `host/cpu_percent`), for TensorBoard."""
    out = {f"host/{k}": float(v) for k, v in sample.items()
           if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "time"}
    for g in sample.get("gpus", []):
        for k, v in g.items():
            if k != "gpu" and isinstance(v, (int, float)) and not isinstance(v, bool):
                out[f"gpu{g['gpu']}/{k}"] = float(v)
    return out
