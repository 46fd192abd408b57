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

from torch.distributed.tensor import DTensor

from bessemer.checkpoint.interval import advise
from bessemer.checkpoint.paths import check_resume, redact_url, tier_dirs
from bessemer.checkpoint.store import Checkpointer, ModelParts
from bessemer.config import JobConfig, to_toml
from bessemer.dataset.mixture import DomainLosses, MixtureLoader, build_loader
from bessemer.dataset.shards import TokenDataset
from bessemer.doctor.monitor import RANK_FIELDS, RunMonitor
from bessemer.errors import BessemerError, TrainingInterrupted
from bessemer.model.llama import build_model
from bessemer.model.registry import count_params, flops_per_token, resolve_model_args
from bessemer.train.metrics import Console, MetricsLogger, memory_in_use_bytes, peak_memory_gib, peak_tflops
from bessemer.parallel.apply import build_model_parts, uses_fsdp
from bessemer.parallel.dims import Launch, ParallelDims, build_mesh, init_distributed, restart_attempt
from bessemer.parallel.layout import check_layout
from bessemer.parallel.pipeline import build_schedule
from bessemer.parallel.reduce import clip_grad_norm_, global_loss
from bessemer.precision.apply import host_offload_fraction, prepare_model
from bessemer.precision.guards import Guards
from bessemer.precision.policy import PrecisionPolicy, compute_context
from bessemer.precision.scaler import LossScaler, unscale_
from bessemer.train.optim import LRSchedules, Optimizers
from bessemer.train.fault import FaultInjector
from bessemer.train.state import RNGState, TrainState, seed_everything


def build_device(launch: Launch) -> torch.device:
    if torch.cuda.is_available():
        torch.cuda.set_device(launch.local_rank)
        return torch.device("cuda", launch.local_rank)
    return torch.device("cpu")


class Trainer:
    def __init__(self, cfg: JobConfig, resume: bool = False, log: bool = True):
        self.cfg = cfg
        self.run_dir = Path(cfg.run.dir)
        self.launch = Launch.from_env()
        self.is_main = self.launch.rank == 0
        self.run_dir.mkdir(parents=True, exist_ok=True)  # every rank, before any collective can wait on it
        self.device = build_device(self.launch)
        self.policy = PrecisionPolicy(cfg.precision)
        self.dtype = self.policy.dtype
        seed_everything(cfg.run.seed, cfg.train.deterministic)

        self.dataset = TokenDataset(cfg.data.path)
        self.model_args = resolve_model_args(cfg.model, self.dataset.vocab_size)
        self.dims = ParallelDims.from_config(cfg.parallel, self.launch.world_size)
        # Everything about the layout is checked before the first collective.
        self.pp_microbatches = check_layout(self.model_args, self.dims, cfg.parallel, cfg.train.micro_batch)
        cfg.train.check_data_parallel(self.dims.dp)
        self.mesh = None
        self.pp_schedule = None
        # FSDP2 casts parameters per unit; everywhere else autocast does (precision/policy.py).
        self.sharded = self.launch.distributed and uses_fsdp(self.dims)
        self._cold_events: list[tuple] = []
        self.cold = self._build_cold()  # reads the backup key on every rank before any collective
        if self.launch.distributed:
            self._build_distributed()
        else:
            model = build_model(self.model_args, cfg.train.seq_len, self.device)
            prepare_model(model, self.policy, cfg.precision, tp=1)
            self.policy.apply_autocast_islands(model)
            self.model_parts = [model]
        self.has_first = self.has_last = True  # pipeline: whether this rank feeds tokens / computes the loss
        if self.dims.pp > 1:
            self.has_first = any(s.is_first for s in self.pp_stages)
            self.has_last = any(s.is_last for s in self.pp_stages)
        dp_rank = self.dp_mesh.get_local_rank() if self.mesh is not None else 0
        self.loader = build_loader(cfg.data, self.dataset, cfg.train.seq_len, cfg.train.global_batch,
                                   cfg.train.micro_batch, dp_rank=dp_rank, dp_world=self.dims.dp, seed=cfg.run.seed)
        self.mixture = isinstance(self.loader, MixtureLoader)
        self.optimizers = Optimizers(self.model_parts, cfg.train, host_offload_fraction(cfg.precision, self.sharded))
        self.lr_schedules = LRSchedules(self.optimizers, cfg.train)
        self.scaler = LossScaler(cfg.precision.scaler, enabled=cfg.precision.dtype == "fp16")
        self.state = TrainState()
        # torchrun's elastic agent restarts every rank after a failure (--max-restarts); a restart resumes.
        self.attempt = restart_attempt()
        self.fault = FaultInjector(cfg.fault, self.launch.rank, self.attempt)
        self.metrics = None
        self._early_events: list[tuple] = []  # events raised before the metrics logger exists
        self.console = None
        self.checkpointer = Checkpointer(cfg.checkpoint, self.run_dir, {
            "model": ModelParts(self.model_parts), "optimizer": self.optimizers, "lr_schedule": self.lr_schedules,
            "loss_scaler": self.scaler, "dataloader": self.loader, "rng": RNGState(), "train_state": self.state},
            rank=self.launch.rank, world_size=self.launch.world_size,
            meta={"layout": self.dims.describe(), "model": {
                "name": cfg.model.name, "vocab_size": self.model_args.vocab_size, "seq_len": cfg.train.seq_len,
                "data_path": str(Path(cfg.data.path).resolve())}},
            config=self._resolved_config(), event=self._event, midway=self.fault.during_save,
            committed=self.cold.committed if self.cold else None)

        resumed = self._restore(resume or self.attempt > 0)
        self._saved_step = resumed[0] if resumed else None
        if resumed is None and cfg.checkpoint.initial_load_hf:
            self._load_hf(Path(cfg.checkpoint.initial_load_hf))
        if self.is_main:
            (self.run_dir / "config.toml").write_text(self._resolved_config(), encoding="utf-8")
        self.metrics = MetricsLogger(cfg.metrics, self.run_dir, resume=resumed is not None,
                                     enabled=log and self.is_main)
        if self.attempt:
            self.metrics.event("restart", self.state.step, attempt=self.attempt,
                               message=f"automatic restart {self.attempt} after a failure")
        for name, step, fields in self._early_events:
            self.metrics.event(name, step, **fields)
        self.metrics.event("run_started", self.state.step, layout=self.dims.describe(),
                           world_size=self.launch.world_size, device=self.device.type)
        if resumed is not None:
            self.metrics.event("checkpoint_loaded", resumed[0], tier=resumed[1], path=str(resumed[2]))
        self.tokens_per_step = cfg.train.global_batch * cfg.train.seq_len
        self.flops_per_token = flops_per_token(self.model_args, cfg.train.seq_len)
        tflops, self.peak_source = peak_tflops(cfg.metrics, self.device, self.dtype)
        self.peak_flops = tflops * 1e12 * self.launch.world_size  # MFU counts every device
        self.console = Console(cfg.metrics, cfg.train.steps, self.state.step, enabled=log and self.is_main)
        self.guards = Guards(cfg.precision.guards, self._alert, self.launch.distributed)
        # Detectors on rank 0, telemetry on each node's local rank 0, the Prometheus endpoint on rank 0.
        self.monitor = RunMonitor(cfg.metrics, self.launch.rank, self.launch.local_rank, self.launch.world_size,
                                  alert=self._alert, telemetry=lambda s: self.metrics.telemetry(self.state.step, s),
                                  enabled=log, memory="CUDA allocated memory" if self.device.type == "cuda"
                                  else "resident memory")
        self.sections: dict[str, float] = {}  # this rank's time per part of the last step (RANK_FIELDS)
        if cfg.metrics.runtime_checks and self.launch.distributed:
            self._runtime_checks()
        self._stop_signal: int | None = None
        self._step_s: float | None = None  # moving average of the step time (for the checkpoint interval)
        self._advised = False

    def _runtime_checks(self) -> None:
        """The doctor's runtime checks on this job's mesh (every rank takes part), leaving the RNG as it was."""
        from bessemer.doctor.runtime import MESH_DIMS, run_runtime_checks

        rng = RNGState()
        saved = rng.state_dict()
        spec = {name: getattr(self.cfg.parallel, name) for name in MESH_DIMS}
        checks = run_runtime_checks(spec, sizes_mb=(1, 16), iters=3, seed=self.cfg.run.seed)
        rng.load_state_dict(saved)
        for c in checks:
            self.metrics.event("runtime_check", self.state.step, id=c.id, status=c.status, evidence=c.evidence)
            if c.status in ("warn", "fail"):
                self._alert("runtime_check", f"{c.id} {c.status}: {c.evidence}", check=c.id, fix=c.fix)

    def _build_distributed(self) -> None:
        """Join the group, build the mesh and this rank's parts (and their pipeline schedule)."""
        cfg, dims = self.cfg, self.dims
        init_distributed(self.launch, self.device.type)
        self.mesh, self.dp_mesh = build_mesh(dims, self.device.type)
        self.model_parts, stage_ids = build_model_parts(self.model_args, cfg.train.seq_len, dims, self.mesh,
                                                        cfg.parallel, cfg.precision, self.device, cfg.run.seed)
        self.tp_rank = self.mesh["tp"].get_local_rank()
        if dims.pp > 1:
            num_stages = dims.pp * cfg.parallel.stages_per_rank
            self.pp_schedule, self.pp_stages = build_schedule(
                self.model_parts, stage_ids, num_stages, cfg.parallel.pp_schedule, self.pp_microbatches,
                self._pipeline_loss, self.device, self.mesh["pp"].get_group())

    def _restore(self, resume: bool) -> tuple[int, str, Path] | None:
        """With `resume`: load the newest intact checkpoint of any tier (damaged ones are skipped, with an
        event); None when there is none (a restart before the first checkpoint starts over)."""
        latest = check_resume(self.cfg, resume)
        if not resume:
            return None
        cold = self.cfg.checkpoint.cold
        found = self.checkpointer.recover(self.run_dir, self.cold, cold_available=bool(cold.url),
                                          cold_url=redact_url(cold.url))
        skipped = [f"{f['tier']} step {step}: {f['reason']}" for name, step, f in self._early_events
                   if name == "checkpoint_skipped"]
        if found is None and (latest is not None or skipped):  # there were checkpoints, none of them usable
            where = [*map(str, tier_dirs(self.cfg.checkpoint, self.run_dir).values()),
                     *([redact_url(cold.url)] if cold.url else [])]
            raise BessemerError(f"no intact checkpoint to resume from in {', '.join(where)} ({'; '.join(skipped)})")
        return found

    def _load_hf(self, hf_dir: Path) -> None:
        """Start from Hugging Face Llama weights: every rank reads the files and keeps its part."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        from bessemer.checkpoint.hf import load_hf

        state, _ = load_hf(hf_dir, self.model_args)
        for part in self.model_parts:
            keys = part.state_dict().keys()
            set_model_state_dict(part, {k: state[k].to(self.device) for k in keys},
                                 options=StateDictOptions(full_state_dict=True, strict=True))
        self.optimizers.params_changed()
        self._early_events.append(("initial_load_hf", 0, {"path": str(hf_dir)}))

    def _build_cold(self):
        """Rank 0's cold tier (backups and restores), when configured."""
        cold = self.cfg.checkpoint.cold
        if not cold.url:
            return None
        from bessemer.checkpoint.backup import ColdTier
        from bessemer.checkpoint.cold import load_key

        load_key(cold.key_env, cold.key_file)  # on every rank, before any collective: all fail alike
        if not self.is_main:
            return None
        ColdTier.remove_stale_staging(tier_dirs(self.cfg.checkpoint, self.run_dir)["macro"])

        def done(step: int, error: BaseException | None, seconds: float) -> None:  # the uploader's thread
            if error is None:
                self._cold_events.append(("cold_backup_saved", step, {"seconds": round(seconds, 3),
                                                                      "url": redact_url(cold.url)}))
            else:
                self._cold_events.append(("alert", step, {"kind": "cold_backup_failed",
                                                          "message": f"cold backup of step {step} failed: {error}"}))

        return ColdTier(cold, done)

    def _flush_cold_events(self) -> None:
        while self.cold is not None and self._cold_events:
            name, step, fields = self._cold_events.pop(0)
            self._event(name, step, **fields)

    def _resolved_config(self) -> str:
        resolved = dataclasses.replace(
            self.cfg, model=dataclasses.replace(self.cfg.model, vocab_size=self.model_args.vocab_size),
            parallel=dataclasses.replace(self.cfg.parallel, dp_shard=self.dims.dp_shard))
        return to_toml(resolved)

    def _event(self, name: str, step: int, **fields) -> None:
        """Events from the checkpointer: to metrics.jsonl (held until it is open), alerts also to the console."""
        if self.metrics is None:
            self._early_events.append((name, step, fields))
        else:
            self.metrics.event(name, step, **fields)
        if self.console is not None and name in ("alert", "checkpoint_skipped"):
            self.console.print(f"{name} at step {step}: {fields.get('message') or fields.get('reason')}")

    def compute(self) -> contextlib.AbstractContextManager:
        """Autocast where FSDP2 does not cast the parameters; fp16 GEMM emulation on CPU."""
        return compute_context(self.policy, self.device, autocast=not self.sharded)

    def loss_context(self) -> contextlib.AbstractContextManager:
        """Under loss parallelism the logits stay sharded over the vocabulary; cross-entropy must know."""
        if self.dims.tp > 1 and self.cfg.parallel.loss_parallel:
            from torch.distributed.tensor.parallel import loss_parallel

            return loss_parallel()
        return contextlib.nullcontext()

    @staticmethod
    def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(0, 1))  # mean over B*T tokens

    def _pipeline_loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # Scaled so the gradients summed over all micro-batches of the step are those of the global batch's
        # mean loss. (The schedule's own scale_grads is off: it would rescale gradients already accumulated
        # by the previous train.micro_batch.)
        return self.loss_fn(logits, targets) * (self.scaler.scale / (self.loader.accum_steps * self.pp_microbatches))

    @staticmethod
    def sample_losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Each sample's mean loss over its tokens, (B,); their mean is loss_fn's."""
        per_token = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(0, 1), reduction="none")
        return per_token.view(targets.shape).mean(dim=1)

    def forward_backward(self, inputs: torch.Tensor, targets: torch.Tensor,
                         domain_losses: DomainLosses | None = None) -> torch.Tensor | None:
        """Forward and backward of one micro-batch; returns its mean loss where this rank computes it. With
        `domain_losses` (a mixture, without pipeline parallelism) each sample's loss is added to its domain's."""
        accum = self.loader.accum_steps
        with self.loss_context():
            if self.pp_schedule is not None:
                losses: list[torch.Tensor] = []
                args = (inputs,) if self.has_first else ()
                with self.compute():
                    self.pp_schedule.step(*args, target=targets if self.has_last else None, losses=losses)
                return torch.stack(losses).sum().detach() * accum / self.scaler.scale if self.has_last else None
            with self.compute():
                logits = self.model_parts[0](inputs)  # (B, T, vocab)
                if domain_losses is None:
                    loss = self.loss_fn(logits, targets)
                else:
                    per_sample = self.sample_losses(logits, targets)  # (B,)
                    loss = per_sample.mean()
                    per_sample = per_sample.detach()
                    domain_losses.add(per_sample.full_tensor() if isinstance(per_sample, DTensor) else per_sample,
                                      self.loader.last_domains)
                # Each micro-batch's mean loss is scaled so the summed gradients equal the global batch's mean
                # (and, in fp16, multiplied by the loss scale).
                (loss * (self.scaler.scale / accum)).backward()
        loss = loss.detach()
        return loss.full_tensor() if isinstance(loss, DTensor) else loss

    def train_step(self) -> dict:
        """One optimizer step: accumulate gradients over micro-batches, unscale, clip, update unless a gradient
        is not finite, advance the schedule, check the guards."""
        for part in self.model_parts:
            part.train()
        self.optimizers.zero_grad()
        self.guards.start_step(self.model_parts)
        loss_sum = torch.zeros((), device=self.device)
        # Per-domain losses need each sample's loss; pipeline schedules only return micro-batch means.
        domain_losses = DomainLosses(self.loader.domains, self.device) if self.mixture and self.dims.pp == 1 else None
        data_s, t0 = 0.0, time.perf_counter()
        for _ in range(self.loader.accum_steps):
            t = time.perf_counter()
            batch = self.loader.next_batch()
            data_s += time.perf_counter() - t
            inputs, targets = (t.to(self.device, non_blocking=True) for t in batch)
            loss = self.forward_backward(inputs, targets, domain_losses)
            if loss is not None:
                loss_sum += loss
        loss = loss_sum / self.loader.accum_steps
        t1 = time.perf_counter()
        params = self.optimizers.params
        if self.scaler.enabled:
            unscale_(params, 1.0 / self.scaler.scale)
        max_norm = self.cfg.train.grad_clip if self.cfg.train.grad_clip > 0 else math.inf
        # The norm is reduced over every shard and stage: a non-finite gradient anywhere makes it non-finite on
        # every rank, so all ranks skip the same steps.
        grad_norm = clip_grad_norm_(params, max_norm, self.mesh["pp"].get_group() if self.dims.pp > 1 else None)
        finite = bool(torch.isfinite(grad_norm))
        lr, scale = self.optimizers.lr, self.scaler.scale
        if finite:
            self.optimizers.step()
        self.scaler.update(finite)
        # Host wall times: on a GPU, kernels still queued when a section ends count in the next one.
        self.sections = {"data_s": data_s, "forward_backward_s": t1 - t0 - data_s,
                         "optimizer_s": time.perf_counter() - t1}
        self.lr_schedules.step()  # a skipped step still consumed its data and its place in the schedule
        self.state.step += 1
        self.state.tokens_seen += self.tokens_per_step
        if self.launch.distributed:
            holds = self.has_last and self.tp_rank == 0
            loss = global_loss(loss, holds, self.dims.dp)
        out = {"loss": loss.item(), "grad_norm": grad_norm.item(), "lr": lr, "skipped": int(not finite),
               "data_wait_s": data_s}
        if self.mixture:
            out |= self.loader.step_metrics()  # token share, weights, epochs per domain of this step
        if domain_losses is not None:
            holds = not self.launch.distributed or self.tp_rank == 0
            out["domain_loss"] = domain_losses.reduce(holds, self.launch.distributed)
            self.loader.update_losses(out["domain_loss"])  # identical on every rank: the next step's weights
        if self.scaler.enabled:
            out |= {"loss_scale": scale, "overflows": self.scaler.overflows}
        self.guards.check(self.state.step, out["loss"], out["grad_norm"], finite, self.scaler, self.model_parts)
        return out

    def _alert(self, kind: str, message: str, **fields) -> None:
        self.metrics.event("alert", self.state.step, kind=kind, message=message, **fields)
        self.console.print(f"alert {kind} at step {self.state.step}: {message}")
        self.monitor.count_alert(kind)

    def train(self) -> None:
        cfg = self.cfg
        self.console.print(self.summary())
        with self._stop_on_signals():
            try:
                self.monitor.start()
                while self.state.step < cfg.train.steps:
                    t0 = time.perf_counter()
                    out = self.train_step()
                    self.fault.slow_step()
                    ranks, stop = self._exchange(time.perf_counter() - t0)
                    dt = max(r["step_time_s"] for r in ranks)  # the step takes as long as its slowest rank
                    self._step_s = dt if self._step_s is None else 0.9 * self._step_s + 0.1 * dt
                    tokens_per_s = self.tokens_per_step / dt
                    record = {"step": self.state.step, **out, "tokens_per_s": tokens_per_s,
                              "mfu": self.flops_per_token * tokens_per_s / self.peak_flops, "step_time_s": dt,
                              "tokens_seen": self.state.tokens_seen, "data_epoch": round(self.loader.epoch, 6),
                              "peak_mem_gib": round(peak_memory_gib(self.device), 4)}
                    if self.launch.distributed:
                        record["rank_step_time_s"] = [round(r["step_time_s"], 5) for r in ranks]
                    self.metrics.log(record)
                    self.console.update(record)
                    self.monitor.after_step(self.state.step, record, ranks)
                    self._flush_cold_events()
                    if stop is not None:
                        self.save("macro")
                        self.checkpointer.finish()
                        if self.cold is not None and not self.cold.wait(timeout=60):
                            self.console.print("a cold backup is still uploading; stopping without waiting for it")
                        raise TrainingInterrupted(stop, self.state.step)
                    last = self.state.step == cfg.train.steps
                    tier = self.checkpointer.due(self.state.step)
                    if tier and not (last and cfg.checkpoint.at_end):
                        self.save(tier)
                    self.fault.after_step(self.state.step)
                if cfg.checkpoint.at_end and self._saved_step != self.state.step:
                    self.save("macro")
                self.checkpointer.finish()
                if self.cold is not None:
                    self.cold.wait()  # the last backup completes before the run reports done
            finally:
                self._flush_cold_events()
                self.monitor.close()
                self.console.close()
                self.metrics.close()

    def _exchange(self, step_time_s: float) -> tuple[list[dict[str, float]], int | None]:
        """Every rank's numbers for this step (RANK_FIELDS: its own step time measured up to here, its sections,
        its memory) and the stop signal, agreed by every rank so that all of them save at the same step: one
        all_gather of a few floats per step. A rank's step time runs from the start of its step to its arrival
        here; the previous exchange lined the ranks up, so a rank that arrives late has the longest time."""
        local = [step_time_s, *(self.sections.get(k, 0.0) for k in RANK_FIELDS[1:-1]),
                 float(memory_in_use_bytes(self.device)), float(self._stop_signal or 0)]
        if not self.launch.distributed:
            return [dict(zip(RANK_FIELDS, local))], self._stop_signal
        mine = torch.tensor(local, dtype=torch.float64, device=self.device)
        rows = [torch.empty_like(mine) for _ in range(self.launch.world_size)]
        torch.distributed.all_gather(rows, mine)
        rows = torch.stack(rows).tolist()
        stop = int(max(row[-1] for row in rows))
        return [dict(zip(RANK_FIELDS, row)) for row in rows], stop or None

    def close(self) -> None:
        if self.launch.distributed and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()

    def save(self, tier: str) -> None:
        if self.checkpointer.save(self.state.step, tier) is not None:
            self._saved_step = self.state.step
            self._advise_interval()

    def _advise_interval(self) -> None:
        """Young/Daly's interval from this run's save cost and step time (rank 0's, so that every rank agrees):
        logged once, and applied to the micro tier when its interval is "auto"."""
        auto = self.cfg.checkpoint.micro.interval == "auto"
        if self._advised and not auto or not self._step_s:
            return
        measured = torch.tensor([self.checkpointer.last_save_s or 0.0, self._step_s], dtype=torch.float64,
                                device=self.device)
        if self.launch.distributed:
            torch.distributed.broadcast(measured, src=0)
        ckpt = self.cfg.checkpoint
        mtbf_h = ckpt.mtbf_hours or ckpt.gpu_mtbf_hours / self.launch.world_size
        advice = advise(float(measured[0]), float(measured[1]), mtbf_h * 3600)
        if auto:
            self.checkpointer.micro_interval = advice.optimum_steps
        if not self._advised:
            self.console.print(advice.describe())
        self.metrics.event("checkpoint_interval", self.state.step, **advice.as_event(),
                           micro_interval=self.checkpointer.micro_interval)
        self._advised = True

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
