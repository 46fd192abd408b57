"""What a training run watches while it trains, built from `[metrics]`: the detectors (straggler, memory leak,
data-loader starvation on rank 0; GPU throttling on each node's sampling rank), the telemetry sampler (local
rank 0 of each node) and the Prometheus exporter (rank 0). The trainer hands it each step's numbers from every
rank and gets alerts back through its own `alert(kind, message, **fields)`. An alert raised on another node
waits in that rank's outbox until the trainer's next exchange (every metrics.log_interval steps) carries it to rank 0
(`take_outbox` there, `record_alert` on rank 0), so every node's alerts reach metrics.jsonl. No torch.
"""

import sys
from collections import deque
from collections.abc import Callable, Mapping, Sequence

from bessemer.config import MetricsConfig
from bessemer.doctor.detectors import LeakDetector, StarvationDetector, StragglerDetector, ThrottleDetector
from bessemer.parallel.dims import Launch

# What every rank contributes for each step to the exchange at each log step, in this order (seconds, and bytes).
RANK_FIELDS = ("step_time_s", "data_s", "forward_backward_s", "optimizer_s", "memory_bytes")


class RunMonitor:
    """`launch` places this rank (its node is recorded with the alerts it raises). `alert(kind, message,
    **fields)` records an alert (rank 0's metrics.jsonl and console); `telemetry(sample)` records a telemetry
    sample. Both are called from the training thread only: samples taken by the sampler thread wait in a queue
    until the next `after_step`. `memory` names what memory_bytes measures."""

    def __init__(self, cfg: MetricsConfig, launch: Launch, alert: Callable[..., None],
                 telemetry: Callable[[dict], None], enabled: bool = True, memory: str = "memory"):
        rank, local_rank, world_size = launch.rank, launch.local_rank, launch.world_size
        self.cfg, self.rank, self.node = cfg, rank, launch.node
        self._alert, self._telemetry = alert, telemetry
        main = enabled and rank == 0
        self.straggler = (StragglerDetector(cfg.straggler_margin, cfg.straggler_window, cfg.straggler_fraction)
                          if main and world_size > 1 and cfg.straggler_margin > 0 else None)
        self.leaks = ([LeakDetector(cfg.leak_window, cfg.leak_warmup, cfg.leak_min_mib * 2 ** 20,
                                    name=memory) for _ in range(world_size)]
                      if main and cfg.leak_window > 0 else [])
        self.starvation = (StarvationDetector(cfg.starved_fraction, cfg.starved_window)
                           if main and cfg.starved_fraction > 0 else None)
        self._serve = main and cfg.prometheus_port > 0
        self._sample = enabled and local_rank == 0 and cfg.telemetry_period_s > 0
        self.throttle = (ThrottleDetector(samples=cfg.throttle_samples, peer_ratio=cfg.throttle_peer_ratio,
                                          peer_window=2 * cfg.throttle_samples) if self._sample else None)
        self.exporter = self.sampler = None
        self._samples: deque[dict] = deque()  # appended by the sampler thread, drained by the training thread
        self._outbox: list[dict] = []  # alerts raised on a rank other than 0, not yet sent to rank 0

    def start(self) -> None:
        """Serve Prometheus and start sampling (when configured); `close` stops both."""
        if self._serve and self.exporter is None:
            from bessemer.doctor.exporter import PrometheusExporter

            self.exporter = PrometheusExporter(self.cfg.prometheus_port, self.cfg.prometheus_addr).start()
        if self._sample and self.sampler is None:
            from bessemer.doctor.telemetry import TelemetrySampler

            consumers = [self._samples.append] + ([self.exporter.observe_telemetry] if self.exporter else [])
            self.sampler = TelemetrySampler(self.cfg.telemetry_period_s, consumers).start()

    def after_step(self, step: int, record: Mapping, ranks: Sequence[Mapping[str, float]]) -> None:
        """`ranks[r]`: rank r's RANK_FIELDS for this step (rank 0 holds every rank's; other ranks pass their own,
        which only the telemetry uses)."""
        if self.straggler is not None:
            sections = {name.removesuffix("_s"): [r[name] for r in ranks]
                        for name in ("data_s", "forward_backward_s", "optimizer_s")}
            for a in self.straggler.update(step, [r["step_time_s"] for r in ranks], sections):
                self._raise(a)
        for r, (leak, row) in enumerate(zip(self.leaks, ranks)):
            for a in leak.update(step, row["memory_bytes"], rank=r):
                self._raise(a)
        if self.starvation is not None:
            slowest = max(range(len(ranks)), key=lambda r: ranks[r]["data_s"])
            for a in self.starvation.update(ranks[slowest]["data_s"], record["step_time_s"], rank=slowest):
                self._raise(a)
        if self.exporter is not None:
            self.exporter.observe_step(record, [r["step_time_s"] for r in ranks],
                                       self.straggler.scores() if self.straggler else None)
        self.drain()

    def drain(self) -> None:
        """Record the telemetry samples taken since the last call and run the throttle detector on them."""
        while self._samples:
            sample = self._samples.popleft()
            self._telemetry(sample)
            if self.throttle is not None and sample.get("gpus"):
                for a in self.throttle.update(sample["gpus"]):
                    self._raise({**a, "host": sample["host"], "node": self.node})

    def _raise(self, alert: dict) -> None:
        if self.rank == 0:
            self.record_alert(alert)
            return
        # Another node: metrics.jsonl is rank 0's. Say it on this node's stderr now, send it with the next exchange.
        print(f"alert {alert['kind']} on {alert.get('host', '')} (rank {self.rank}): {alert['message']}",
              file=sys.stderr, flush=True)
        self._outbox.append({**alert, "source_rank": self.rank,
                             "message": f"node {self.node} ({alert.get('host', '?')}, rank {self.rank}): "
                                        f"{alert['message']}"})

    def take_outbox(self) -> list[dict]:
        """The alerts raised here since the last call, for the exchange to carry to rank 0 (empty on rank 0)."""
        out, self._outbox = self._outbox, []
        return out

    def record_alert(self, alert: dict) -> None:
        """Rank 0: record an alert (its own or one another rank sent) through the trainer's callback."""
        fields = {k: v for k, v in alert.items() if k not in ("kind", "message")}
        self._alert(alert["kind"], alert["message"], **fields)

    def count_alert(self, kind: str) -> None:
        if self.exporter is not None:
            self.exporter.count_alert(kind)

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
            self.sampler = None
        self.drain()
        if self.exporter is not None:
            self.exporter.close()
            self.exporter = None
