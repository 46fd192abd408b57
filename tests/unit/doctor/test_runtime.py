"""The runtime doctor's verdicts from hand-made measurements (no process group), and one single-process run."""

import argparse
import json

import pytest

from bessemer.doctor.runtime import (_mib_list, add_runtime_arguments, params_check, rng_check, run_runtime,
                                     run_runtime_checks)
from bessemer.doctor.runtime_comm import busbw_checks, clock_check
from bessemer.rng import RNGState


def _rows(busbw: float) -> list[dict]:
    return [{"size_mib": 16.0, "bytes": 16 << 20, "all_reduce": {"time_us": 1.0, "algbw": busbw, "busbw": busbw},
             "all_gather": {"time_us": 1.0, "algbw": busbw, "busbw": busbw}}]


def test_busbw_warns_when_one_group_of_a_dimension_is_over_twice_slower():
    per_rank = [{"tp": ([0, 1], _rows(10.0))}, {"tp": ([0, 1], _rows(10.0))},
                {"tp": ([2, 3], _rows(4.0))}, {"tp": ([2, 3], _rows(4.0))}]
    (c,) = busbw_checks(per_rank, iters=5)
    assert c.id == "runtime.busbw.tp" and c.status == "warn"
    assert "group [2, 3] reaches 4.00 GB/s" in c.evidence and "[2, 3]" in c.fix
    assert "all_reduce 16 MiB 4" in c.evidence  # the slowest group's numbers
    per_rank[2]["tp"] = per_rank[3]["tp"] = ([2, 3], _rows(6.0))
    assert busbw_checks(per_rank, iters=5)[0].status == "pass"


def test_clock_thresholds_and_sign():
    assert clock_check({}).status == "skip"
    assert clock_check({1: (0.002, 1e-4), 2: (-0.05, 1e-4)}).status == "pass"
    warn = clock_check({1: (0.002, 1e-4), 2: (-0.2, 1e-4)})
    assert warn.status == "warn" and "rank 2, behind rank 0" in warn.evidence and warn.details["worst_rank"] == 2
    assert clock_check({3: (1.5, 1e-4)}).status == "fail"


def test_rng_check_names_the_odd_rank_and_groups_that_must_differ_but_do_not():
    same, other = {"torch": "a", "python": "b"}, {"torch": "x", "python": "b"}
    assert rng_check([same] * 4, [[0, 1, 2, 3]]).status == "pass"
    c = rng_check([same, same, other, same], [[0, 1, 2, 3]])
    assert c.status == "fail" and c.details["offending_ranks"] == [2] and "['torch']" in c.evidence
    assert rng_check([same, same, other, other], [[0, 1], [2, 3]]).status == "pass"
    c = rng_check([same] * 4, [[0, 1], [2, 3]])
    assert c.status == "fail" and "must differ" in c.evidence


def test_params_check_reports_the_first_differing_parameter():
    good = [("a", 1.0, "h1"), ("b", 2.0, "h2"), ("c", 3.0, "h3")]
    bad = [("a", 1.0, "h1"), ("b", 2.5, "zz"), ("c", 3.1, "yy")]
    assert params_check([good] * 3).status == "pass"
    c = params_check([good, good, bad])
    assert c.status == "fail" and c.details["first_difference"] == {"2": "b"} and "rank 2: b" in c.evidence


def test_arguments_and_a_single_process_run(capsys):
    parser = argparse.ArgumentParser()
    add_runtime_arguments(parser)
    args = parser.parse_args(["--tp", "1", "--busbw-sizes", "0.5,4"])
    assert args.busbw_sizes == (0.5, 4.0) and args.dp_shard == -1 and args.data is None
    with pytest.raises(argparse.ArgumentTypeError):
        _mib_list("1,-2")
    rng = RNGState()
    saved = rng.state_dict()  # the checks seed every generator of this process
    try:
        checks = {c.id: c.status for c in run_runtime_checks()}
        # A caller's parser without the runtime options (only --json): their defaults apply.
        assert run_runtime(argparse.Namespace(json=True)) == 0
    finally:
        rng.load_state_dict(saved)
    assert checks == {"runtime.rng": "pass", "runtime.params": "pass", "runtime.clock": "skip",
                      "runtime.dataloader": "skip"}
    assert [c["id"] for c in json.loads(capsys.readouterr().out)["checks"]] == list(checks)
