"""The hang watchdog (`fault.hang_timeout_s`): a thread on every rank that needs none of the collectives it
watches. Every PERIOD_S it publishes this rank's heartbeat in torchrun's store over a connection of its own
(the agents' store lives in the launcher, so it answers while a rank is stopped), reads every rank's, and
judges them (hangs.judge): a rank whose heartbeat stopped, or whose training thread got nowhere while the others
wait for it, has hung once `hang_timeout_s` passed. The first watchdog to see it writes the verdict into the
store; then every live rank dumps its threads' Python stacks and its flight record (torch's record of its
last collectives: which group, which operation, entered or completed) under <run.dir>/logs/hang/, the hung
processes are killed (SIGKILL: a stopped one by a live rank on its host, a stuck one by its own watchdog) and
the others exit with HANG_EXIT, so torchrun's restart (--max-restarts) takes over at once.

It reads only what the loop already keeps — the step counter (a Python int), the flight recorder's per-group
counts, the training thread's I/O counters in /proc — and adds nothing to a step: no host sync, no collective.
"""

import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from bessemer.hangs import (
    HANG_EXIT,
    VERDICT,
    Seen,
    describe,
    hang_dir,
    judge,
    observe,
    write_json,
)
from bessemer.parallel.dims import Launch

PERIOD_S = 1.0  # between heartbeats (and judgements)
FLOOR_S = 120.0  # "auto": at least this long ...
STEP_FACTOR = 10  # ... and this many mean step times, ...
TIMEOUT_SHARE = 0.5  # ... and at most this share of parallel.timeout_s (found before the collectives time out)
DUMP_WAIT_S = 10.0  # the first watchdog waits this long for every live rank's dump before the verdict is final
STORE_TIMEOUT_S = 30.0  # one store operation of the watchdog's own connection


def auto_timeout(step_time_s: float | None, parallel_timeout_s: float) -> float:
    """`fault.hang_timeout_s = "auto"`: max(FLOOR_S, STEP_FACTOR x the mean step time), at most TIMEOUT_SHARE of
    parallel.timeout_s."""
    return min(max(FLOOR_S, STEP_FACTOR * (step_time_s or 0.0)), TIMEOUT_SHARE * parallel_timeout_s)


def _short(path: str) -> str:
    """A source path as the project or its library knows it: bessemer/train/step.py, torch/..."""
    for marker in ("/bessemer/", "/site-packages/"):
        at = path.rfind(marker)
        if at >= 0:
            return path[at + 1:] if marker == "/bessemer/" else path[at + len(marker):]
    return os.path.basename(path)


def where(frame, limit: int = 3) -> list[str]:
    """The innermost frame of a thread and the innermost frames of bessemer's own code below it ("file:line
    function"), `limit` in all."""
    out, first = [], True
    while frame is not None and len(out) < limit:
        name = _short(frame.f_code.co_filename)
        if first or name.startswith("bessemer/"):
            out.append(f"{name}:{frame.f_lineno} {frame.f_code.co_name}")
        first = False
        frame = frame.f_back
    return out


def flight_record(entries: bool) -> dict:
    """torch's flight record of this process's collectives (gloo's, and NCCL's on GPUs): per group the counts of
    collectives entered and completed (`pg_status`), and with `entries` the last ones themselves."""
    import torch._C._distributed_c10d as c10d

    record = json.loads(c10d._dump_fr_trace_json(entries, False))
    nccl = getattr(c10d, "_dump_nccl_trace_json", None)  # CUDA builds: NCCL's collectives are recorded apart
    if nccl is not None:
        try:
            other = json.loads(nccl(entries, False))
            record["pg_status"] = {**other.get("pg_status", {}), **record.get("pg_status", {})}
            record["entries"] = other.get("entries", []) + record.get("entries", [])
        except (RuntimeError, TypeError, ValueError):
            pass
    return record


class HangWatchdog:
    """`timeout_s`: fault.hang_timeout_s (a number, or "auto"); `step`: reads the training loop's step counter.
    Start it when the loop starts; it judges from the first step this attempt completes on."""

    def __init__(self, timeout_s: float | str, parallel_timeout_s: float, launch: Launch, attempt: int,
                 run_dir: Path, store, step: Callable[[], int]):
        self.fixed = None if timeout_s == "auto" else float(timeout_s)
        self.parallel_timeout_s = parallel_timeout_s
        self.launch, self.attempt, self.run_dir, self.store, self.step = launch, attempt, Path(run_dir), store, step
        self.rank = launch.rank
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.prefix = f"bessemer/hang/{attempt}/"
        self.keys = [self._key("hb", r) for r in range(launch.world_size)]
        self.main = threading.main_thread()
        self.groups: dict[str, tuple[str, str]] = {}  # flight recorder's local group id -> (name, description)
        self.seen: dict[int, Seen] = {}
        self.seq = 0
        self.armed_at: tuple[float, int] | None = None  # (time, step) of the first step this attempt completed
        self.step_time_s: float | None = None
        self.first_step = step()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hang-watchdog", daemon=True)
        self._failed = 0

    def _key(self, kind: str, rank: int | None = None) -> str:
        return self.prefix + kind + ("" if rank is None else f"/{rank}")

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stop watching; the other ranks stop counting this rank (its heartbeat says closed)."""
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(timeout=STORE_TIMEOUT_S)

    @property
    def timeout_s(self) -> float:
        return self.fixed if self.fixed is not None else auto_timeout(self.step_time_s, self.parallel_timeout_s)

    # ------------------------------------------------------------------------------------------ the thread

    def _run(self) -> None:
        while True:
            try:
                self._beat()
                self._failed = 0
            except Exception as e:  # noqa: BLE001 - the store unreachable: training goes on unwatched
                self._failed += 1
                if self._failed == 1:
                    print(f"hang watchdog (rank {self.rank}): {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            if self._stop.wait(PERIOD_S):
                break
        try:
            self.store.set(self.keys[self.rank], json.dumps({"closed": True}))
        except Exception as e:  # noqa: BLE001 - nobody left to tell but the log
            print(f"hang watchdog (rank {self.rank}): closing: {type(e).__name__}: {e}", file=sys.stderr, flush=True)

    def _beat(self) -> None:
        now = time.monotonic()
        self.seq += 1
        self.store.set(self.keys[self.rank], json.dumps(self._heartbeat()))
        verdict_key = self._key("verdict")
        if self.store.check([verdict_key]):
            self._end(json.loads(self.store.get(verdict_key)), leader=False)
        step = self.step()
        if self.armed_at is None:
            if step > self.first_step:
                self.armed_at = (now, step)
            return
        if step > self.armed_at[1]:
            self.step_time_s = (now - self.armed_at[0]) / (step - self.armed_at[1])
        if not self.store.check(self.keys):
            return
        records = {}
        for r, raw in enumerate(self.store.multi_get(self.keys)):
            rec = json.loads(raw)
            if rec.get("closed"):  # finished: its part is done
                self.seen.pop(r, None)
            else:
                records[r] = rec
        observe(self.seen, records, now)
        verdict = judge(records, self.seen, now, self.timeout_s)
        if verdict is None:
            return
        verdict |= {"attempt": self.attempt, "time": round(time.time(), 3), "detected_by": self.rank,
                    "run_id": self.launch.run_id}
        mine = json.dumps(verdict)
        won = self.store.compare_set(verdict_key, "", mine) == mine.encode()
        self._end(verdict if won else json.loads(self.store.get(verdict_key)), leader=won)

    def _heartbeat(self) -> dict:
        status = flight_record(entries=False).get("pg_status", {})
        if any(pg not in self.groups for pg in status):  # a group's first collectives: learn its name once
            for e in flight_record(entries=True).get("entries", []):
                name, desc = (e.get("process_group") or ["", ""])[:2]
                self.groups[str(e["pg_id"])] = (name, desc if desc != "undefined" else "")
            for pg in status:  # not among the entries kept: it stays unnamed (its id is local to this rank)
                self.groups.setdefault(pg, (f"#{pg}", ""))
        groups, completed = {}, 0
        for pg, s in status.items():
            name, desc = self.groups.get(pg, (f"#{pg}", ""))
            entered, done = int(s["last_enqueued_collective"]), int(s["last_completed_collective"])
            groups[name] = [desc, entered, done]
            completed += max(done, 0)
        step = self.step()
        frame = sys._current_frames().get(self.main.ident)
        return {"seq": self.seq, "host": self.host, "pid": self.pid, "step": step,
                "progress": [step, completed, self._io_bytes()], "groups": groups, "where": where(frame)}

    def _io_bytes(self) -> int:
        """The bytes the training thread read and wrote (a long checkpoint write is progress; a blocked one is
        not); 0 where /proc does not say."""
        try:
            with open(f"/proc/self/task/{self.main.native_id}/io", encoding="ascii") as f:
                fields = dict(line.split(": ") for line in f.read().splitlines() if ": " in line)
            return int(fields["rchar"]) + int(fields["wchar"])
        except (OSError, KeyError, ValueError):
            return 0

    # ------------------------------------------------------------------------------------------ the end

    def _end(self, verdict: dict, leader: bool) -> None:
        """Dump, agree on the final verdict, kill the hung processes, leave: never returns."""
        out = hang_dir(self.run_dir, verdict)
        try:
            summary = self._dump(out)
            self.store.set(self._key("dump", self.rank), json.dumps(summary))
            final_key = self._key("final")
            deadline = time.monotonic() + DUMP_WAIT_S
            if leader:
                stopped = {c["rank"] for c in verdict["culprits"] if c["state"] == "stopped"}
                live = [r for r in self.seen if r not in stopped]
                keys = [self._key("dump", r) for r in live]
                while time.monotonic() < deadline and not self.store.check(keys):
                    time.sleep(0.2)
                dumps = {r: json.loads(self.store.get(k)) for r, k in zip(live, keys) if self.store.check([k])}
                final = {**verdict, "dumps": dumps, "dir": str(out)}
                self.store.set(final_key, json.dumps(final))
            else:
                while time.monotonic() < deadline + 5 and not self.store.check([final_key]):
                    time.sleep(0.2)
                final = (json.loads(self.store.get(final_key)) if self.store.check([final_key])
                         else {**verdict, "dir": str(out)})
            write_json(out / VERDICT, final)
            print(f"hang: {describe(final)}: see {out}", file=sys.stderr, flush=True)
        except Exception as e:  # noqa: BLE001 - whatever failed, the attempt must still end
            final = verdict
            print(f"hang watchdog (rank {self.rank}): ending after {type(e).__name__}: {e}", file=sys.stderr,
                  flush=True)
        for c in final["culprits"]:
            if c["rank"] != self.rank and c["host"] == self.host and c["state"] == "stopped" and c.get("pid"):
                try:  # a stopped process can do nothing for itself; SIGKILL ends it stopped or not
                    os.kill(c["pid"], signal.SIGKILL)
                except OSError:
                    pass
        sys.stderr.flush()
        if any(c["rank"] == self.rank for c in final["culprits"]):
            os.kill(self.pid, signal.SIGKILL)  # hung: not waited for
        os._exit(HANG_EXIT)

    def _dump(self, out: Path) -> dict:
        """This rank's evidence: every thread's Python stack (rankN.txt), its flight record
        (rankN.flight_recorder.json), and a summary (rankN.json): where the training thread is, the collective
        it last entered and those it waits in."""
        out.mkdir(parents=True, exist_ok=True)
        frames = sys._current_frames()
        names = {t.ident: t.name for t in threading.enumerate()}
        record = flight_record(entries=True)
        entries = sorted(record.get("entries", []), key=lambda e: e.get("record_id", 0))
        status = record.get("pg_status", {})
        by_group = {str(e["pg_id"]): (e.get("process_group") or ["", ""])[:2] for e in entries}

        def described(e: dict) -> dict:
            name, desc = (e.get("process_group") or ["", ""])[:2]
            return {"op": e.get("profiling_name"), "group": name, "desc": desc if desc != "undefined" else "",
                    "seq": e.get("collective_seq_id")}

        waits = []
        for pg, s in status.items():
            entered = int(s["last_enqueued_collective"])
            if entered > int(s["last_completed_collective"]):
                e = next((e for e in reversed(entries) if str(e["pg_id"]) == pg
                          and e.get("collective_seq_id") == entered), None)
                name, desc = by_group.get(pg, (f"#{pg}", ""))
                waits.append(described(e) if e else {"op": None, "group": name, "desc": desc, "seq": entered})
        summary = {"rank": self.rank, "host": self.host, "pid": self.pid, "step": self.step(),
                   "where": where(frames.get(self.main.ident)), "pending": waits,
                   "last": described(entries[-1]) | {"completed": entries[-1].get("retired")} if entries else None}
        with open(out / f"rank{self.rank}.txt", "w", encoding="utf-8") as f:
            f.write(f"rank {self.rank}, host {self.host}, pid {self.pid}, step {summary['step']}, "
                    f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n")
            for ident, frame in frames.items():
                label = " (training loop)" if ident == self.main.ident else ""
                f.write(f"\nThread {names.get(ident, '?')} ({ident}){label}, most recent call last:\n")
                f.write("".join(traceback.format_stack(frame)))
        write_json(out / f"rank{self.rank}.flight_recorder.json", record)
        write_json(out / f"rank{self.rank}.json", summary)
        return summary
