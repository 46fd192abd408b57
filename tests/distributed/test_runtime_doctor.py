"""`bessemer doctor --runtime` on 4 real gloo ranks (torchrun), through the module's own entry point: every
check runs and passes on a healthy layout, and the self-test options make runtime.rng and runtime.params fail
naming the rank they perturbed."""

import json
import os
import subprocess
import sys

import pytest

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
QUICK = ["--busbw-sizes", "0.25,1", "--busbw-iters", "3"]


def doctor(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=4",
           "-m", "bessemer.doctor.runtime", "--json", *QUICK, *args]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, env=ENV, timeout=240)


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_every_runtime_check_runs_and_passes_on_tp2_dp_shard2():
    proc = doctor("--tp", "2", "--dp-shard", "2", "--data", "data/debug")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    checks = {c["id"]: c for c in json.loads(proc.stdout)["checks"]}
    assert sorted(checks) == ["runtime.busbw.dp_shard", "runtime.busbw.tp", "runtime.busbw.world",
                              "runtime.clock", "runtime.dataloader", "runtime.params", "runtime.rng"]
    for name, n_groups, size in [("tp", 2, 2), ("dp_shard", 2, 2), ("world", 1, 4)]:
        c = checks[f"runtime.busbw.{name}"]
        # A measurement: a slow group on a loaded 2-core machine may warn, never fail.
        assert c["status"] in ("pass", "warn"), c
        groups = c["details"]["groups"]
        assert len(groups) == n_groups and all(len(g["ranks"]) == size for g in groups), groups
        for g in groups:
            assert [r["size_mib"] for r in g["sizes"]] == [0.25, 1.0]
            for row in g["sizes"]:
                for op, factor in (("all_reduce", 2 * (size - 1) / size), ("all_gather", (size - 1) / size)):
                    assert row[op]["algbw"] > 0 and row[op]["time_us"] > 0, row
                    assert row[op]["busbw"] == pytest.approx(row[op]["algbw"] * factor)
                    assert row[op]["algbw"] == pytest.approx(row["bytes"] / (row[op]["time_us"] * 1e-6) / 1e9)
    # tp groups are neighbouring ranks (tp innermost in the mesh), dp_shard groups stride over them.
    assert sorted(g["ranks"] for g in checks["runtime.busbw.tp"]["details"]["groups"]) == [[0, 1], [2, 3]]
    assert sorted(g["ranks"] for g in checks["runtime.busbw.dp_shard"]["details"]["groups"]) == [[0, 2], [1, 3]]
    for cid in ("runtime.rng", "runtime.params", "runtime.clock"):
        assert checks[cid]["status"] == "pass", checks[cid]
    assert abs(max(checks["runtime.clock"]["details"]["offsets_s"].values(), key=abs)) < 0.1  # one host, one clock
    loader = checks["runtime.dataloader"]
    assert loader["status"] in ("pass", "warn"), loader
    assert len(loader["details"]["ranks"]) == 4 and all(r["tokens_per_s"] > 0 for r in loader["details"]["ranks"])


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_injected_skews_fail_naming_the_perturbed_ranks():
    proc = doctor("--dp-shard", "4", "--inject-rng-skew", "1", "--inject-param-skew", "2")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-6000:]
    checks = {c["id"]: c for c in json.loads(proc.stdout)["checks"]}
    rng, params = checks["runtime.rng"], checks["runtime.params"]
    assert rng["status"] == "fail" and rng["details"]["offending_ranks"] == [1], rng
    assert "rank 1 differs in ['torch']" in rng["evidence"]
    assert params["status"] == "fail" and params["details"]["offending_ranks"] == [2], params
    assert "rank 2: layers.0.attention.wq.weight" in params["evidence"]
    assert rng["fix"] and params["fix"]
    assert checks["runtime.dataloader"] == {**checks["runtime.dataloader"], "status": "skip",
                                            "evidence": "no --data given"}


@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_trainer_runs_the_runtime_checks_at_start_when_enabled(tmp_path):
    """`metrics.runtime_checks = true`: the checks run on the job's own mesh before step 1, as events."""
    run = tmp_path / "R"
    cmd = [sys.executable, "-m", "bessemer.cli", "train", "configs/debug.toml", "--nproc", "2",
           "--parallel.dp_shard=2", "--train.steps=2", f"--run.dir={run}", "--metrics.runtime_checks=true",
           "--checkpoint.at_end=false", "--metrics.telemetry_period_s=0"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    checks = {r["id"]: r for r in records if r.get("event") == "runtime_check"}
    assert {"runtime.busbw.dp_shard", "runtime.busbw.world", "runtime.rng", "runtime.params",
            "runtime.clock"} <= set(checks)
    assert checks["runtime.rng"]["status"] == "pass" and checks["runtime.params"]["status"] == "pass"
    assert [r["step"] for r in records if "loss" in r and "event" not in r] == [1, 2]
