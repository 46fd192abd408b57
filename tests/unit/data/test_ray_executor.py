"""The Ray executor writes the same shards as the local one (byte for byte), resumes, and conserves documents."""

import json

import pytest

from bessemer.data.phases import run_pipeline
from bessemer.data.pipeline import Pipeline
from tests.unit.data.test_pipeline import shard_files, write_inputs

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow

STEPS = [{"name": "normalize"}, {"name": "pii", "action": "mask"}]


def make(tmp_path, out: str, **executor) -> Pipeline:
    return Pipeline.from_dict({
        "input": {"paths": [str(tmp_path / "in")], "format": "jsonl"},
        "steps": [dict(s) for s in STEPS],
        "executor": {"shards": 3, **executor},
        "output": {"dir": str(tmp_path / out), "format": "jsonl.zst"},
    })


def test_starts_and_stops_its_own_local_ray(tmp_path):
    # runs before the module fixture starts Ray: the executor starts one with `workers` CPUs, then stops it
    assert not ray.is_initialized()
    write_inputs(tmp_path / "in", n_files=2, per_file=10)
    stats = run_pipeline(make(tmp_path, "out", kind="ray", workers=2))
    assert stats["complete"] and stats["conserved"] and stats["docs_in"] == 20
    assert not ray.is_initialized()


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()


def test_local_and_ray_write_identical_shards(tmp_path, local_ray):
    write_inputs(tmp_path / "in", n_files=5)
    local = run_pipeline(make(tmp_path, "local", kind="local", workers=1))
    on_ray = run_pipeline(make(tmp_path, "ray", kind="ray", workers=2))
    for stats in (local, on_ray):
        assert stats["complete"] and stats["conserved"]
        assert stats["docs_in"] == stats["docs_out"] + stats["docs_rejected"] == 150
    assert shard_files(tmp_path / "local") == shard_files(tmp_path / "ray")
    assert len(shard_files(tmp_path / "ray")) == 3
    assert shard_files(tmp_path / "local" / "rejected") == shard_files(tmp_path / "ray" / "rejected")

    def counts(s: dict) -> list:  # everything but the timings
        return [{k: v for k, v in st.items() if k != "seconds"} for st in s["steps"]]

    assert counts(local) == counts(on_ray)
    written = json.loads((tmp_path / "ray" / "stats.json").read_text())
    assert written["conserved"] and written["shards"] == 3


def test_ray_resumes_and_skips_done_shards(tmp_path, local_ray):
    write_inputs(tmp_path / "in", n_files=4)
    partial = run_pipeline(make(tmp_path, "out", kind="ray", workers=2), limit_shards=1)
    assert partial["complete"] is False and partial["shards_done"] == 1
    marker = tmp_path / "out" / "stats" / "part-00000.json"
    before = marker.stat().st_mtime_ns
    full = run_pipeline(make(tmp_path, "out", kind="ray", workers=2))
    assert full["complete"] and full["conserved"] and full["shards"] == 3
    assert marker.stat().st_mtime_ns == before  # the finished shard was not run again
    # a shard finished by the local executor counts as done for the Ray one and vice versa
    again = run_pipeline(make(tmp_path, "out", kind="local"))
    assert again["docs_out"] == full["docs_out"]


def test_address_only_with_ray(tmp_path):
    from bessemer.errors import ConfigError

    write_inputs(tmp_path / "in", n_files=1)
    with pytest.raises(ConfigError, match="executor.address"):
        make(tmp_path, "out", kind="local", address="auto")
