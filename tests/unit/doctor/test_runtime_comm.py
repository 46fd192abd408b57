"""runtime.busbw's message sizes and its comparison with the planner's bandwidth (no process group needed)."""

import argparse

import pytest

from bessemer.doctor.runtime import add_runtime_arguments
from bessemer.doctor.runtime_comm import busbw_checks, planner_expectation, size_ladder
from bessemer.plan.throughput import LINK_EFFICIENCY

H100 = "NVIDIA H100 80GB HBM3"


def _rows(*busbw: float) -> list[dict]:
    """One row per size, 1, 4, 16 ... MiB, with these all_reduce busbw figures."""
    sizes = size_ladder(4 ** (len(busbw) - 1))
    return [{"size_mib": s, "bytes": int(s * 2 ** 20), "all_reduce": {"time_us": 1.0, "algbw": b, "busbw": b},
             "all_gather": {"time_us": 1.0, "algbw": b, "busbw": b}} for s, b in zip(sizes, busbw)]


def test_size_ladder_reaches_the_cap():
    assert size_ladder(256) == (1, 4, 16, 64, 256)
    assert size_ladder(100) == (1, 4, 16, 64, 100)
    assert size_ladder(0.5) == (0.5,)


def test_planner_expectation_inside_a_node_across_nodes_and_on_cpu():
    one_node = planner_expectation(H100, [0] * 8)
    gbs, source = one_node(list(range(8)))
    assert gbs == pytest.approx(450 * LINK_EFFICIENCY) and "h100-sxm NVLink 4 450 GB/s" in source
    two_nodes = [0] * 8 + [1] * 8
    gbs, source = planner_expectation(H100, two_nodes)(list(range(16)))
    assert gbs is None and "spans nodes" in source and "--network" in source
    # 8 GPUs of a node share 8 NDR NICs (50 GB/s each): 400 GB/s, below NVLink's 450.
    gbs, source = planner_expectation(H100, two_nodes, "ib-ndr")(list(range(16)))
    assert gbs == pytest.approx(400 * LINK_EFFICIENCY) and "ib-ndr" in source
    gbs, _ = planner_expectation(H100, two_nodes, "ib-ndr", nics_per_node=4)(list(range(16)))
    assert gbs == pytest.approx(200 * LINK_EFFICIENCY)
    gbs, source = planner_expectation(None, [0, 0])([0, 1])
    assert gbs is None and "CPU" in source
    gbs, source = planner_expectation("Some Future GPU", [0, 0])([0, 1])
    assert gbs is None and "catalog" in source


def test_busbw_compares_the_peak_over_sizes_with_the_planner():
    expect = planner_expectation(H100, [0] * 8)  # 337.5 GB/s expected
    fast = [{"tp": (list(range(8)), _rows(40, 150, 300, 340))}] * 8
    (c,) = busbw_checks(fast, iters=5, expect=expect)
    assert c.status == "pass" and c.details["peak_busbw"] == 340 and c.details["peak_size_mib"] == 64
    assert "of the expected 338 GB/s" in c.evidence and c.details["expected_busbw"] == pytest.approx(337.5)
    slow = [{"tp": (list(range(8)), _rows(20, 90, 180, 200))}] * 8  # 59% of it
    (c,) = busbw_checks(slow, iters=5, expect=expect)
    assert c.status == "warn" and "below 70%" in c.evidence and "planner: h100-sxm" in c.evidence
    assert "--busbw-max-mib" in c.fix
    (c,) = busbw_checks(slow, iters=5, expect=planner_expectation(None, [0] * 8))
    assert c.status == "pass" and c.details["expected_busbw"] is None and "CPU (gloo)" in c.evidence


@pytest.mark.parametrize("flag, value", [("--busbw-max-mib", "0"), ("--network", "ib-fast"),
                                         ("--nics-per-node", "-1")])
def test_bad_busbw_arguments_name_the_flag(flag, value, capsys):
    parser = argparse.ArgumentParser()
    add_runtime_arguments(parser)
    with pytest.raises(SystemExit) as e:
        parser.parse_args([flag, value])
    assert e.value.code == 2 and flag in capsys.readouterr().err
    args = parser.parse_args(["--busbw-max-mib", "1024", "--network", "ib-ndr"])
    assert args.busbw_max_mib == 1024 and args.busbw_sizes is None and args.nics_per_node == 0
