"""When the trainer saves and what it restores: the tier due after each step, the Young/Daly interval from the
measured save cost, the cold tier's backups, the save on a stop signal and at the end, and recovery on resume."""

from pathlib import Path

import torch

from bessemer.checkpoint.interval import advise
from bessemer.checkpoint.paths import redact_url, resume_refusal, tier_dirs
from bessemer.checkpoint.store import Checkpointer
from bessemer.config import JobConfig
from bessemer.errors import BessemerError
from bessemer.parallel.dims import Launch
from bessemer.train.reporting import Reporter
from bessemer.train.state import TrainState


class CheckpointCadence:
    """Drives `checkpointer` (and rank 0's `cold` tier) for the trainer. `cold_events` is where the cold tier's
    uploader thread leaves its outcomes; they are written from the training thread after each step."""

    def __init__(self, cfg: JobConfig, run_dir: Path, checkpointer: Checkpointer, cold, cold_events: list[tuple],
                 reporter: Reporter, state: TrainState, launch: Launch, device: torch.device):
        self.cfg, self.run_dir, self.checkpointer, self.cold = cfg, run_dir, checkpointer, cold
        self.cold_events, self.reporter, self.state = cold_events, reporter, state
        self.launch, self.device = launch, device
        self.saved_step: int | None = None  # the step of the last checkpoint saved or loaded
        self.step_s: float | None = None  # moving average of the step time (for the checkpoint interval)
        self._advised = False

    def restore(self, resume: bool) -> tuple[int, str, Path] | None:
        """With `resume`: load the newest intact checkpoint of any tier (damaged ones are skipped, with an
        event); None when there is none (a restart before the first checkpoint starts over)."""
        # Rank 0 lists (node-local micro checkpoints from the commit record) and every rank gets its list: all
        # decide alike and try the same checkpoints in the same order.
        listed = self.checkpointer.listing()
        if listed and not resume:
            raise BessemerError(resume_refusal(self.cfg, listed[0][0]))
        latest = listed[0][0] if listed else None
        if not resume:
            return None
        cold = self.cfg.checkpoint.cold
        found = self.checkpointer.recover(self.run_dir, self.cold, cold_available=bool(cold.url),
                                          cold_url=redact_url(cold.url), listed=listed)
        skipped = [f"{f['tier']} step {step}: {f['reason']}" for name, step, f in self.reporter.early
                   if name == "checkpoint_skipped"]
        if found is None and (latest is not None or skipped):  # there were checkpoints, none of them usable
            where = [*map(str, tier_dirs(self.cfg.checkpoint, self.run_dir).values()),
                     *([redact_url(cold.url)] if cold.url else [])]
            raise BessemerError(f"no intact checkpoint to resume from in {', '.join(where)} ({'; '.join(skipped)})")
        self.saved_step = found[0] if found else None
        return found

    def account(self, step_time_s: float) -> None:
        """After each step: its time into the moving average; the cold tier's news and the checkpoints committed
        in the background into metrics.jsonl."""
        self.step_s = step_time_s if self.step_s is None else 0.9 * self.step_s + 0.1 * step_time_s
        self.flush_cold_events()
        self.checkpointer.report(self.state.step)

    def save_if_due(self) -> None:
        """Save to the tier that is due after this step (the last step's save is the end-of-run one)."""
        tier = self.checkpointer.due(self.state.step)
        last = self.state.step == self.cfg.train.steps
        if tier and not (last and self.cfg.checkpoint.at_end):
            self.save(tier)

    def save(self, tier: str) -> None:
        if self.checkpointer.save(self.state.step, tier) is not None:
            self.saved_step = self.state.step
            self._advise_interval()

    def stop(self) -> None:
        """A stop signal: save to the macro tier and wait for the save (and, a while, for the cold backup)."""
        self.save("macro")
        self.checkpointer.finish()
        if self.cold is not None and not self.cold.wait(timeout=60):
            self.reporter.console.print("a cold backup is still uploading; stopping without waiting for it")

    def finish(self) -> None:
        """The end of training: the final save (checkpoint.at_end), the save in flight, the last backup."""
        if self.cfg.checkpoint.at_end and self.saved_step != self.state.step:
            self.save("macro")
        self.checkpointer.finish()
        if self.cold is not None:
            self.cold.wait()  # the last backup completes before the run reports done

    def flush_cold_events(self) -> None:
        while self.cold is not None and self.cold_events:
            name, step, fields = self.cold_events.pop(0)
            self.reporter.event(name, step, **fields)

    def _advise_interval(self) -> None:
        """Young/Daly's interval from this run's save cost and step time (rank 0's, so that every rank agrees):
        logged once, and applied to the micro tier when its interval is "auto"."""
        auto = self.cfg.checkpoint.micro.interval == "auto"
        if self._advised and not auto or not self.step_s:
            return
        measured = torch.tensor([self.checkpointer.last_save_s or 0.0, self.step_s], dtype=torch.float64,
                                device=self.device)
        if self.launch.distributed:
            torch.distributed.broadcast(measured, src=0)
        ckpt = self.cfg.checkpoint
        mtbf_h = ckpt.mtbf_hours or ckpt.gpu_mtbf_hours / self.launch.world_size
        advice = advise(float(measured[0]), float(measured[1]), mtbf_h * 3600)
        if auto:
            self.checkpointer.micro_interval = advice.optimum_steps
        if not self._advised:
            self.reporter.console.print(advice.describe())
        self.reporter.metrics.event("checkpoint_interval", self.state.step, **advice.as_event(),
                                    micro_interval=self.checkpointer.micro_interval)
        self._advised = True
