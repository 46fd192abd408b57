"""Hangs, without torch: how the hang watchdog (train/watchdog.py) tells a hung rank from the ranks waiting for it
(`judge`, from every rank's heartbeat), the verdict's one line (`describe`) and `hang` event, and the files a hang
leaves under <run.dir>/logs/hang/ — read back by the launcher's supervisor (failures.py), the run report and
`bessemer doctor --run-dir`.

A heartbeat is what one rank's watchdog publishes every period: `seq` (counts the beats: it stops when the
process stops), `progress` (the training step, the collectives completed, the training thread's bytes read and
written: it stops when the training thread stops getting anywhere), `groups` (per process group: its name, its
description such as mesh_tp, the collectives entered and completed: one entered and not completed is a
collective the rank waits in), `where` (the training thread's innermost frames), `step`, `host`, `pid`.
"""

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from bessemer.proc import LOGS

HANG = "hang"  # under <run.dir>/logs/
HANG_EXIT = 124  # the exit status of a rank the watchdog ends because another one hung (the hung one is killed)
VERDICT = "verdict.json"


@dataclass
class Seen:
    """What one watchdog saw of one rank: its last heartbeat's `seq` and `progress`, and (on the watchdog's own
    monotonic clock, so no two hosts' clocks are compared) when each last changed."""

    seq: int
    progress: list
    beat_at: float
    progress_at: float


def observe(seen: dict[int, Seen], records: dict[int, dict], now: float) -> None:
    """Update `seen` with the heartbeats just read (rank -> record)."""
    for rank, rec in records.items():
        s = seen.get(rank)
        if s is None:
            seen[rank] = Seen(rec["seq"], rec["progress"], now, now)
            continue
        if rec["seq"] != s.seq:
            s.seq, s.beat_at = rec["seq"], now
        if rec["progress"] != s.progress:
            s.progress, s.progress_at = rec["progress"], now


def pending(rec: dict) -> list[dict]:
    """The collectives a rank has entered and not completed: {group, desc, seq} each."""
    return [{"group": name, "desc": desc, "seq": entered}
            for name, (desc, entered, completed) in rec.get("groups", {}).items() if entered > completed]


def _behind(records: dict[int, dict], waiting: list[int]) -> list[int]:
    """Ranks that have not yet entered a collective another rank waits in: on a group they share, their count of
    collectives entered is below the waiting rank's."""
    out = set()
    for w in waiting:
        for p in pending(records[w]):
            if p["group"].startswith("#"):  # a group this rank's watchdog has not named yet: ids are local
                continue
            for r, rec in records.items():
                mine = rec.get("groups", {}).get(p["group"])
                if r != w and mine is not None and mine[1] < p["seq"]:
                    out.add(r)
    return sorted(out)


def judge(records: dict[int, dict], seen: dict[int, Seen], now: float, timeout_s: float) -> dict | None:
    """The verdict on the heartbeats `records` (rank -> record; ranks that closed their watchdog left out), or None
    while nothing has hung. In order:
    1. ranks without a heartbeat for `timeout_s` have stopped (SIGSTOP, a machine that froze): they hung;
    2. otherwise, once every rank made no progress for `timeout_s` and some wait inside a collective: the ranks
       not inside one are stuck in their own work (a blocked write, a lock) and the others wait for them;
    3. or, all inside collectives, the ranks that never entered the collective another rank waits in;
    4. or all of them (every rank waits in a collective and none is behind: the verdict says so).
    Ranks that all made no progress with none in a collective are no verdict: nobody waits for anybody (a long
    compilation, rank 0 alone finishing a commit after the others closed)."""
    live = {r: rec for r, rec in records.items() if r in seen}
    silent = {r: now - seen[r].beat_at for r in live}
    idle = {r: now - seen[r].progress_at for r in live}
    stopped = [r for r in live if silent[r] > timeout_s]
    in_collective = [r for r in live if pending(live[r])]
    if stopped:
        culprits = {r: "stopped" for r in stopped}
    elif in_collective and all(idle[r] > timeout_s for r in live):
        behind = _behind(live, in_collective)
        if len(in_collective) < len(live):
            culprits = {r: "stuck" for r in live if r not in in_collective}
        elif behind:
            culprits = {r: "behind" for r in behind}
        else:
            culprits = {r: "waiting" for r in live}
    else:
        return None

    def info(rank: int, state: str | None) -> dict:
        rec = live[rank]
        out = {"rank": rank, "host": rec.get("host", "?"), "pid": rec.get("pid"), "step": rec.get("step"),
               "where": rec.get("where", []), "pending": pending(rec)}
        if state is not None:
            out |= {"state": state, "silent_s": round(silent[rank] if state == "stopped" else idle[rank], 1)}
        return out

    # The step the job hung at: where the ranks waiting for the hung ones stand (a stopped rank's own step is its
    # last heartbeat's, up to a period old), else the hung ranks' own.
    waiting = [r for r in live if r not in culprits]
    step = min(live[r].get("step", 0) for r in (waiting or culprits))
    return {"timeout_s": timeout_s, "step": step,
            "culprits": [info(r, state) for r, state in sorted(culprits.items())],
            "waiting": [info(r, None) for r in sorted(live) if r not in culprits]}


# ------------------------------------------------------------------------------------------------ the one line

def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def _where(frames: list[str]) -> str:
    return " < ".join(frames) if frames else "an unknown frame"


def _collective(p: dict, op: str | None = None) -> str:
    return f"{op + ' ' if op else ''}#{p['seq']} on {p['desc'] or p['group']}"


def _op(dumps: dict[int, dict], p: dict) -> str | None:
    """The operation (gloo:all_reduce, ...) of collective `p` (a group's n-th), from any rank's own dump: a stopped
    rank has none, but its peers in the same collective do (group names are the same on every rank)."""
    for dump in dumps.values():
        for q in dump.get("pending", []):
            if q["group"] == p["group"] and q["seq"] == p["seq"] and q.get("op"):
                return q["op"]
    return None


def describe(verdict: dict) -> str:
    """One line: who hung, on which host and process, where, and what the others wait in. Prefers what a rank's
    own dump says (taken when the hang was found) over its last heartbeat."""
    dumps = {int(r): d for r, d in verdict.get("dumps", {}).items()}
    parts = []
    for c in verdict["culprits"]:
        dump = dumps.get(c["rank"])
        where = (dump or c)["where"]
        head = f"rank {c['rank']} (host {c['host']}, pid {c['pid']}) hung at step {verdict['step']}: "
        inside = [_collective(p, p.get("op") or _op(dumps, p)) for p in (dump or c)["pending"]]
        if c["state"] == "stopped":  # what its last heartbeat said (at most a period before it stopped)
            last = f" (step {c['step']})" if c["step"] != verdict["step"] else ""
            text = (f"stopped (no heartbeat for {c['silent_s']:.0f} s), last heartbeat{last} in {_where(where)}"
                    + (f", inside {', '.join(inside)}" if inside else ""))
        elif c["state"] == "stuck":
            text = f"no progress for {c['silent_s']:.0f} s, not in a collective, in {_where(where)}"
        else:
            text = (f"no progress for {c['silent_s']:.0f} s"
                    + (", behind the others" if c["state"] == "behind" else "")
                    + (f", in {', '.join(inside)}" if inside else "") + f", in {_where(where)}")
        parts.append(head + text)
    waits: dict[str, list[int]] = {}
    for w in verdict.get("waiting", []):
        for p in (dumps.get(w["rank"]) or w)["pending"]:
            waits.setdefault(_collective(p, p.get("op") or _op(dumps, p)), []).append(w["rank"])
    line = "; ".join(parts)
    if waits:
        line += "; " + "; ".join(f"{_ranks(ranks)} waited in {what}" for what, ranks in waits.items())
    return line


def hang_event(verdict: dict) -> tuple[int, dict]:
    """The `hang` event of metrics.jsonl: (step, fields) with its evidence."""
    return verdict["step"], {
        "attempt": verdict.get("attempt"), "ranks": [c["rank"] for c in verdict["culprits"]],
        "hosts": sorted({c["host"] for c in verdict["culprits"]}), "timeout_s": verdict["timeout_s"],
        "culprits": verdict["culprits"], "waiting": verdict.get("waiting", []), "dumps": verdict.get("dir"),
        "message": describe(verdict)}


def append_hang_event(metrics: Path, verdict: dict) -> None:
    """Append the `hang` event to metrics.jsonl when no rank is left to write it (no restart followed)."""
    step, fields = hang_event(verdict)
    with open(metrics, "a", encoding="utf-8") as f:
        f.write(json.dumps({"event": "hang", "step": step, "time": round(time.time(), 3), **fields}) + "\n")


# ------------------------------------------------------------------------------------------------------ files

def hangs_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / LOGS / HANG


def hang_dir(run_dir: str | Path, verdict: dict) -> Path:
    """Where one hang's dumps go: per attempt and time of the verdict, so that a resumed launch (whose attempts
    count from 0 again) never mixes its dumps with an earlier launch's."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(verdict["time"]))
    return hangs_dir(run_dir) / f"attempt{verdict['attempt']}_{stamp}"


def write_json(path: Path, obj) -> None:
    """Whole or not at all (several ranks may write the same verdict)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, path)


def read_verdicts(run_dir: str | Path, attempt: int | None = None) -> list[dict]:
    """The verdicts under <run_dir>/logs/hang/ (of one attempt, or all), oldest first, each with `dir`."""
    out = []
    pattern = f"attempt{attempt}_*" if attempt is not None else "attempt*_*"
    for path in hangs_dir(run_dir).glob(f"{pattern}/{VERDICT}"):
        try:
            verdict = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        out.append({**verdict, "dir": str(path.parent)})
    return sorted(out, key=lambda v: v.get("time", 0))


def latest_verdict(run_dir: str | Path, attempt: int, since: float = 0.0, run_id: str | None = None) -> dict | None:
    """The newest verdict of `attempt` found at or after `since`, of the torchrun launch `run_id` if given."""
    found = [v for v in read_verdicts(run_dir, attempt)
             if v.get("time", 0) >= since and (run_id is None or v.get("run_id") == run_id)]
    return found[-1] if found else None


def summarize(run_dir: str | Path) -> list[dict]:
    """Every hang of a run directory, for `bessemer doctor --run-dir`: the verdict's line and, per rank, what its
    dump says (where its training thread was, the collective it was in or last entered) and its files. A hang
    directory without a verdict (the watchdog that found it died first) still lists its dumps."""
    out = []
    for d in sorted(p for p in hangs_dir(run_dir).glob("attempt*_*") if p.is_dir()):
        verdict = None
        try:
            verdict = json.loads((d / VERDICT).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass
        ranks = []
        dumps = [p for p in d.glob("rank*.json") if p.stem.removeprefix("rank").isdigit()]
        for summary in sorted(dumps, key=lambda p: int(p.stem.removeprefix("rank"))):
            try:
                dump = json.loads(summary.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            ranks.append({**dump, "stacks": str(d / f"rank{dump['rank']}.txt"),
                          "flight_recorder": str(d / f"rank{dump['rank']}.flight_recorder.json")})
        culprits = {c["rank"] for c in (verdict or {}).get("culprits", [])}
        dumped = {r["rank"] for r in ranks}
        out.append({"dir": str(d), "attempt": (verdict or {}).get("attempt"), "step": (verdict or {}).get("step"),
                    "message": describe(verdict) if verdict else "no verdict (the watchdog that found the hang "
                                                                 "did not finish): the dumps below",
                    "culprits": sorted(culprits), "ranks": ranks,
                    "no_dump": sorted(culprits - dumped)})
    return out
