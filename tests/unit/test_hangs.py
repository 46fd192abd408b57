"""The hang watchdog's rules (bessemer/hangs.py) on heartbeats written out by hand: a stopped rank, a rank stuck in its
own work while the others wait, a rank behind the others, every rank waiting; no verdict while anything moves or
while nobody waits; the one line, the event, and the dump files read back (what `bessemer doctor --run-dir` and
the launcher read)."""

import json
import subprocess
import sys

from bessemer.hangs import (
    Seen,
    append_hang_event,
    describe,
    hang_dir,
    hang_event,
    judge,
    latest_verdict,
    observe,
    read_verdicts,
    summarize,
    write_json,
)

T = 20.0  # the hang timeout of these tests


def beat(seq, step, groups=None, completed=0, where=("bessemer/train/step.py:1 __call__",)):
    """A heartbeat: `groups` maps a group name to (description, entered, completed)."""
    return {"seq": seq, "host": "h", "pid": 100 + seq % 7, "step": step, "progress": [step, completed, 0],
            "groups": {name: list(g) for name, g in (groups or {}).items()}, "where": list(where)}


def watch(first: dict, later: dict, after: float = T + 5) -> dict | None:
    """A watchdog that saw `first` at time 0 and `later` `after` seconds on: its verdict."""
    seen: dict[int, Seen] = {}
    observe(seen, first, 0.0)
    observe(seen, later, after)
    return judge(later, seen, after, T)


def test_a_rank_whose_heartbeat_stopped_has_hung():
    first = {r: beat(1, 7) for r in range(4)}
    later = {r: beat(30, 8, {"5": ("mesh_tp", 10, 9)}) for r in (0, 1, 3)} | {2: first[2]}
    verdict = watch(first, later)
    assert [(c["rank"], c["state"]) for c in verdict["culprits"]] == [(2, "stopped")]
    # The job hung where the waiting ranks stand; the stopped rank's own step is its last heartbeat's.
    assert verdict["culprits"][0]["silent_s"] == T + 5 and verdict["step"] == 8 and verdict["culprits"][0]["step"] == 7
    assert "hung at step 8: stopped (no heartbeat for 25 s), last heartbeat (step 7) in " in describe(verdict)
    assert [w["rank"] for w in verdict["waiting"]] == [0, 1, 3]
    assert watch(first, later, after=T - 1) is None  # not yet


def test_nothing_has_hung_while_ranks_make_progress():
    first = {r: beat(1, 7) for r in range(4)}
    later = {r: beat(30, 8 if r else 7, {"5": ("mesh_tp", 10, 9)}) for r in range(4)}
    later[0]["progress"][2] = 4096  # rank 0 still writes a checkpoint: its I/O moves
    assert watch(first, later) is None


def test_a_rank_stuck_outside_a_collective_while_the_others_wait_in_one_has_hung():
    first = {r: beat(1, 10, {"0": ("default_pg", 44 if r != 1 else 43, 43)}, completed=43) for r in range(4)}
    later = {r: beat(30, 10, {"0": ("default_pg", 44, 43)}, completed=43) for r in (0, 2, 3)}
    later[1] = beat(30, 10, {"0": ("default_pg", 43, 43)}, completed=43,
                    where=("bessemer/train/fault.py:31 _hang", "bessemer/checkpoint/store.py:176 _save_sync"))
    for r, rec in first.items():
        rec["progress"] = later[r]["progress"]  # nobody moved in 25 s
    verdict = watch(first, later)
    assert [(c["rank"], c["state"]) for c in verdict["culprits"]] == [(1, "stuck")]


def test_every_rank_busy_outside_collectives_is_no_hang():
    """A long compilation on every rank, or rank 0 alone finishing a commit after the others closed: nobody
    waits for anybody."""
    first = {r: beat(1, 10) for r in range(4)}
    later = {r: beat(30, 10) for r in range(4)}
    assert watch(first, later) is None
    assert watch({0: beat(1, 10)}, {0: beat(30, 10)}) is None


def test_the_rank_behind_a_collective_the_others_wait_in_has_hung():
    groups = {0: {"7": ("mesh_dp_shard", 12, 11)}, 1: {"7": ("mesh_dp_shard", 11, 11), "8": ("mesh_tp", 3, 2)},
              2: {"8": ("mesh_tp", 3, 2)}}
    first = {r: beat(1, 5, g) for r, g in groups.items()}
    later = {r: beat(30, 5, g) for r, g in groups.items()}
    verdict = watch(first, later)
    assert [(c["rank"], c["state"]) for c in verdict["culprits"]] == [(1, "behind")]


def test_every_rank_waiting_and_none_behind_names_them_all():
    first = {r: beat(1, 5, {"7": ("mesh_dp_shard", 12, 11)}) for r in range(2)}
    later = {r: beat(30, 5, {"7": ("mesh_dp_shard", 12, 11)}) for r in range(2)}
    assert [c["state"] for c in watch(first, later)["culprits"]] == ["waiting", "waiting"]


def stopped_verdict(tmp_path=None) -> dict:
    verdict = {"timeout_s": T, "step": 7, "attempt": 0, "time": 1_800_000_000.0, "run_id": "r1",
               "culprits": [{"rank": 2, "host": "h2", "pid": 12, "step": 7, "state": "stopped", "silent_s": 25.0,
                             "where": ["torch/_ops.py:882 redispatch", "bessemer/train/step.py:137 forward_backward"],
                             "pending": [{"group": "12", "desc": "mesh_tp", "seq": 237}]}],
               "waiting": [{"rank": r, "host": "h", "pid": r, "step": 8, "where": [],
                            "pending": [{"group": "12", "desc": "mesh_tp", "seq": 237}]} for r in (0, 1)],
               "dumps": {"0": {"rank": 0, "where": ["bessemer/parallel/fsdp.py:41 __call__"],
                               "pending": [{"op": "gloo:all_reduce", "group": "12", "desc": "mesh_tp", "seq": 237}]}}}
    if tmp_path is not None:
        verdict["dir"] = str(hang_dir(tmp_path, verdict))
    return verdict


def test_the_line_names_rank_host_process_frame_and_collective():
    line = describe(stopped_verdict())
    assert line == ("rank 2 (host h2, pid 12) hung at step 7: stopped (no heartbeat for 25 s), last heartbeat in "
                    "torch/_ops.py:882 redispatch < bessemer/train/step.py:137 forward_backward, inside "
                    "gloo:all_reduce #237 on mesh_tp; ranks 0, 1 waited in gloo:all_reduce #237 on mesh_tp")
    stuck = stopped_verdict()
    stuck["culprits"][0] |= {"state": "stuck", "pending": []}
    assert "no progress for 25 s, not in a collective, in torch/_ops.py:882" in describe(stuck)


def test_the_event_and_the_files_read_back(tmp_path):
    verdict = stopped_verdict(tmp_path)
    out = hang_dir(tmp_path, verdict)
    write_json(out / "verdict.json", verdict)
    write_json(out / "rank0.json", {"rank": 0, "host": "h", "pid": 5, "step": 8, "where": ["a.py:1 f"],
                                    "pending": verdict["dumps"]["0"]["pending"], "last": None})
    write_json(out / "rank0.flight_recorder.json", {"entries": []})  # not a summary: not read as one
    (out / "rank0.txt").write_text("Thread MainThread\n")
    assert [v["dir"] for v in read_verdicts(tmp_path)] == [str(out)]
    assert latest_verdict(tmp_path, 0, run_id="r1")["step"] == 7
    assert latest_verdict(tmp_path, 0, run_id="another launch") is None  # a resumed launch counts attempts anew
    assert latest_verdict(tmp_path, 0, since=verdict["time"] + 1) is None
    assert latest_verdict(tmp_path, 1) is None
    step, fields = hang_event(verdict)
    assert step == 7 and fields["ranks"] == [2] and fields["hosts"] == ["h2"] and fields["message"] == describe(verdict)
    append_hang_event(tmp_path / "metrics.jsonl", verdict)
    event = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert event["event"] == "hang" and event["step"] == 7 and event["dumps"] == str(out)
    (summary,) = summarize(tmp_path)
    assert summary["culprits"] == [2] and summary["no_dump"] == [2] and [r["rank"] for r in summary["ranks"]] == [0]
    assert summary["message"] == describe(verdict)


def test_doctor_reads_the_dumps_without_torch(tmp_path):
    verdict = stopped_verdict(tmp_path)
    write_json(hang_dir(tmp_path, verdict) / "verdict.json", verdict)
    code = ("import sys\nfrom bessemer.cli import main\n"
            f"rc = main(['doctor', '--run-dir', {str(tmp_path)!r}])\n"
            "assert 'torch' not in sys.modules, 'torch imported'\nsys.exit(rc)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1, proc.stderr  # the run had a hang
    assert "1 hang(s)" in proc.stdout and "rank 2 (hung): no dump" in proc.stdout and describe(verdict) in proc.stdout
    clean = tmp_path / "clean"
    clean.mkdir()
    proc = subprocess.run([sys.executable, "-m", "bessemer.cli", "doctor", "--run-dir", str(clean), "--json"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and json.loads(proc.stdout)["hangs"] == []
