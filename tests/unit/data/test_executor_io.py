"""Everything the executor writes goes through bessemer/data/io.py: a pipeline on an fsspec URL (`memory://`) writes
the same bytes as on local disk, resumes from its markers, refuses another pipeline's markers, and a failed shard
leaves nothing behind; atomic writes on S3 commit whole or not at all."""

import uuid

import fsspec
import pytest

from bessemer.data import executor, io
from bessemer.data import steps as pipeline_mod
from bessemer.data.phases import run_pipeline
from bessemer.data.pipeline_toml import Pipeline
from bessemer.data.runner import JobFailed
from bessemer.errors import BessemerError
from tests.unit.data.test_pipeline import Explode, write_inputs

STEPS = [{"name": "normalize"}, {"name": "pii", "action": "mask"}]


@pytest.fixture
def mem(tmp_path):
    """A fresh memory:// root holding the local test inputs."""
    root = f"memory://t{uuid.uuid4().hex[:8]}"
    write_inputs(tmp_path / "in", n_files=3, per_file=10)
    fs = fsspec.filesystem("memory")
    for p in sorted((tmp_path / "in").iterdir()):
        fs.pipe_file(f"{root}/in/{p.name}", p.read_bytes())
    yield root, fs
    fs.rm(root.removeprefix("memory:/"), recursive=True)


def make(src: str, out: str, steps=STEPS, **executor_kw) -> Pipeline:
    return Pipeline.from_dict({"input": {"paths": [src]}, "steps": [dict(s) for s in steps],
                               "executor": {"shards": 2, **executor_kw}, "output": {"dir": out}})


def files(fs, root: str) -> dict[str, bytes]:
    """Shard and exclusion files by path relative to `root` (stats files hold timings)."""
    base = fs._strip_protocol(root).rstrip("/")
    return {p[len(base) + 1:]: fs.cat_file(p) for p in fs.find(base) if p.endswith(".jsonl.zst")}


def counts(stats: dict) -> list[dict]:
    return [{k: v for k, v in st.items() if k != "seconds"} for st in stats["steps"]]


def test_memory_url_pipeline_writes_what_local_writes(mem, tmp_path):
    root, fs = mem
    local = run_pipeline(make(str(tmp_path / "in"), str(tmp_path / "out")))
    remote = run_pipeline(make(f"{root}/in", f"{root}/out"))
    assert remote["complete"] and remote["conserved"] and counts(remote) == counts(local)
    shards = lambda found: {k: v for k, v in found.items() if k.startswith("part-")}
    # the exclusion files differ only in `metadata.source` (file:line, under another root)
    assert shards(files(fs, f"{root}/out")) == shards(files(fsspec.filesystem("file"), str(tmp_path / "out")))
    assert sorted(files(fs, f"{root}/out")) == ["part-00000.jsonl.zst", "part-00001.jsonl.zst",
                                                  "rejected/part-00000.jsonl.zst", "rejected/part-00001.jsonl.zst"]
    assert counts(io.read_json(f"{root}/out/stats.json")) == counts(local)
    assert io.listdir(f"{root}/out/stats") == ["part-00000.json", "part-00001.json"]
    assert not [p for p in fs.find(root.removeprefix("memory:/")) if p.endswith(".tmp")]


def test_memory_url_resume_runs_only_unfinished_shards(mem, monkeypatch):
    root, _ = mem
    ran = []
    real = executor.run_shard
    monkeypatch.setattr(executor, "run_shard", lambda p, shard, *a: ran.append(shard) or real(p, shard, *a))
    partial = run_pipeline(make(f"{root}/in", f"{root}/out"), limit_shards=1)
    assert partial["complete"] is False and ran == [0] and not io.exists(f"{root}/out/stats.json")
    full = run_pipeline(make(f"{root}/in", f"{root}/out"))
    assert full["complete"] and ran == [0, 1]  # shard 0 was not run again
    assert run_pipeline(make(f"{root}/in", f"{root}/out"))["complete"] and ran == [0, 1]


def test_markers_of_another_pipeline_are_refused_naming_the_directory(mem):
    root, _ = mem
    run_pipeline(make(f"{root}/in", f"{root}/out"))
    with pytest.raises(BessemerError, match=rf"different pipeline.*output.dir {root}/out"):
        run_pipeline(make(f"{root}/in", f"{root}/out", steps=[{"name": "pii", "action": "tag"}]))


def test_a_failed_shard_leaves_no_partial_file_on_a_url(mem, monkeypatch):
    root, fs = mem
    monkeypatch.setitem(pipeline_mod.STEPS, "explode", Explode)
    monkeypatch.setattr(Explode, "armed", True)
    with pytest.raises(JobFailed, match="shard part-00001 of 2"):
        run_pipeline(make(f"{root}/in", f"{root}/out", steps=[{"name": "explode"}]))
    left = [p.rpartition("/")[2] for p in fs.find(root.removeprefix("memory:/") + "/out")]
    assert "part-00000.jsonl.zst" in left and not [p for p in left if p.startswith("part-00001")]


def test_marker_and_fingerprint_helpers(tmp_path):
    m = str(tmp_path / "x" / "done.json")
    fp = io.fingerprint({"a": 1}, 2)
    assert fp == io.fingerprint({"a": 1}, 2) != io.fingerprint({"a": 1}, 3)
    assert not io.marker_done(m, fp)
    io.write_marker(m, fp, rows=3)
    assert io.marker_done(m, fp) and io.read_json(m) == {"fingerprint": fp, "rows": 3}
    with pytest.raises(BessemerError, match=r"done.json was written by a different run.*the work dir holds"):
        io.marker_done(m, "0" * 16, "the work dir")


@pytest.mark.parametrize("where", ["local", "memory"])
def test_atomic_open_commits_whole_or_nothing(where, tmp_path):
    url = str(tmp_path / "a" / "f.bin") if where == "local" else f"memory://atomic{uuid.uuid4().hex[:8]}/f.bin"
    with pytest.raises(RuntimeError), io.atomic_open(url) as f:
        f.write(b"half")
        raise RuntimeError("crash")
    assert not io.exists(url) and not io.exists(url + ".tmp")
    io.write_bytes(url, b"whole")
    assert io.read_bytes(url) == b"whole" and not io.exists(url + ".tmp")


def test_s3_atomic_write_is_dropped_on_error(s3_endpoint, monkeypatch, recwarn):
    s3fs = pytest.importorskip("s3fs")
    url, options = s3_endpoint
    fs = s3fs.S3FileSystem(**options)
    monkeypatch.setattr(io, "url_to_fs", lambda u: (fs, u.removeprefix("s3://")))
    key = f"{url}/atomic-{uuid.uuid4().hex[:8]}"
    with pytest.raises(RuntimeError), io.atomic_open(key + "/half") as f:
        f.write(b"x" * 1000)
        raise RuntimeError("crash")
    io.write_json(key + "/whole.json", {"a": 1})
    assert not fs.exists(key + "/half") and io.read_json(key + "/whole.json") == {"a": 1}
