"""The Prometheus exporter on a real loopback port: values scraped over HTTP, the port freed on close."""

import socket
import urllib.request

import pytest

from bessemer.doctor.exporter import PrometheusExporter


def scrape(port: int) -> dict[str, float]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy
    text = opener.open(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_exporter_serves_step_rank_gpu_and_alert_metrics_then_frees_its_port():
    port = free_port()
    exporter = PrometheusExporter(port).start()
    try:
        assert exporter.port == port
        exporter.observe_step({"step": 42, "loss": 2.5, "tokens_per_s": 1234.5, "mfu": 0.41, "step_time_s": 0.25},
                              rank_step_times=[0.2, 0.25], scores=[1.0, 0.8])
        exporter.observe_telemetry({"cpu_percent": 37.5, "rss_bytes": 1 << 30, "gpus": [
            {"gpu": 0, "sm_clock_mhz": 1980, "temperature_c": 61, "throttle_reasons": []},
            {"gpu": 1, "sm_clock_mhz": 1200, "temperature_c": 88, "throttle_reasons": ["HwThermalSlowdown"],
             "power_w": None}]})
        exporter.count_alert("straggler")
        exporter.count_alert("straggler")
        exporter.count_alert("throttle")
        m = scrape(port)
    finally:
        exporter.close()
    assert m["bessemer_step"] == 42 and m["bessemer_loss"] == 2.5 and m["bessemer_tokens_per_second"] == 1234.5
    assert m["bessemer_mfu"] == 0.41 and m["bessemer_step_time_seconds"] == 0.25
    assert m['bessemer_rank_step_time_seconds{rank="1"}'] == 0.25
    assert m['bessemer_rank_straggler_score{rank="1"}'] == 0.8
    assert m['bessemer_gpu_sm_clock_mhz{gpu="1"}'] == 1200 and m['bessemer_gpu_temperature_celsius{gpu="0"}'] == 61
    assert m['bessemer_gpu_throttle_reason{gpu="1",reason="HwThermalSlowdown"}'] == 1
    assert m['bessemer_gpu_throttle_reason{gpu="0",reason="HwThermalSlowdown"}'] == 0
    assert m["bessemer_host_cpu_percent"] == 37.5
    assert m['bessemer_alerts_total{kind="straggler"}'] == 2 and m['bessemer_alerts_total{kind="throttle"}'] == 1
    with pytest.raises(OSError):  # nothing listens any more
        scrape(port)
    again = PrometheusExporter(port).start()  # and the port can be served again
    try:
        assert scrape(port)["bessemer_step"] == 0
    finally:
        again.close()


def test_two_exporters_keep_separate_registries_and_a_taken_port_says_so():
    a = PrometheusExporter(0).start()
    b = PrometheusExporter(0).start()
    try:
        a.observe_step({"step": 1})
        b.observe_step({"step": 2})
        assert scrape(a.port)["bessemer_step"] == 1 and scrape(b.port)["bessemer_step"] == 2
        with pytest.raises(OSError, match="metrics.prometheus_port"):
            PrometheusExporter(a.port).start()
    finally:
        a.close()
        b.close()
