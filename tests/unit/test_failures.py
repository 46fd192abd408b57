"""The launcher's console story, fed torchrun's agent lines and rank 0's console lines as they arrive: one line
per failure, with the step it followed and where the restart resumed, from metrics.jsonl."""

import io
import json
import time

from bessemer.failures import FailureStory, attempts

AGENT = ("E1203 06:06:47.031000 8118 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: {code}) "
         "local_rank: {rank} (pid: 8125) of binary: /usr/bin/python\n")


def write(path, *records):
    with open(path, "a") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


def started(step):
    return {"event": "run_started", "step": step, "time": time.time()}


def story(tmp_path, max_restarts):
    (tmp_path / "logs").mkdir(exist_ok=True)
    out, err = io.StringIO(), io.StringIO()
    return FailureStory(tmp_path, 8, max_restarts, out=out, err=err), out, err


def test_a_restart_is_one_line_with_the_failed_step_and_where_it_resumed(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    write(metrics, {"event": "restart", "step": 40, "attempt": 1, "time": 0},  # an older launch: ignored
          {"event": "run_started", "step": 40, "time": 0}, {"step": 41, "loss": 1.0})
    s, out, err = story(tmp_path, max_restarts=1)
    write(metrics, started(0), *({"step": n, "loss": 1.0} for n in range(1, 71)))
    s.console("step 60/120  loss 6.1\n")
    s.agent("W1203 ... Sending process 8124 closing signal SIGTERM\n")
    s.console("SIGTERM: finishing step 71, then saving\n")  # the failed attempt's rank 0, being stopped
    s.agent(AGENT.format(code=-9, rank=3))
    s.console("[rank0] more from the failed attempt\n")
    write(metrics, {"event": "restart", "step": 60, "attempt": 1, "time": time.time()}, started(60),
          {"event": "checkpoint_loaded", "step": 60, "tier": "macro", "path": "x"})
    s.console("layout: ...\n")
    s.console("step 80/120  loss 5.9\n")
    s.finish(0)
    assert out.getvalue().splitlines() == [
        "step 60/120  loss 6.1",
        f"rank 3 exited (SIGKILL) after step 70; restarting all 8 ranks from step 60 (macro checkpoint), restart 1 "
        f"of 1: see {tmp_path / 'logs' / 'rank3.log'}",
        "layout: ...", "step 80/120  loss 5.9"]
    assert err.getvalue() == ""
    launcher = (tmp_path / "logs" / "launcher.log").read_text()
    assert "closing signal SIGTERM" in launcher and "[console] rank 3 exited (SIGKILL)" in launcher
    assert "[console, not shown] SIGTERM: finishing step 71, then saving" in launcher
    rank3 = (tmp_path / "logs" / "rank3.log").read_text()
    assert "rank 3 exited (SIGKILL) after step 70 (as torchrun reports it)" in rank3
    [failure] = [json.loads(line) for line in (tmp_path / "logs" / "failures.jsonl").read_text().splitlines()]
    assert failure["restart"] == 1 and failure["resumed_from"] == 60 and failure["tier"] == "macro"


def test_the_last_failure_names_rank_status_and_log_and_a_user_error_reaches_stderr(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    s, out, err = story(tmp_path, max_restarts=0)
    s.agent("bessemer train: error: checkpoint step 10 was trained with train.steps=30; ...\n")
    s.agent(AGENT.format(code=2, rank=0))
    s.finish(1)
    assert err.getvalue() == "bessemer train: error: checkpoint step 10 was trained with train.steps=30; ...\n"
    assert out.getvalue() == (f"rank 0 exited (exit code 2) during start-up; training stopped (--max-restarts 0): "
                              f"see {tmp_path / 'logs' / 'rank0.log'} (torchrun's output: "
                              f"{tmp_path / 'logs' / 'launcher.log'})\n")
    assert s.exit_code == 2
    assert not metrics.exists()


def test_attempts_follow_restart_and_run_started_events(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    since = time.time() - 1
    write(metrics, started(0), {"step": 1}, {"step": 2},
          {"event": "restart", "step": 0, "attempt": 1, "time": time.time()}, started(0),
          {"event": "restart", "step": 0, "attempt": 2, "time": time.time()}, started(0),
          {"event": "checkpoint_loaded", "step": 0, "tier": "micro"}, {"step": 1})
    assert attempts(metrics, since) == {0: {"start": 0, "last": 2, "loaded": None},
                                        1: {"start": 0, "last": None, "loaded": None},
                                        2: {"start": 0, "last": 1, "loaded": (0, "micro")}}


def test_the_rank_that_raised_first_is_named_not_the_one_that_lost_its_peer(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rank0.log").write_text("==== rank 0, attempt 0, pid 1, t ====\nstep 20/120  loss 6.7\n"
                                    "[rank0]: Traceback (most recent call last):\n[rank0]:   File \"x.py\"\n"
                                    "[rank0]: NameError: name 'shutil' is not defined\n")
    (logs / "rank7.log").write_text(
        "==== rank 7, attempt 0, pid 2, t ====\n"
        "[rank7]: RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:51917. This is typically ...\n")
    (logs / "rank3.log").write_text("==== rank 3, attempt 0, pid 3, t ====\n")
    write(tmp_path / "metrics.jsonl", started(0), {"step": 20})
    s, out, _ = story(tmp_path, max_restarts=0)
    s.agent(AGENT.format(code=1, rank=7))
    assert out.getvalue().startswith("rank 0 failed (NameError: name 'shutil' is not defined) after step 20; training "
                                     f"stopped (--max-restarts 0): see {logs / 'rank0.log'} ")
    [failure] = [json.loads(line) for line in (logs / "failures.jsonl").read_text().splitlines()]
    assert failure["reported_rank"] == 7 and failure["rank"] == 0


def test_when_torchrun_is_told_to_stop_rank_0_still_speaks(tmp_path):
    s, out, err = story(tmp_path, max_restarts=1)
    s.agent("W1203 ... api.py:753] Received 2 death signal, shutting down workers\n")
    s.agent("W1203 ... Sending process 8124 closing signal SIGTERM\n")
    s.console("SIGINT: finishing step 12, then saving\n")
    s.agent("bessemer train: stopped by SIGINT after step 12; state saved\n")
    s.finish(1)
    launcher = tmp_path / "logs" / "launcher.log"
    assert out.getvalue().splitlines() == ["SIGINT: finishing step 12, then saving",
                                           f"torchrun exited with exit code 1: see {launcher}"]
    assert err.getvalue() == "bessemer train: stopped by SIGINT after step 12; state saved\n"


def hang_verdict(tmp_path, attempt=0):
    """What the hang watchdog leaves before any rank of the attempt exits: logs/hang/attempt<N>_<time>/verdict.json."""
    from bessemer.hangs import hang_dir, write_json

    verdict = {"timeout_s": 20.0, "step": 70, "attempt": attempt, "time": time.time(), "run_id": "r",
               "culprits": [{"rank": 5, "host": "gpu-7", "pid": 99, "step": 70, "state": "stuck", "silent_s": 21.0,
                             "where": ["bessemer/train/fault.py:31 _hang"], "pending": []}],
               "waiting": [{"rank": 0, "host": "gpu-0", "pid": 1, "step": 70, "where": [],
                            "pending": [{"group": "0", "desc": "default_pg", "seq": 44}]}]}
    verdict["dir"] = str(hang_dir(tmp_path, verdict))
    write_json(hang_dir(tmp_path, verdict) / "verdict.json", verdict)
    return verdict


def test_a_hang_is_one_line_naming_the_hung_rank_where_and_its_dumps(tmp_path):
    from bessemer.hangs import describe

    metrics = tmp_path / "metrics.jsonl"
    s, out, _ = story(tmp_path, max_restarts=1)
    write(metrics, started(0), *({"step": n, "loss": 1.0} for n in range(1, 71)))
    verdict = hang_verdict(tmp_path)
    s.agent(AGENT.format(code=124, rank=0))  # a live rank the watchdog ended exits first
    write(metrics, {"event": "restart", "step": 60, "attempt": 1, "time": time.time()}, started(60),
          {"event": "checkpoint_loaded", "step": 60, "tier": "micro", "path": "x"})
    s.console("layout: ...\n")
    s.finish(0)
    line = (f"hang: {describe(verdict)}; restarting all 8 ranks from step 60 (micro checkpoint), restart 1 of 1: "
            f"see {verdict['dir']}")
    assert out.getvalue().splitlines() == [line, "layout: ..."]
    assert line.startswith("hang: rank 5 (host gpu-7, pid 99) hung at step 70: no progress for 21 s, not in a "
                           "collective, in bessemer/train/fault.py:31 _hang; rank 0 waited in #44 on default_pg")
    [failure] = [json.loads(line) for line in (tmp_path / "logs" / "failures.jsonl").read_text().splitlines()]
    assert failure["rank"] == 5 and failure["exit"] == "hung" and failure["dumps"] == verdict["dir"]
    assert failure["hang"] == describe(verdict) and failure["resumed_from"] == 60
    assert "(as the hang watchdog found it)" in (tmp_path / "logs" / "rank5.log").read_text()
    assert not any(json.loads(x).get("event") == "hang" for x in metrics.read_text().splitlines())  # the restarted
    # rank 0 writes the hang event (Trainer._run_events)


def test_a_hang_without_restarts_left_is_the_last_line_and_its_event_is_written_at_the_end(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    s, out, _ = story(tmp_path, max_restarts=0)
    write(metrics, started(0), {"step": 70, "loss": 1.0})
    verdict = hang_verdict(tmp_path)
    s.agent(AGENT.format(code=124, rank=0))
    s.finish(1)
    assert out.getvalue().startswith("hang: rank 5 (host gpu-7, pid 99) hung at step 70")
    assert f"training stopped (--max-restarts 0): see {verdict['dir']} (torchrun's output" in out.getvalue()
    assert s.exit_code is None  # torchrun's status, not the ended ranks' 124
    event = json.loads(metrics.read_text().splitlines()[-1])
    assert event["event"] == "hang" and event["ranks"] == [5] and event["dumps"] == verdict["dir"]
