"""The training loop. `Trainer.__init__` calls the builders (train/builders.py) in order; a step is
`TrainStep` (train/step.py); what the run reports is `Reporter` (train/reporting.py); when it saves and what
it restores is `CheckpointCadence` (train/cadence.py). `train` loops and stops cleanly on Ctrl-C/SIGTERM; on
several ranks the hang watchdog (train/watchdog.py) watches the loop from a thread of its own.

The loop reads the device only when it flushes (every metrics.log_interval steps, and where a checkpoint or
the end is due); Python's garbage collector runs only every train.gc_interval steps, on every rank alike."""

import contextlib
import gc
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import torch

from bessemer.checkpoint.hf import load_hf_into
from bessemer.checkpoint.store import CheckpointHooks, Checkpointer, ModelParts
from bessemer.config import JobConfig, check_data_parallel
from bessemer.tokens.mixture import build_loader
from bessemer.tokens.shards import TokenDataset
from bessemer.errors import TrainingInterrupted
from bessemer.hangs import hang_event, latest_verdict
from bessemer.model.registry import count_params, flops_per_token, resolve_model_args
from bessemer.parallel.build import uses_fsdp
from bessemer.parallel.dims import Launch, ParallelDims, restart_attempt
from bessemer.parallel.layout import check_layout
from bessemer.precision.guards import Guards
from bessemer.precision.policy import PrecisionPolicy
from bessemer.precision.scaler import LossScaler
from bessemer.rng import RNGState, seed_everything
from bessemer.train.builders import (build_cold, build_device, build_model_parts_for, build_watchdog,
                                     pipeline_loss, resolved_config)
from bessemer.train.cadence import CheckpointCadence
from bessemer.train.fault import FaultInjector
from bessemer.train.metrics import peak_tflops
from bessemer.train.offload import host_offload_fraction
from bessemer.train.optim import LRSchedules, Optimizers
from bessemer.train.reporting import Reporter
from bessemer.train.state import TrainState
from bessemer.train.step import TrainStep
from bessemer.train.validation import Validator, describe

# The doctor's runtime checks on the job's own mesh, handed in by the caller: (mesh spec, seed) -> checks.
RuntimeChecks = Callable[[dict, int], list]


class Trainer:
    def __init__(self, cfg: JobConfig, resume: bool = False, log: bool = True,
                 runtime_checks: RuntimeChecks | None = None):
        self.cfg = cfg
        self.run_dir = Path(cfg.run.dir)
        self.launch = launch = Launch.from_env()
        self.is_main = launch.rank == 0
        self.run_dir.mkdir(parents=True, exist_ok=True)  # every rank, before any collective can wait on it
        self.device = build_device(launch)
        self.policy = PrecisionPolicy(cfg.precision)
        seed_everything(cfg.run.seed, cfg.train.deterministic)

        # Data, model size and layout: everything about the layout is checked before the first collective.
        self.dataset = TokenDataset(cfg.data.path)
        self.model_args = resolve_model_args(cfg.model, self.dataset.vocab_size)
        self.dims = dims = ParallelDims.from_config(cfg.parallel, launch.world_size)
        pp_microbatches = check_layout(self.model_args, dims, cfg.parallel, cfg.train.micro_batch)
        check_data_parallel(cfg.train, dims.dp)
        accum_steps = cfg.train.global_batch // (cfg.train.micro_batch * dims.dp)

        self.state = TrainState()
        self.reporter = Reporter(launch, self.device, self.state)
        self._cold_events: list[tuple] = []
        cold = build_cold(cfg.checkpoint, self.run_dir, self.is_main, self._cold_events)  # before any collective
        self.scaler = LossScaler(cfg.precision.scaler, enabled=cfg.precision.dtype == "fp16", device=self.device)
        self.build = build_model_parts_for(cfg, self.model_args, dims, launch, self.device, pp_microbatches,
                                           pipeline_loss(lambda: self.scaler.scale, accum_steps, pp_microbatches,
                                                         per_sample=[] if cfg.data.domains else None))
        self.model_parts = self.build.parts
        # FSDP2 casts parameters per unit; everywhere else autocast does (precision/policy.py).
        sharded = launch.distributed and uses_fsdp(dims)
        self.loader = build_loader(cfg.data, self.dataset, cfg.train.seq_len, cfg.train.global_batch,
                                   cfg.train.micro_batch, dp_rank=self.build.dp_rank, dp_world=dims.dp,
                                   seed=cfg.run.seed)
        self.optimizers = Optimizers(self.model_parts, cfg.train, host_offload_fraction(cfg.precision.offload, sharded))
        self.lr_schedules = LRSchedules(self.optimizers, cfg.train)
        self.step = TrainStep(cfg, self.build, dims, self.loader, self.optimizers, self.lr_schedules, self.scaler,
                              self.state, self.policy, self.device, sharded, launch.distributed)
        # torchrun's elastic agent restarts every rank after a failure (--max-restarts); a restart resumes.
        self.attempt = restart_attempt()
        self.fault = FaultInjector(cfg.fault, launch.rank, self.attempt)
        config_toml = resolved_config(cfg, self.model_args, dims)
        self.checkpointer = Checkpointer(cfg.checkpoint, self.run_dir, {
            "model": ModelParts(self.model_parts), "optimizer": self.optimizers, "lr_schedule": self.lr_schedules,
            "loss_scaler": self.scaler, "dataloader": self.loader, "rng": RNGState(), "train_state": self.state},
            launch, meta={"layout": dims.describe(), "model": {
                "name": cfg.model.name, "vocab_size": self.model_args.vocab_size, "seq_len": cfg.train.seq_len,
                "data_path": str(Path(cfg.data.path).resolve())}},
            config=config_toml, hooks=CheckpointHooks(event=self.reporter.event, midway=self.fault.during_save,
                                                      committed=cold.committed if cold else None))
        self.cadence = CheckpointCadence(cfg, self.run_dir, self.checkpointer, cold, self._cold_events,
                                         self.reporter, self.state, launch, self.device)

        resumed = self.cadence.restore(resume or self.attempt > 0)
        if resumed is None and cfg.checkpoint.initial_load_hf:
            load_hf_into(Path(cfg.checkpoint.initial_load_hf), self.model_args, self.model_parts)
            self.optimizers.params_changed()
            self.reporter.event("initial_load_hf", 0, path=cfg.checkpoint.initial_load_hf)
        if self.is_main:
            (self.run_dir / "config.toml").write_text(config_toml, encoding="utf-8")
        self.reporter.open(cfg.metrics, self.run_dir, cfg.train.steps, resumed=resumed is not None, enabled=log)
        self._run_events(resumed)
        self.tokens_per_step = cfg.train.global_batch * cfg.train.seq_len
        self.flops_per_token = flops_per_token(self.model_args, cfg.train.seq_len)
        tflops, self.peak_source = peak_tflops(cfg.metrics, self.device, self.policy.dtype)
        self.peak_flops = tflops * 1e12 * launch.world_size  # MFU counts every device
        self.step.guards = Guards(cfg.precision.guards, self.reporter.alert, launch.distributed)
        self.validator = None
        if cfg.eval.interval:
            self.validator = Validator(cfg.eval, cfg.data, cfg.train.seq_len, cfg.train.micro_batch, self.step,
                                       self.model_args.vocab_size,
                                       holds=not launch.distributed or (self.build.has_last and self.build.tp_rank == 0),
                                       distributed=launch.distributed, device=self.device)
        if cfg.metrics.runtime_checks and launch.distributed and runtime_checks is not None:
            self._runtime_checks(runtime_checks)
        self._stop_signal: int | None = None
        # Started with the loop; it reads the step counter only (no collective, no host sync).
        self.watchdog = build_watchdog(cfg.fault, cfg.parallel.timeout_s, launch, self.attempt, self.run_dir,
                                       lambda: self.state.step)

    # The components tests and benches reach through the trainer.
    @property
    def metrics(self):
        return self.reporter.metrics

    @property
    def console(self):
        return self.reporter.console

    def train_step(self) -> dict:
        """One step, its record settled and written at once (for tests and benches that step by hand)."""
        start = self.reporter.start_step()
        result = self.step()
        self.reporter.end_step(result, start, None)
        return self._flush()[0][-1]

    def _flush(self) -> tuple[list[dict], int | None]:
        return self.reporter.flush(self.step.settle, self.tokens_per_step, self.flops_per_token, self.peak_flops)

    def _flush_due(self, step: int) -> bool:
        """Every rank decides alike: the log interval, the last step, a checkpoint due (its records are on
        disk before it), an injected kill or hang."""
        fault = self.cfg.fault
        return (step % self.cfg.metrics.log_interval == 0 or step == self.cfg.train.steps
                or self.checkpointer.due(step) is not None or (fault.kill_rank >= 0 and step == fault.kill_at_step)
                or (fault.hang_rank >= 0 and step == fault.hang_at_step))

    def validate(self) -> dict:
        """Held-out loss per domain and the benchmark tasks now ([eval]), as a `validation` event."""
        record = self.validator()
        self.reporter.metrics.validation(self.state.step, record)
        self.reporter.console.print(f"step {self.state.step}: {describe(record)}")
        return record

    def save(self, tier: str) -> None:
        self.cadence.save(tier)

    def _run_events(self, resumed: tuple | None) -> None:
        if self.attempt:
            # The previous attempt ended in a hang: its verdict, found by the watchdog, becomes its event here.
            verdict = (latest_verdict(self.run_dir, self.attempt - 1, run_id=self.launch.run_id) if self.is_main
                       else None)
            if verdict is not None:
                step, fields = hang_event(verdict)
                self.reporter.event("hang", step, **fields)
            self.reporter.event("restart", self.state.step, attempt=self.attempt,
                                message=f"automatic restart {self.attempt} after a failure")
        self.reporter.flush_early()
        self.reporter.event("run_started", self.state.step, layout=self.dims.describe(),
                            world_size=self.launch.world_size, device=self.device.type)
        if resumed is not None:
            self.reporter.event("checkpoint_loaded", resumed[0], tier=resumed[1], path=str(resumed[2]))
        if self.lr_schedules.overridden:  # train.override_schedule: the config's schedule from the saved step
            self.reporter.event("schedule_overridden", self.state.step, changes=self.lr_schedules.overridden,
                                message="learning-rate schedule rebuilt from the config: "
                                        + ", ".join(self.lr_schedules.overridden))

    def _runtime_checks(self, run_checks: RuntimeChecks) -> None:
        """The doctor's runtime checks on this job's mesh (every rank takes part), leaving the RNG as it was."""
        rng = RNGState()
        saved = rng.state_dict()
        spec = {name: getattr(self.cfg.parallel, name) for name in ("pp", "dp_replicate", "dp_shard", "tp")}
        checks = run_checks(spec, self.cfg.run.seed)
        rng.load_state_dict(saved)
        for c in checks:
            self.reporter.event("runtime_check", self.state.step, id=c.id, status=c.status, evidence=c.evidence)
            if c.status in ("warn", "fail"):
                self.reporter.alert("runtime_check", f"{c.id} {c.status}: {c.evidence}", check=c.id, fix=c.fix)

    def train(self) -> None:
        cfg, reporter, cadence = self.cfg, self.reporter, self.cadence
        reporter.console.print(self.summary())
        with self._stop_on_signals(), collector_paused():
            try:
                reporter.monitor.start()
                if self.watchdog is not None:
                    self.watchdog.start()
                while self.state.step < cfg.train.steps:
                    start = reporter.start_step()
                    result = self.step()
                    self.fault.slow_step()
                    reporter.end_step(result, start, self._stop_signal)
                    step = self.state.step
                    if step % cfg.train.gc_interval == 0:
                        gc.collect(1)  # the young generations: a full pass costs more and finds little more
                    if self._flush_due(step):
                        records, stop = self._flush()
                        for record in records:
                            cadence.account(record["step_time_s"])
                        if stop is not None:
                            cadence.stop()
                            raise TrainingInterrupted(stop, step)
                    if self.validator is not None and self.validator.due(step, cfg.train.steps):
                        self.validate()
                    cadence.save_if_due()
                    self.fault.after_step(step)
                cadence.finish()
            finally:
                if self.watchdog is not None:
                    self.watchdog.close()
                cadence.flush_cold_events()
                reporter.close()

    def close(self) -> None:
        if self.watchdog is not None:
            self.watchdog.close()
        if self.launch.distributed and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()

    def summary(self) -> str:
        cfg, n = self.cfg.train, count_params(self.model_args)["total"]
        return (f"layout: {self.dims.describe()}; "
                f"model {self.cfg.model.name}: {n / 1e6:.2f}M parameters, vocab {self.model_args.vocab_size}; "
                f"{cfg.global_batch} x {cfg.seq_len} tokens per step ({self.loader.accum_steps} micro-batches of "
                f"{cfg.micro_batch}); steps {self.state.step + 1}..{cfg.steps}; "
                f"{self.device.type} {self.cfg.precision.dtype}; MFU against {self.peak_flops / 1e12:.2f} TFLOP/s for "
                f"{self.launch.world_size} device(s) ({self.peak_source}); run dir {self.run_dir}")

    @contextlib.contextmanager
    def _stop_on_signals(self):
        """Ctrl-C (SIGINT) or SIGTERM: every rank stops at the next flush (at most metrics.log_interval steps
        later: keep that within the scheduler's grace period), saves and exits. A second Ctrl-C aborts at once."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum, frame):
            if self._stop_signal is not None:
                raise KeyboardInterrupt
            self._stop_signal = signum
            self.reporter.console.print(f"{signal.Signals(signum).name}: stopping at the next log step (at most "
                                        f"{self.cfg.metrics.log_interval} steps), then saving")

        previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, h in previous.items():
                signal.signal(s, h)


@contextlib.contextmanager
def collector_paused():
    """Python's garbage collector off while training (the loop collects at fixed steps, on every rank alike):
    left on, it pauses each rank at a moment of its own, and the others wait for it at the next collective.
    The first collection, like the periodic ones, takes the young generations only: a full pass walks every
    object the imports and the build left (0.2-0.4 s here, once per run) to find little more."""
    enabled = gc.isenabled()
    gc.collect(1)
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
