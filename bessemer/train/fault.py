"""Fault injection (`[fault]`): a rank that kills itself with SIGKILL — no cleanup, no exception handler,
the way a node dies — after a given step or halfway through that step's checkpoint save. Only in the first
attempt of a job, so that an automatic restart (`--max-restarts`) runs clean and must recover."""

import os
import signal

from bessemer.config import FaultConfig


class FaultInjector:
    def __init__(self, cfg: FaultConfig, rank: int, attempt: int):
        self.armed = cfg.kill_rank == rank and attempt == 0 and cfg.kill_at_step > 0
        self.cfg = cfg

    def _die(self) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    def after_step(self, step: int) -> None:
        if self.armed and not self.cfg.kill_during_save and step == self.cfg.kill_at_step:
            self._die()

    def during_save(self, step: int) -> None:
        if self.armed and self.cfg.kill_during_save and step == self.cfg.kill_at_step:
            self._die()
