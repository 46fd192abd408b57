"""Fault injection (`[fault]`): a rank that kills itself with SIGKILL — no cleanup, no exception handler,
the way a node dies — after a given step or halfway through that step's checkpoint save; or a rank that hangs
there, its process alive and its training thread blocked for good, the way a write to a dead NFS server blocks
(the hang watchdog, train/watchdog.py, must find it). Only in the first attempt of a job, so that an automatic
restart (`--max-restarts`) runs clean and must recover.

A slow rank (`fault.slow_rank`, `fault.slow_ms`) sleeps at the end of every step, in every attempt (a slow
node stays slow after a restart). The sleep comes after the step's last collective, so it lengthens only
that rank's own step time; the other ranks then wait for it in the end-of-step exchange, as they would for a
rank on a slow GPU or a busy host."""

import os
import signal
import time

from bessemer.config import FaultConfig


class FaultInjector:
    def __init__(self, cfg: FaultConfig, rank: int, attempt: int):
        self.armed = cfg.kill_rank == rank and attempt == 0 and cfg.kill_at_step > 0
        self.hangs = cfg.hang_rank == rank and attempt == 0 and cfg.hang_at_step > 0
        self.slow_s = cfg.slow_ms / 1000 if cfg.slow_rank == rank else 0.0
        self.cfg = cfg

    def _die(self) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    def _hang(self) -> None:
        while True:
            time.sleep(3600)

    def after_step(self, step: int) -> None:
        if self.armed and not self.cfg.kill_during_save and step == self.cfg.kill_at_step:
            self._die()
        if self.hangs and not self.cfg.hang_during_save and step == self.cfg.hang_at_step:
            self._hang()

    def slow_step(self) -> None:
        if self.slow_s > 0:
            time.sleep(self.slow_s)

    def during_save(self, step: int) -> None:
        if self.armed and self.cfg.kill_during_save and step == self.cfg.kill_at_step:
            self._die()
        if self.hangs and self.cfg.hang_during_save and step == self.cfg.hang_at_step:
            self._hang()
