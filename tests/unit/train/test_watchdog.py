"""The hang watchdog (bessemer/train/watchdog.py) in one process: two watchdogs, "ranks" 0 and 1 of a job, share a
real TCPStore (torchrun's store stands in); rank 1 beats once and then never again (its process stopped), rank 0
keeps stepping. Rank 0's watchdog writes the verdict naming rank 1 into the store, once the hang timeout has
passed and not before; ending the process is replaced by a record of the verdict. Also: the "auto" timeout and
the frames a heartbeat names."""

import datetime
import re
import socket
import sys
import threading
import time
from types import SimpleNamespace

import pytest
import torch.distributed as dist

from bessemer.config import FaultConfig
from bessemer.parallel.dims import Launch
from bessemer.train import fault
from bessemer.train import watchdog as wd
from bessemer.train.watchdog import HangWatchdog, auto_timeout, where


def test_auto_timeout_is_ten_steps_with_a_floor_and_below_the_collective_timeout():
    assert auto_timeout(None, 600) == 120  # before the first step is measured: the floor
    assert auto_timeout(0.5, 600) == 120
    assert auto_timeout(20.0, 600) == 200
    assert auto_timeout(100.0, 600) == 300  # at most half of parallel.timeout_s
    assert auto_timeout(None, 60) == 30


def test_a_heartbeat_names_the_innermost_frame_and_the_project_frames_below_it(monkeypatch):
    """A rank hung inside its checkpoint save (fault.hang_during_save): the innermost frame, then bessemer's."""
    release = threading.Event()

    def sleep(seconds):
        release.wait()
        raise InterruptedError

    monkeypatch.setattr(fault, "time", SimpleNamespace(sleep=sleep))
    injector = fault.FaultInjector(FaultConfig(hang_rank=0, hang_at_step=10, hang_during_save=True), rank=0, attempt=0)
    thread = threading.Thread(target=lambda: pytest.raises(InterruptedError, injector.during_save, 10))
    thread.start()
    try:
        while (frame := sys._current_frames().get(thread.ident)) is None or not where(frame)[0].endswith(" wait"):
            time.sleep(0.01)
        frames = where(frame)
    finally:
        release.set()
        thread.join()
    assert re.fullmatch(r"threading\.py:\d+ wait", frames[0]), frames
    assert [re.sub(r":\d+ ", " ", f) for f in frames[1:]] == ["bessemer/train/fault.py _hang",
                                                              "bessemer/train/fault.py during_save"]


@pytest.fixture
def store():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    master = dist.TCPStore("127.0.0.1", port, is_master=True, timeout=datetime.timedelta(seconds=10),
                           wait_for_workers=False)

    def client():
        return dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=10),
                             wait_for_workers=False)

    yield client
    del master


def test_a_rank_that_stops_beating_is_named_once_the_timeout_has_passed(store, tmp_path, monkeypatch):
    monkeypatch.setattr(wd, "PERIOD_S", 0.05)
    timeout = 1.0
    steps = {0: 0, 1: 0}
    ended: list[tuple[dict, bool]] = []
    found = threading.Event()

    def end(self, verdict, leader):  # instead of dumping, killing and leaving
        ended.append((verdict, leader))
        found.set()
        self._stop.set()

    monkeypatch.setattr(HangWatchdog, "_end", end)
    dogs = {r: HangWatchdog(timeout, 600, Launch(rank=r, world_size=2, run_id="t"), 0, tmp_path, store(),
                            lambda r=r: steps[r]) for r in (0, 1)}
    dogs[1]._beat()  # rank 1 beats once, then stops for good
    dogs[0].start()
    started = time.monotonic()
    try:
        while not found.wait(0.05) and time.monotonic() - started < 30:
            steps[0] += 1  # rank 0 keeps stepping (it will be stuck waiting in reality; here it moves)
        elapsed = time.monotonic() - started
    finally:
        dogs[0].close()
    (verdict, leader), = ended
    assert leader and verdict["detected_by"] == 0 and verdict["run_id"] == "t" and verdict["attempt"] == 0
    assert [(c["rank"], c["state"]) for c in verdict["culprits"]] == [(1, "stopped")]
    assert verdict["culprits"][0]["pid"] == dogs[1].pid and verdict["timeout_s"] == timeout
    assert elapsed > timeout  # not before the timeout (a bound, not a speed claim)
    assert store().get("bessemer/hang/0/verdict")  # the first watchdog's verdict is the one every rank follows
