"""The training loop. `Trainer.__init__` wires components built by `build_*` functions; `train_step` is one
optimizer step read top to bottom; `train` loops, logs, checkpoints and stops cleanly on Ctrl-C."""

import contextlib
import dataclasses
import math
import signal
import threading
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from bessemer.checkpoint.store import Checkpointer
from bessemer.config import JobConfig, ModelConfig, to_toml
from bessemer.dataset.loader import TokenLoader
from bessemer.dataset.shards import TokenDataset
from bessemer.errors import BessemerError, TrainingInterrupted
from bessemer.model.llama import Transformer, build_model
from bessemer.model.registry import ModelArgs, count_params, flops_per_token, get_model_args
from bessemer.train.metrics import Console, MetricsLogger, peak_tflops
from bessemer.train.optim import build_lr_schedule, build_optimizer
from bessemer.train.state import RNGState, TrainState, seed_everything


def resolve_model_args(cfg: ModelConfig, data_vocab: int) -> ModelArgs:
    """The registry size with the vocabulary the data needs (model.vocab_size, if set, must cover it)."""
    vocab = cfg.vocab_size or data_vocab
    if vocab < data_vocab:
        raise BessemerError(f"model.vocab_size {vocab} is smaller than the data's vocabulary ({data_vocab})")
    return get_model_args(cfg.name, vocab)


def compute_dtype(name: str) -> torch.dtype:
    return {"fp32": torch.float32, "bf16": torch.bfloat16}[name]


class Trainer:
    def __init__(self, cfg: JobConfig, resume: bool = False, log: bool = True):
        self.cfg = cfg
        self.run_dir = Path(cfg.run.dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
        self.dtype = compute_dtype(cfg.precision.dtype)
        seed_everything(cfg.run.seed, cfg.train.deterministic)

        self.dataset = TokenDataset(cfg.data.path)
        self.model_args = resolve_model_args(cfg.model, self.dataset.vocab_size)
        self.model: Transformer = build_model(self.model_args, cfg.train.seq_len, self.device)
        self.loader = TokenLoader(self.dataset, cfg.train.seq_len, cfg.train.global_batch, cfg.train.micro_batch)
        self.optimizer = build_optimizer(self.model, cfg.train)
        self.lr_schedule = build_lr_schedule(self.optimizer, cfg.train)
        self.state = TrainState()
        self.checkpointer = Checkpointer(cfg.checkpoint, self.run_dir, {
            "model": self.model, "optimizer": self.optimizer, "lr_schedule": self.lr_schedule,
            "dataloader": self.loader, "rng": RNGState(), "train_state": self.state})

        resumed_from = self._restore(resume)
        self._write_config()
        self.metrics = MetricsLogger(cfg.metrics, self.run_dir, resume=resumed_from is not None, enabled=log)
        if resumed_from is not None:
            self.metrics.event("checkpoint_loaded", resumed_from, path=str(self.checkpointer.dir))
        self.tokens_per_step = cfg.train.global_batch * cfg.train.seq_len
        self.flops_per_token = flops_per_token(self.model_args, cfg.train.seq_len)
        tflops, self.peak_source = peak_tflops(cfg.metrics, self.device, self.dtype)
        self.peak_flops = tflops * 1e12
        self.console = Console(cfg.metrics, cfg.train.steps, self.state.step, enabled=log)
        self._stop_signal: int | None = None

    def _restore(self, resume: bool) -> int | None:
        latest = self.checkpointer.latest_step()
        if latest is None:
            return None
        if not resume:
            raise BessemerError(f"{self.checkpointer.dir} already holds a checkpoint (step {latest}); pass --resume "
                                f"to continue that run, or choose another run.dir")
        return self.checkpointer.load(latest)

    def _write_config(self) -> None:
        resolved = dataclasses.replace(self.cfg, model=dataclasses.replace(self.cfg.model,
                                                                           vocab_size=self.model_args.vocab_size))
        (self.run_dir / "config.toml").write_text(to_toml(resolved), encoding="utf-8")

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def train_step(self) -> dict:
        """One optimizer step: accumulate gradients over micro-batches, clip, update, advance the schedule."""
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        accum = self.loader.accum_steps
        loss_sum = torch.zeros((), device=self.device)
        for _ in range(accum):
            inputs, targets = (t.to(self.device, non_blocking=True) for t in self.loader.next_batch())
            with self.autocast():
                logits = self.model(inputs)  # (B, T, vocab)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(0, 1))
            # Each micro-batch's mean loss is scaled so the summed gradients equal the global batch's mean.
            (loss / accum).backward()
            loss_sum += loss.detach()
        max_norm = self.cfg.train.grad_clip if self.cfg.train.grad_clip > 0 else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        lr = self.optimizer.param_groups[0]["lr"]
        self.optimizer.step()
        self.lr_schedule.step()
        self.state.step += 1
        self.state.tokens_seen += self.tokens_per_step
        return {"loss": (loss_sum / accum).item(), "grad_norm": grad_norm.item(), "lr": lr}

    def train(self) -> None:
        cfg = self.cfg
        self.console.print(self.summary())
        with self._stop_on_signals():
            try:
                while self.state.step < cfg.train.steps:
                    t0 = time.perf_counter()
                    out = self.train_step()
                    dt = time.perf_counter() - t0
                    tokens_per_s = self.tokens_per_step / dt
                    record = {"step": self.state.step, **out, "tokens_per_s": tokens_per_s,
                              "mfu": self.flops_per_token * tokens_per_s / self.peak_flops, "step_time_s": dt,
                              "tokens_seen": self.state.tokens_seen, "data_epoch": round(self.loader.epoch, 6)}
                    self.metrics.log(record)
                    self.console.update(record)
                    if self._stop_signal is not None:
                        self.save()
                        raise TrainingInterrupted(self._stop_signal, self.state.step)
                    if self.checkpointer.due(self.state.step) and self.state.step < cfg.train.steps:
                        self.save()
                if cfg.checkpoint.at_end:
                    self.save()
            finally:
                self.console.close()
                self.metrics.close()

    def save(self) -> None:
        t0 = time.perf_counter()
        path = self.checkpointer.save(self.state.step)
        self.metrics.event("checkpoint_saved", self.state.step, path=str(path),
                           seconds=round(time.perf_counter() - t0, 3))

    def summary(self) -> str:
        cfg, n = self.cfg.train, count_params(self.model_args)["total"]
        return (f"model {self.cfg.model.name}: {n / 1e6:.2f}M parameters, vocab {self.model_args.vocab_size}; "
                f"{cfg.global_batch} x {cfg.seq_len} tokens per step ({self.loader.accum_steps} micro-batches of "
                f"{cfg.micro_batch}); steps {self.state.step + 1}..{cfg.steps}; "
                f"{self.device.type} {self.cfg.precision.dtype}; MFU against {self.peak_flops / 1e12:.2f} TFLOP/s "
                f"({self.peak_source}); run dir {self.run_dir}")

    @contextlib.contextmanager
    def _stop_on_signals(self):
        """Ctrl-C (SIGINT) or SIGTERM: finish the current step, save, stop. A second Ctrl-C aborts at once."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum, frame):
            if self._stop_signal is not None:
                raise KeyboardInterrupt
            self._stop_signal = signum
            self.console.print(f"{signal.Signals(signum).name}: finishing step {self.state.step + 1}, then saving")

        previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
