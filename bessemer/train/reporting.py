"""What a run tells the world: events and alerts (metrics.jsonl, the console, Prometheus counts) and the step
records.

A step does not wait for the device. Its numbers wait there (train/step.py) and, with each rank's step time,
sections and memory, are pulled every `metrics.log_interval` steps in one exchange — one all_gather for the
whole interval — then settled (guards) and written step by step, so metrics.jsonl still holds every step. Steps
with a checkpoint due, the last step and a fault-injection step flush too. Between flushes each step ends with
an all-reduce of one number, the stop flag, which no rank reads before the next flush: it lines the ranks up
(a rank that arrives late has the longest step time) and makes every rank stop at the same step."""

import math
import time
from pathlib import Path

import torch

from bessemer.config import MetricsConfig
from bessemer.doctor.monitor import RANK_FIELDS, RunMonitor
from bessemer.parallel.dims import Launch
from bessemer.train.metrics import Console, MetricsLogger, memory_in_use_bytes, peak_memory_gib
from bessemer.train.state import TrainState
from bessemer.train.step import DEVICE_FIELDS, StepOutput


class StepClock:
    """A rank's time per step, from its start to its arrival at the end-of-step line-up. On CPU the host's clock
    (collectives block the host there); on CUDA a pair of events on the stream, read at the flush: the host runs
    ahead of the GPU, so its clock says little about one step."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def mark(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, start, end) -> float:
        """After the device has caught up (the flush synchronizes)."""
        return start.elapsed_time(end) / 1000 if self.cuda else end - start


class Reporter:
    """Events raised before `open` (while checkpoints are restored) are held and written once the metrics
    logger exists; alerts also go to the console and the monitor's counters."""

    def __init__(self, launch: Launch, device: torch.device, state: TrainState):
        self.launch, self.device, self.state = launch, device, state
        self.metrics: MetricsLogger | None = None
        self.console: Console | None = None
        self.monitor: RunMonitor | None = None
        self.early: list[tuple] = []  # (name, step, fields) raised before the metrics logger exists
        self.clock = StepClock(device)
        self.pending: list[tuple[StepOutput, list[float]]] = []  # steps since the last flush, with host numbers
        self._marks: list[tuple] = []  # (start, end) of each pending step
        self._stop = torch.zeros((), dtype=torch.float64, device=device)  # max stop signal seen by any rank
        self._settling: int | None = None  # the step whose record is being settled: its alerts carry it

    def open(self, cfg: MetricsConfig, run_dir: Path, total_steps: int, resumed: bool, enabled: bool) -> None:
        """Open metrics.jsonl (appending when `resumed`), the console and the monitor; flush held events."""
        main = enabled and self.launch.rank == 0
        self.metrics = MetricsLogger(cfg, run_dir, resume=resumed, enabled=main)
        self.console = Console(cfg, total_steps, self.state.step, enabled=main)
        # Detectors on rank 0, telemetry on each node's local rank 0, the Prometheus endpoint on rank 0.
        self.monitor = RunMonitor(cfg, self.launch, alert=self.alert,
                                  telemetry=lambda s: self.metrics.telemetry(self.state.step, s), enabled=enabled,
                                  memory="CUDA allocated memory" if self.device.type == "cuda" else "resident memory")

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
        step = self.state.step if self._settling is None else self._settling
        self.metrics.event("alert", step, kind=kind, message=message, **fields)
        self.console.print(f"alert {kind} at step {step}: {message}")
        self.monitor.count_alert(kind)

    def start_step(self):
        """The step's start mark (StepClock)."""
        return self.clock.mark()

    def end_step(self, result: StepOutput, start, stop_signal: int | None) -> None:
        """Keep the step's numbers until the flush; agree on the stop flag with the other ranks (no host read)."""
        end = self.clock.mark()
        sections = result.sections
        self.pending.append((result, [*(sections.get(k, 0.0) for k in RANK_FIELDS[1:-1]),
                                      float(memory_in_use_bytes(self.device)), peak_memory_gib(self.device)]))
        self._marks.append((start, end))
        flag = torch.full((), float(stop_signal or 0), dtype=torch.float64, device=self.device)
        if self.launch.distributed:
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        torch.maximum(self._stop, flag, out=self._stop)

    def flush(self, settle, tokens_per_step: int, flops_per_token: float,
              peak_flops: float) -> tuple[list[dict], int | None]:
        """Pull the pending steps' numbers in one exchange, settle each step (`settle(result, device numbers,
        domain losses) -> its record`), write its record; returns the records and the agreed stop signal."""
        if self.clock.cuda:
            torch.cuda.synchronize(self.device)  # the log step's one wait: the events and numbers are final
        self.monitor.drain()  # telemetry alerts raised on this node since the last flush travel with this one
        outbox = self.monitor.take_outbox()
        rows = self._local_rows(len(outbox))
        if self.launch.distributed:
            every = [torch.empty_like(rows) for _ in range(self.launch.world_size)]
            torch.distributed.all_gather(every, rows)
            rows = torch.stack(every)  # (world, steps, columns)
        else:
            rows = rows.unsqueeze(0)
        table = rows.tolist()
        stop = int(table[0][0][-1])
        if any(rank[-1][-2] for rank in table):
            self._gather_alerts(outbox)
        records = []
        for i, (result, _) in enumerate(self.pending):
            records.append(self._settle_step(i, result, table, settle, tokens_per_step, flops_per_token,
                                             peak_flops))
        self.pending.clear()
        self._marks.clear()
        return records, stop or None

    def _local_rows(self, outbox_len: int) -> torch.Tensor:
        """This rank's (steps, columns) float64 table: DEVICE_FIELDS, the domain loss totals, the step time, the
        sections and memory (RANK_FIELDS[1:]), peak memory, the outbox size and the stop flag."""
        device_part = [torch.cat([r.device] + ([r.domain_totals.flatten()] if r.domain_totals is not None else []))
                       for r, _ in self.pending]
        host = [[self.clock.seconds(start, end), *numbers, float(outbox_len)]
                for (start, end), (_, numbers) in zip(self._marks, self.pending)]
        stop = self._stop.expand(len(host), 1)
        return torch.cat([torch.stack(device_part),
                          torch.tensor(host, dtype=torch.float64, device=self.device), stop], dim=1)

    def _settle_step(self, i: int, result: StepOutput, table: list, settle, tokens_per_step: int,
                     flops_per_token: float, peak_flops: float) -> dict:
        n = len(DEVICE_FIELDS)
        rows = [rank[i] for rank in table]
        device = dict(zip(DEVICE_FIELDS, rows[0][:n]))  # the same on every rank, but for the loss share
        device["loss_share"] = sum(row[0] for row in rows)
        domain_loss = None
        if result.domain_totals is not None:
            d = result.domain_totals.shape[1]
            sums = [sum(row[n + j] for row in rows) for j in range(d)]
            counts = [sum(row[n + d + j] for row in rows) for j in range(d)]
            names = [k for k in result.host["domain_tokens_share"]]
            domain_loss = {name: round(s / c, 6) for name, s, c in zip(names, sums, counts)
                           if c > 0 and math.isfinite(s)}
            n += 2 * d
        ranks = [dict(zip(RANK_FIELDS, row[n:n + len(RANK_FIELDS)])) for row in rows]
        self._settling = result.step
        try:
            out = settle(result, device, domain_loss)
            return self.log_step(result, out, ranks, rows[self.launch.rank][n + len(RANK_FIELDS)],
                                 tokens_per_step, flops_per_token, peak_flops)
        finally:
            self._settling = None

    def _gather_alerts(self, outbox: list[dict]) -> None:
        """Every rank's held alerts to rank 0, which records them (metrics.jsonl, console, Prometheus)."""
        every = [None] * self.launch.world_size
        torch.distributed.all_gather_object(every, outbox)
        if self.launch.rank == 0:
            for alerts in every:
                for alert in alerts:
                    self.monitor.record_alert(alert)

    def log_step(self, result: StepOutput, out: dict, ranks: list[dict[str, float]], peak_mem_gib: float,
                 tokens_per_step: int, flops_per_token: float, peak_flops: float) -> dict:
        """The step's record (the slowest rank's time sets the pace) to metrics.jsonl, the console and the
        monitor; returns it."""
        dt = max(r["step_time_s"] for r in ranks)  # the step takes as long as its slowest rank
        tokens_per_s = tokens_per_step / dt
        record = {"step": result.step, **out, "tokens_per_s": tokens_per_s,
                  "mfu": flops_per_token * tokens_per_s / peak_flops, "step_time_s": dt,
                  "tokens_seen": result.host["tokens_seen"], "data_epoch": round(result.host["data_epoch"], 6),
                  "peak_mem_gib": round(peak_mem_gib, 4)}
        if self.launch.distributed:
            record["rank_step_time_s"] = [round(r["step_time_s"], 5) for r in ranks]
        self.metrics.log(record)
        self.console.update(record)
        self.monitor.after_step(result.step, record, ranks)
        return record

    def close(self) -> None:
        for part in (self.monitor, self.console, self.metrics):
            if part is not None:
                part.close()
