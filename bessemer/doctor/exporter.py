"""A Prometheus endpoint for a training run (`metrics.prometheus_port`): the step's numbers, every rank's step
time, the node's telemetry and a count of alerts by kind, served at http://ADDR:PORT/metrics from rank 0.
Its own CollectorRegistry, so that two exporters (or tests) in one process never collide. No torch.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from bessemer.doctor.nvml import THROTTLE_REASONS

STEP_GAUGES = {  # record key -> (metric name, help)
    "step": ("bessemer_step", "Last completed optimizer step."),
    "loss": ("bessemer_loss", "Training loss of the last step."),
    "tokens_per_s": ("bessemer_tokens_per_second", "Tokens per second of the last step, all ranks together."),
    "mfu": ("bessemer_mfu", "Model FLOPs utilization of the last step (0..1)."),
    "step_time_s": ("bessemer_step_time_seconds", "Wall time of the last step (its slowest rank)."),
    "grad_norm": ("bessemer_grad_norm", "Global gradient L2 norm of the last step, before clipping."),
    "lr": ("bessemer_learning_rate", "Learning rate of the last step."),
    "data_wait_s": ("bessemer_data_wait_seconds", "Time rank 0 waited for batches in the last step."),
}
GPU_GAUGES = {  # telemetry key -> (metric name, help)
    "sm_clock_mhz": ("bessemer_gpu_sm_clock_mhz", "SM clock."),
    "sm_clock_max_mhz": ("bessemer_gpu_sm_clock_max_mhz", "Maximum SM clock."),
    "temperature_c": ("bessemer_gpu_temperature_celsius", "GPU temperature."),
    "power_w": ("bessemer_gpu_power_watts", "Power draw."),
    "memory_used_bytes": ("bessemer_gpu_memory_used_bytes", "Device memory in use."),
    "memory_total_bytes": ("bessemer_gpu_memory_total_bytes", "Device memory."),
    "utilization_pct": ("bessemer_gpu_utilization_percent", "Share of time a kernel was running."),
    "ecc_uncorrected_volatile": ("bessemer_gpu_ecc_uncorrected_volatile", "Uncorrectable ECC errors since boot."),
    "pcie_replay": ("bessemer_gpu_pcie_replay", "PCIe replay counter."),
    "nvlink_errors": ("bessemer_gpu_nvlink_errors", "NVLink replay, recovery and CRC errors, all links."),
}
HOST_GAUGES = {
    "cpu_percent": ("bessemer_host_cpu_percent", "Host CPU utilization."),
    "memory_used_bytes": ("bessemer_host_memory_used_bytes", "Host memory in use."),
    "memory_available_bytes": ("bessemer_host_memory_available_bytes", "Host memory available."),
    "rss_bytes": ("bessemer_process_resident_bytes", "Resident set of the sampling process."),
    "disk_read_bytes_per_s": ("bessemer_host_disk_read_bytes_per_second", "Disk reads."),
    "disk_write_bytes_per_s": ("bessemer_host_disk_write_bytes_per_second", "Disk writes."),
    "net_recv_bytes_per_s": ("bessemer_host_network_receive_bytes_per_second", "Network receive."),
    "net_sent_bytes_per_s": ("bessemer_host_network_transmit_bytes_per_second", "Network transmit."),
}


class PrometheusExporter:
    """`port` 0 binds a free port (see `.port` after `start()`); the trainer treats metrics.prometheus_port = 0
    as off before it gets here. Gauges are thread-safe: the telemetry thread may update them directly."""

    def __init__(self, port: int, addr: str = "127.0.0.1"):
        self.requested_port, self.addr = port, addr
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.step = {k: Gauge(name, doc, registry=r) for k, (name, doc) in STEP_GAUGES.items()}
        self.rank_step_time = Gauge("bessemer_rank_step_time_seconds", "Each rank's own time for the last step.",
                                    ["rank"], registry=r)
        self.rank_score = Gauge("bessemer_rank_straggler_score", "Median step time / the rank's (1 = typical).",
                                ["rank"], registry=r)
        self.gpu = {k: Gauge(name, doc, ["gpu"], registry=r) for k, (name, doc) in GPU_GAUGES.items()}
        self.gpu_throttled = Gauge("bessemer_gpu_throttle_reason", "1 for each throttle reason the GPU reports.",
                                   ["gpu", "reason"], registry=r)
        self.host = {k: Gauge(name, doc, registry=r) for k, (name, doc) in HOST_GAUGES.items()}
        self.alerts = Counter("bessemer_alerts", "Alerts raised, by kind.", ["kind"], registry=r)
        self._server = self._thread = None

    def start(self) -> "PrometheusExporter":
        try:
            self._server, self._thread = start_http_server(self.requested_port, self.addr, registry=self.registry)
        except OSError as e:
            raise OSError(f"cannot serve Prometheus metrics on {self.addr}:{self.requested_port} ({e}); choose "
                          f"another metrics.prometheus_port, or 0 to turn the exporter off") from None
        return self

    @property
    def port(self) -> int:
        return self._server.server_port if self._server is not None else self.requested_port

    def observe_step(self, record: Mapping[str, Any], rank_step_times: Sequence[float] | None = None,
                     scores: Sequence[float] | None = None) -> None:
        for key, gauge in self.step.items():
            value = record.get(key)
            if isinstance(value, (int, float)):
                gauge.set(value)
        for r, t in enumerate(rank_step_times or ()):
            self.rank_step_time.labels(rank=str(r)).set(t)
        for r, s in enumerate(scores or ()):
            self.rank_score.labels(rank=str(r)).set(s)

    def observe_telemetry(self, sample: Mapping[str, Any]) -> None:
        for key, gauge in self.host.items():
            if sample.get(key) is not None:
                gauge.set(sample[key])
        for g in sample.get("gpus", ()):
            gpu = str(g["gpu"])
            for key, gauge in self.gpu.items():
                if g.get(key) is not None:
                    gauge.labels(gpu=gpu).set(g[key])
            if g.get("throttle_reasons") is not None:
                # Every known reason gets a series (0 or 1), so a cleared reason drops back to 0.
                for reason in THROTTLE_REASONS.values():
                    self.gpu_throttled.labels(gpu=gpu, reason=reason).set(int(reason in g["throttle_reasons"]))

    def count_alert(self, kind: str) -> None:
        self.alerts.labels(kind=kind).inc()

    def close(self) -> None:
        """Stop serving and free the port."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = self._thread = None
