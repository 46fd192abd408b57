"""Where training numbers go: <run.dir>/metrics.jsonl (every step and every event), TensorBoard, the console.

A step record holds at least step, loss, lr, grad_norm, tokens_per_s, mfu, step_time_s. An event record
holds `event` (checkpoint_saved, checkpoint_loaded, alert, ...) and the step it happened at.
"""

import functools
import json
import queue
import sys
import threading
import time
from pathlib import Path

import torch

from bessemer.config import MetricsConfig
from bessemer.plan.catalog import match_gpu


def measure_matmul_tflops(device: torch.device, dtype: torch.dtype = torch.float32, n: int = 1024,
                          seconds: float = 0.3) -> float:
    """The rate of a dense n x n matmul on `device`: the achievable peak used as the MFU denominator where no
    data-sheet peak is known. Its own generator: the training RNG streams are left untouched."""
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=g).to(device, dtype) for _ in range(2))
    a @ b  # warm-up
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    reps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ b
        reps += 1
    sync()
    return 2 * n ** 3 * reps / (time.perf_counter() - t0) / 1e12


def peak_tflops(cfg: MetricsConfig, device: torch.device, dtype: torch.dtype) -> tuple[float, str]:
    """Peak dense TFLOP/s of one device and where the number came from."""
    if cfg.peak_tflops > 0:
        return cfg.peak_tflops, "metrics.peak_tflops"
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        gpu = match_gpu(name)
        if gpu is not None:
            return gpu.bf16_tflops, f"catalog ({gpu.name}, bf16 dense)"
        return measure_matmul_tflops(device, torch.bfloat16, 8192), f"measured bf16 matmul on {name}"
    # fp16 products run through fp32 kernels on CPU (precision/policy.py), so fp32 is their peak there.
    dtype = torch.float32 if dtype == torch.float16 else dtype
    return measure_matmul_tflops(device, dtype), f"measured {str(dtype).removeprefix('torch.')} matmul on CPU"


def peak_memory_gib(device: torch.device) -> float:
    """Peak memory of this process so far: CUDA max allocated on a GPU, the resident set's high-water mark
    (ru_maxrss) on CPU, where tensors live in the process's own memory."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2 ** 30
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2 ** 30  # Linux reports KiB


@functools.cache
def _this_process():
    import psutil

    return psutil.Process()


def memory_in_use_bytes(device: torch.device) -> int:
    """Memory this process holds now, for the leak detector: CUDA allocated on a GPU, the resident set on CPU."""
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device)
    return _this_process().memory_info().rss


class MetricsLogger:
    """Appends JSON lines and TensorBoard scalars; only the rank that logs (rank 0) opens files. A writer thread
    does the writing, in the order the records came: encoding JSON and TensorBoard events never holds up the
    training thread, so the other ranks do not wait for rank 0 at the next collective. `close` writes what is
    queued; a write that failed raises in the training thread at the next call."""

    def __init__(self, cfg: MetricsConfig, run_dir: Path, resume: bool, enabled: bool = True):
        self.cfg, self.enabled = cfg, enabled
        self.path = run_dir / "metrics.jsonl"
        self._file = None
        self._tb = None
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._error: BaseException | None = None
        if not enabled:
            return
        # A fresh run starts a new file; a resumed one appends after the records of the steps it keeps.
        self._file = open(self.path, "a" if resume else "w", encoding="utf-8")
        if cfg.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise ImportError("TensorBoard logging needs the tensorboard package: pip install tensorboard "
                                  "(or set metrics.tensorboard=false)") from None
            self._tb = SummaryWriter(log_dir=str(run_dir / "tb"))
        self._writer = threading.Thread(target=self._drain, name="metrics-writer", daemon=True)
        self._writer.start()

    def log(self, record: dict) -> None:
        self._put(self._write_step, record)

    def telemetry(self, step: int, sample: dict) -> None:
        """A hardware telemetry sample: a `telemetry` event, and its numbers as TensorBoard scalars."""
        self._put(self._write_telemetry, step, sample)

    def event(self, event: str, step: int, **fields) -> None:
        self._put(self._write, {"event": event, "step": step, "time": round(time.time(), 3), **fields})

    def validation(self, step: int, fields: dict) -> None:
        """A `validation` event (train/validation.py), and its numbers as TensorBoard scalars."""
        self._put(self._write_validation, step, fields)

    def _put(self, write, *args) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if self.enabled and self._writer is not None:
            self._queue.put((write, args))

    def _drain(self) -> None:
        while (item := self._queue.get()) is not None:
            write, args = item
            try:
                write(*args)
            except Exception as e:  # handed to the training thread
                self._error = e

    def _write_step(self, record: dict) -> None:
        self._write(record)
        if self._tb is not None:
            scalars = {}
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)):
                    scalars[f"train/{key}"] = value
                elif isinstance(value, dict):  # per-domain numbers: one scalar per domain
                    scalars |= {f"train/{key}/{name}": v for name, v in value.items() if isinstance(v, (int, float))}
            self._scalars(scalars, record["step"])

    def _write_validation(self, step: int, fields: dict) -> None:
        self._write({"event": "validation", "step": step, "time": round(time.time(), 3), **fields})
        if self._tb is not None:
            scalars = {f"val/{key.removeprefix('val_')}/{name}": v for key in ("val_loss", "val_perplexity")
                       for name, v in fields.get(key, {}).items()}
            scalars |= {f"eval/{task}/{metric}": v for task, scores in fields.get("tasks", {}).items()
                        for metric, v in scores.items() if isinstance(v, float)}
            self._scalars(scalars, step)

    def _write_telemetry(self, step: int, sample: dict) -> None:
        self._write({"event": "telemetry", "step": step, **sample})
        if self._tb is not None:
            from bessemer.doctor.telemetry import flat_scalars

            self._scalars({f"telemetry/{key}": value for key, value in flat_scalars(sample).items()}, step)

    def _scalars(self, scalars: dict[str, float], step: int) -> None:
        """One TensorBoard event holding all of a step's scalars: what `add_scalar` writes one event per scalar
        for, at a seventh of the cost (one protobuf and one write instead of a dozen)."""
        from tensorboard.compat.proto.summary_pb2 import Summary

        values = [Summary.Value(tag=tag, simple_value=float(v)) for tag, v in scalars.items()]
        self._tb.file_writer.add_summary(Summary(value=values), step)

    def _write(self, record: dict) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Write what is queued, then close the files."""
        if self._writer is not None:
            self._queue.put(None)
            self._writer.join()
            self._writer = None
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error


class Console:
    """A rich progress bar (loss, tokens/s, ETA) on a terminal; a plain line every log_interval steps otherwise."""

    def __init__(self, cfg: MetricsConfig, total_steps: int, start_step: int, enabled: bool = True):
        self.cfg, self.total = cfg, total_steps
        self.enabled = enabled
        self._progress = None
        if enabled and cfg.progress and sys.stderr.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._progress = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
                                      TextColumn("{task.fields[info]}"), TimeRemainingColumn(), transient=False)
            self._task = self._progress.add_task("train", total=total_steps, completed=start_step, info="")
            self._progress.start()

    def update(self, rec: dict) -> None:
        if not self.enabled:
            return
        info = (f"loss {rec['loss']:.4f}  lr {rec['lr']:.2e}  {rec['tokens_per_s']:,.0f} tok/s  "
                f"mfu {100 * rec['mfu']:.1f}%")
        if self._progress is not None:
            self._progress.update(self._task, completed=rec["step"], info=info)
        elif rec["step"] % self.cfg.log_interval == 0 or rec["step"] == self.total:
            print(f"step {rec['step']}/{self.total}  {info}", flush=True)

    def print(self, msg: str) -> None:
        if not self.enabled:
            return
        if self._progress is not None:
            self._progress.console.print(msg)
        else:
            print(msg, flush=True)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
