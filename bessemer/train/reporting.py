"""What a run tells the world: events and alerts (metrics.jsonl, the console, Prometheus counts), the step
records, and the one exchange per step of every rank's numbers (step time, sections, memory, the stop flag,
how many alerts it holds for rank 0)."""

from pathlib import Path

import torch

from bessemer.config import MetricsConfig
from bessemer.doctor.monitor import RANK_FIELDS, RunMonitor
from bessemer.parallel.dims import Launch
from bessemer.train.metrics import Console, MetricsLogger, memory_in_use_bytes, peak_memory_gib
from bessemer.train.state import TrainState


class Reporter:
    """Events raised before `open` (while checkpoints are restored) are held and written once the metrics
    logger exists; alerts also go to the console and the monitor's counters."""

    def __init__(self, launch: Launch, device: torch.device, state: TrainState):
        self.launch, self.device, self.state = launch, device, state
        self.metrics: MetricsLogger | None = None
        self.console: Console | None = None
        self.monitor: RunMonitor | None = None
        self.early: list[tuple] = []  # (name, step, fields) raised before the metrics logger exists

    def open(self, cfg: MetricsConfig, run_dir: Path, total_steps: int, resumed: bool, enabled: bool) -> None:
        """Open metrics.jsonl (appending when `resumed`), the console and the monitor; flush held events."""
        main = enabled and self.launch.rank == 0
        self.metrics = MetricsLogger(cfg, run_dir, resume=resumed, enabled=main)
        self.console = Console(cfg, total_steps, self.state.step, enabled=main)
        # Detectors on rank 0, telemetry on each node's local rank 0, the Prometheus endpoint on rank 0.
        self.monitor = RunMonitor(cfg, self.launch.rank, self.launch.local_rank, self.launch.world_size,
                                  alert=self.alert, telemetry=lambda s: self.metrics.telemetry(self.state.step, s),
                                  enabled=enabled, memory="CUDA allocated memory" if self.device.type == "cuda"
                                  else "resident memory", node=self.launch.node)

    def flush_early(self) -> None:
        """Write the events held while the metrics logger did not exist yet."""
        for name, at, fields in self.early:
            self.metrics.event(name, at, **fields)
        self.early.clear()

    def event(self, name: str, step: int, **fields) -> None:
        """An event (from the checkpointer, the cold tier, the trainer): to metrics.jsonl, held until it is
        open; alerts and skipped checkpoints also to the console."""
        if self.metrics is None:
            self.early.append((name, step, fields))
        else:
            self.metrics.event(name, step, **fields)
        if self.console is not None and name in ("alert", "checkpoint_skipped"):
            self.console.print(f"{name} at step {step}: {fields.get('message') or fields.get('reason')}")

    def alert(self, kind: str, message: str, **fields) -> None:
        self.metrics.event("alert", self.state.step, kind=kind, message=message, **fields)
        self.console.print(f"alert {kind} at step {self.state.step}: {message}")
        self.monitor.count_alert(kind)

    def exchange(self, step_time_s: float, sections: dict[str, float],
                 stop_signal: int | None) -> tuple[list[dict[str, float]], int | None]:
        """Every rank's numbers for this step (RANK_FIELDS: its own step time measured up to here, its sections,
        its memory) and the stop signal, agreed by every rank so that all of them save at the same step: one
        all_gather of a few floats per step. A rank's step time runs from the start of its step to its arrival
        here; the previous exchange lined the ranks up, so a rank that arrives late has the longest time.
        Alerts raised on other nodes since the last exchange follow in a second gather, only on the steps where
        some rank holds one: every rank learns that from the first, so all of them take part or none."""
        outbox = self.monitor.take_outbox()
        local = [step_time_s, *(sections.get(k, 0.0) for k in RANK_FIELDS[1:-1]),
                 float(memory_in_use_bytes(self.device)), float(stop_signal or 0), float(len(outbox))]
        if not self.launch.distributed:
            return [dict(zip(RANK_FIELDS, local))], stop_signal
        mine = torch.tensor(local, dtype=torch.float64, device=self.device)
        rows = [torch.empty_like(mine) for _ in range(self.launch.world_size)]
        torch.distributed.all_gather(rows, mine)
        rows = torch.stack(rows).tolist()
        stop = int(max(row[-2] for row in rows))
        if any(row[-1] for row in rows):
            self._gather_alerts(outbox)
        return [dict(zip(RANK_FIELDS, row)) for row in rows], stop or None

    def _gather_alerts(self, outbox: list[dict]) -> None:
        """Every rank's held alerts to rank 0, which records them (metrics.jsonl, console, Prometheus)."""
        every = [None] * self.launch.world_size
        torch.distributed.all_gather_object(every, outbox)
        if self.launch.rank == 0:
            for alerts in every:
                for alert in alerts:
                    self.monitor.record_alert(alert)

    def log_step(self, out: dict, ranks: list[dict[str, float]], tokens_per_step: int, flops_per_token: float,
                 peak_flops: float, data_epoch: float) -> dict:
        """The step's record (the slowest rank's time sets the pace) to metrics.jsonl, the console and the
        monitor; returns it."""
        step = self.state.step
        dt = max(r["step_time_s"] for r in ranks)  # the step takes as long as its slowest rank
        tokens_per_s = tokens_per_step / dt
        record = {"step": step, **out, "tokens_per_s": tokens_per_s, "mfu": flops_per_token * tokens_per_s / peak_flops,
                  "step_time_s": dt, "tokens_seen": self.state.tokens_seen, "data_epoch": round(data_epoch, 6),
                  "peak_mem_gib": round(peak_memory_gib(self.device), 4)}
        if self.launch.distributed:
            record["rank_step_time_s"] = [round(r["step_time_s"], 5) for r in ranks]
        self.metrics.log(record)
        self.console.update(record)
        self.monitor.after_step(step, record, ranks)
        return record

    def close(self) -> None:
        for part in (self.monitor, self.console, self.metrics):
            if part is not None:
                part.close()
