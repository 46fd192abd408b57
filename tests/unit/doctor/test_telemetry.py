"""The telemetry sampler on this host (psutil; NVML when a GPU is there) and the run monitor's wiring."""

import sys
import threading
import time
import types

import pytest

from bessemer.config import MetricsConfig, load_config
from bessemer.doctor.detectors import ThrottleDetector
from bessemer.doctor.monitor import RunMonitor
from bessemer.doctor.telemetry import TelemetrySampler, flat_scalars
from bessemer.errors import ConfigError
from bessemer.parallel.dims import Launch


def test_sampler_hands_host_samples_to_its_callbacks_and_stops():
    got, ready = [], threading.Event()

    def callback(sample):
        got.append(sample)
        if len(got) >= 2:
            ready.set()

    def broken(sample):
        raise RuntimeError("consumer bug")

    sampler = TelemetrySampler(0.05, [broken, callback]).start()
    try:
        assert ready.wait(10)
    finally:
        sampler.stop()
    s = got[-1]
    assert s["memory_available_bytes"] > 0 and s["rss_bytes"] > 0 and 0 <= s["cpu_percent"] <= 100 * 1024
    assert s["disk_read_bytes_per_s"] is None or s["disk_read_bytes_per_s"] >= 0
    assert sampler.errors and isinstance(sampler.errors[0], RuntimeError)  # and sampling went on
    for g in s.get("gpus", []):  # on a GPU host
        assert {"sm_clock_mhz", "sm_clock_max_mhz", "throttle_reasons", "temperature_c"} <= g.keys()
    assert flat_scalars({"time": 1.0, "cpu_percent": 5, "host": "h", "gpus": [{"gpu": 2, "power_w": 300.0}]}) == {
        "host/cpu_percent": 5.0, "gpu2/power_w": 300.0}


def test_run_monitor_raises_detector_alerts_through_the_trainer_callback():
    cfg = MetricsConfig(telemetry_period_s=0, straggler_window=4, leak_window=0, starved_window=3)
    alerts, samples = [], []
    monitor = RunMonitor(cfg, Launch(rank=0, local_rank=0, world_size=4),
                         alert=lambda kind, message, **f: alerts.append((kind, f)), telemetry=samples.append)
    for step in range(1, 10):
        ranks = [{"step_time_s": 0.1, "data_s": 0.2, "forward_backward_s": 0.02, "optimizer_s": 0.0,
                  "memory_bytes": 1e9} for _ in range(4)]
        ranks[1]["step_time_s"] = 0.3
        monitor.after_step(step, {"step": step, "step_time_s": 0.3}, ranks)
    monitor.close()
    kinds = [k for k, _ in alerts]
    assert kinds.count("straggler") == 1 and kinds.count("dataloader_starved") == 1
    assert next(f for k, f in alerts if k == "straggler")["rank"] == 1
    # Other ranks run no detectors (their numbers reach rank 0 through the exchange).
    other = RunMonitor(cfg, Launch(rank=1, local_rank=1, world_size=4), alert=None, telemetry=None)
    assert other.straggler is None and other.leaks == [] and other.sampler is None and other.exporter is None


def fake_pynvml() -> types.ModuleType:
    """Two GPUs as an old driver reports them: GPU 1 thermally throttled, power draw unsupported, two NVLinks up,
    and no nvmlDeviceGetCurrentClocksEventReasons (only its pre-535 name)."""
    nv = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    def unsupported(*args):
        raise NVMLError("Not Supported")

    def link_state(h, link):
        if link >= 2:
            raise NVMLError("Not Supported")
        return 1

    nv.NVMLError = NVMLError
    nv.NVML_NVLINK_MAX_LINKS, nv.NVML_CLOCK_SM, nv.NVML_TEMPERATURE_GPU = 4, 1, 0
    nv.NVML_NVLINK_ERROR_DL_REPLAY, nv.NVML_NVLINK_ERROR_DL_CRC_FLIT = 0, 2
    nv.nvmlInit = nv.nvmlShutdown = lambda: None
    nv.nvmlDeviceGetCount = lambda: 2
    nv.nvmlDeviceGetHandleByIndex = lambda i: i
    nv.nvmlDeviceGetNvLinkState = link_state
    nv.nvmlDeviceGetClockInfo = lambda h, clock: (1980, 1100)[h]
    nv.nvmlDeviceGetMaxClockInfo = lambda h, clock: 1980
    nv.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: (0, 0x40)[h]
    nv.nvmlDeviceGetTemperature = lambda h, sensor: (60, 91)[h]
    nv.nvmlDeviceGetPowerUsage = unsupported
    nv.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=10 << 30, total=141 << 30)
    nv.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=99)
    nv.nvmlDeviceGetTotalEccErrors = lambda h, kind, counter: 0
    nv.nvmlDeviceGetPcieReplayCounter = lambda h: 3
    nv.nvmlDeviceGetNvLinkErrorCounter = lambda h, link, counter: 1
    return nv


def test_nvml_sample_is_guarded_per_call_and_feeds_the_throttle_detector(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    sampler = TelemetrySampler(1.0)
    assert sampler.gpu_count == 2
    samples = [sampler.sample() for _ in range(3)]
    sampler.stop()
    g0, g1 = samples[-1]["gpus"]
    assert g1["sm_clock_mhz"] == 1100 and g1["sm_clock_max_mhz"] == 1980
    assert g1["throttle_reasons"] == ["HwThermalSlowdown"] and g0["throttle_reasons"] == []
    assert g1["power_w"] is None and g1["memory_total_bytes"] == 141 << 30 and g1["pcie_replay"] == 3
    assert g1["nvlink_errors"] == 4  # 2 links up x 2 counters
    detector = ThrottleDetector(samples=3)
    alerts = [a for s in samples for a in detector.update(s["gpus"])]
    assert [a["gpu"] for a in alerts] == [1] and "HwThermalSlowdown" in alerts[0]["message"]


def test_another_nodes_throttle_alert_waits_in_its_outbox_for_rank_0(monkeypatch):
    """Node 1's sampling rank feeds the fake driver's samples to its real throttle detector; the alert is held
    (not recorded there) until the exchange hands it to rank 0, which records it with the node that raised it."""
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    cfg = MetricsConfig(telemetry_period_s=0.01, throttle_samples=2, straggler_margin=0, leak_window=0,
                        starved_fraction=0)

    def not_here(*args, **fields):
        raise AssertionError("a rank other than 0 records no alert")

    node1 = RunMonitor(cfg, Launch(rank=2, local_rank=0, world_size=4, node=1), alert=not_here,
                       telemetry=lambda s: None)
    node1.start()
    outbox, deadline = [], time.monotonic() + 10
    try:
        while not outbox and time.monotonic() < deadline:
            time.sleep(0.01)
            node1.drain()  # what after_step does on every rank
            outbox = node1.take_outbox()
    finally:
        node1.close()
    assert node1.take_outbox() == []
    (alert,) = outbox
    assert alert["kind"] == "throttle" and alert["gpu"] == 1 and alert["node"] == 1 and alert["source_rank"] == 2
    assert alert["message"].startswith(f"node 1 ({alert['host']}, rank 2): GPU 1 throttled")
    recorded = []
    rank0 = RunMonitor(cfg, Launch(rank=0, local_rank=0, world_size=4), telemetry=None,
                       alert=lambda kind, message, **f: recorded.append((kind, message, f)))
    assert rank0.take_outbox() == []
    rank0.record_alert(alert)
    assert recorded == [("throttle", alert["message"], {k: v for k, v in alert.items()
                                                         if k not in ("kind", "message")})]


@pytest.mark.parametrize("override, message", [
    ("--fault.slow_rank=3", "fault.slow_ms > 0"),
    ("--metrics.prometheus_port=70000", "metrics.prometheus_port"),
    ("--metrics.straggler_margin=0.9", "metrics.straggler_margin must be > 1"),
    ("--metrics.telemetry_period_s=-1", "metrics.telemetry_period_s"),
    ("--metrics.leak_window=2", "metrics.leak_window"),
    ("--metrics.starved_fraction=1.5", "metrics.starved_fraction"),
])
def test_monitoring_config_is_validated(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])
    cfg = load_config(None, ["--fault.slow_rank=3", "--fault.slow_ms=250", "--metrics.straggler_margin=0",
                             "--metrics.prometheus_port=9400"])
    assert cfg.fault.slow_ms == 250 and cfg.metrics.straggler_margin == 0 and cfg.metrics.prometheus_port == 9400
