"""Pipeline TOML, step registry, local executor: conservation, 1 vs 2 workers, resume, no torch."""

import json
import subprocess
import sys
import textwrap

import pytest
import zstandard

from bessemer.data import steps as pipeline_mod
from bessemer.data.phases import run_pipeline
from bessemer.data.pipeline_toml import Pipeline, load_pipeline
from bessemer.data.runner import JobFailed
from bessemer.data.steps import Step
from bessemer.errors import BessemerError, ConfigError


def write_inputs(root, n_files: int = 4, per_file: int = 30) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for f in range(n_files):
        rows = []
        for i in range(per_file):
            if i % 10 == 3:
                rows.append(b"{broken json")
            elif i % 10 == 7:
                rows.append(b'{"text": "bad \xff byte"}')
            else:
                text = f"doc {f}-{i}: write to user{i}@example.com or call 13800138000." if i % 2 else f"plain {f}-{i}"
                rows.append(json.dumps({"text": text, "src": f}).encode())
        (root / f"f{f}.jsonl").write_bytes(b"\n".join(rows) + b"\n")


def make(tmp_path, out="out", steps=({"name": "pii", "action": "mask"},), **executor) -> Pipeline:
    return Pipeline.from_dict({
        "input": {"paths": [str(tmp_path / "in")], "format": "jsonl"},
        "steps": [dict(s) for s in steps],
        "executor": {"kind": "local", **executor},
        "output": {"dir": str(tmp_path / out), "format": "jsonl.zst"},
    })


def read_jsonl_zst(path) -> list[dict]:
    data = zstandard.ZstdDecompressor().stream_reader(path.read_bytes()).read()
    return [json.loads(line) for line in data.splitlines()]


def shard_files(out) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("part-*"))}


# --- TOML and registry -------------------------------------------------------------------------------------


def test_load_pipeline_toml(tmp_path):
    write_inputs(tmp_path / "in", n_files=1)
    p = tmp_path / "p.toml"
    p.write_text(textwrap.dedent(f"""
        [input]
        paths = ["{tmp_path / 'in'}"]
        format = "jsonl"
        text_field = "text"

        [[steps]]
        name = "pii"
        action = "hash"
        salt = "s"

        [executor]
        kind = "local"
        workers = 2
        shards = 3

        [output]
        dir = "{tmp_path / 'out'}"
        format = "parquet"
    """))
    cfg = load_pipeline(p)
    assert cfg.executor.shards == 3 and cfg.output.format == "parquet"
    assert cfg.output.rejected_dir == f"{tmp_path / 'out'}/rejected"
    (step,) = cfg.build_steps()
    assert step.name == "pii" and step.action == "hash"


@pytest.mark.parametrize("raw, match", [
    ({"inputs": {}}, r"unknown pipeline key 'inputs'.*did you mean 'input'"),
    ({"input": {"paths": ["x"], "text_feild": "t"}}, r"'input.text_feild'.*did you mean 'input.text_field'"),
    ({"input": {"paths": ["x"], "format": "csv"}}, r"input.format: 'csv' is not one of jsonl, parquet, text, warc"),
    ({"input": {"paths": ["x"]}, "executor": {"workers": "2"}}, r"executor.workers: expected an integer"),
    ({"input": {"paths": ["x"]}, "executor": {"workers": 0}}, r"executor.workers: must be >= 1"),
    ({"input": {"paths": ["x"]}}, r"output.dir: required"),
    ({"output": {"dir": "o"}}, r"input.paths"),
    ({"input": {"paths": ["x"]}, "output": {"dir": "o"}, "steps": [{"name": "piii"}]},
     r"unknown step 'piii'; valid steps: .*pii"),
    ({"input": {"paths": ["x"]}, "output": {"dir": "o"}, "steps": [{"name": "pii", "acton": "mask"}]},
     r"steps\[0\] \(pii\): unknown key 'acton'; did you mean 'action'"),
    ({"input": {"paths": ["x"]}, "output": {"dir": "o"}, "steps": [{"name": "pii", "action": "erase"}]},
     r"steps\[0\] \(pii\): unknown PII action 'erase'"),
])
def test_pipeline_errors_name_the_key(raw, match):
    with pytest.raises(ConfigError, match=match):
        Pipeline.from_dict(raw)


class DropShort(Step):
    """A filter step as the contract wants it: rejects what it drops with a namespaced reason."""

    name = "drop_short"

    def __init__(self, min_chars: int = 12):
        super().__init__()
        self.min_chars = min_chars

    def process(self, doc):
        if len(doc.text) >= self.min_chars:
            return None
        doc.metadata["chars"] = len(doc.text)
        return "too_short"


class Swallow(Step):
    """A broken step: drops every third document without a reason."""

    name = "swallow"

    def run(self, docs, rank=0, world_size=1, reject=None):
        for i, doc in enumerate(docs):
            if i % 3:
                yield doc


class Explode(Step):
    """Fails on shard 1 while `armed`, as a worker dying mid-run."""

    name = "explode"
    armed = False

    def run(self, docs, rank=0, world_size=1, reject=None):
        for doc in docs:
            if Explode.armed and rank == 1:
                raise RuntimeError("worker died")
            yield doc


@pytest.fixture
def test_steps(monkeypatch):
    for cls in (DropShort, Swallow, Explode):
        monkeypatch.setitem(pipeline_mod.STEPS, cls.name, cls)


# --- executor ----------------------------------------------------------------------------------------------


def test_conservation_with_pii_and_two_workers(tmp_path):
    write_inputs(tmp_path / "in")
    stats = run_pipeline(make(tmp_path, workers=2, shards=3))
    out = tmp_path / "out"
    kept = [d for p in sorted(out.glob("part-*")) for d in read_jsonl_zst(p)]
    rejected = [d for p in sorted((out / "rejected").glob("part-*")) for d in read_jsonl_zst(p)]
    assert stats["complete"] and stats["conserved"] and stats["shards"] == 3
    assert stats["docs_in"] == 120 == len(kept) + len(rejected)
    assert stats["docs_out"] == len(kept) and stats["docs_rejected"] == len(rejected)
    assert stats["rejected"] == {"input.invalid_json": 12, "input.invalid_utf8": 12}
    assert all(r["metadata"]["reason"] in stats["rejected"] for r in rejected)
    assert not any("@example.com" in d["text"] for d in kept)
    inp, pii = stats["steps"]
    assert (inp["name"], pii["name"]) == ("input", "pii")
    assert pii["docs_in"] == pii["docs_out"] == len(kept) and pii["bytes_out"] < pii["bytes_in"]
    assert pii["extra"]["docs"] == len(kept) and pii["extra"]["counts"]["EMAIL"] == 36  # 9 per file
    assert json.loads((out / "stats.json").read_text()) == stats
    assert len(list((out / "stats").glob("part-*.json"))) == 3


def test_step_rejections_are_counted_and_sunk(tmp_path, test_steps):
    write_inputs(tmp_path / "in", n_files=2)
    stats = run_pipeline(make(tmp_path, steps=[{"name": "drop_short", "min_chars": 12}]))
    short = stats["steps"][1]["rejected"]["drop_short.too_short"]
    assert short > 0 and stats["conserved"]
    rejected = [d for p in (tmp_path / "out" / "rejected").glob("part-*") for d in read_jsonl_zst(p)]
    assert sum(d["metadata"]["reason"] == "drop_short.too_short" and "chars" in d["metadata"] for d in rejected) == short


def test_step_that_loses_documents_fails_conservation(tmp_path, test_steps):
    write_inputs(tmp_path / "in", n_files=1)
    with pytest.raises(BessemerError, match=r"step 'swallow'.*unaccounted"):
        run_pipeline(make(tmp_path, steps=[{"name": "swallow"}]))
    assert json.loads((tmp_path / "out" / "stats.json").read_text())["conserved"] is False


def test_one_or_two_workers_write_identical_shards(tmp_path):
    write_inputs(tmp_path / "in")
    run_pipeline(make(tmp_path, out="w1", workers=1, shards=3))
    run_pipeline(make(tmp_path, out="w2", workers=2, shards=3))
    assert shard_files(tmp_path / "w1") == shard_files(tmp_path / "w2")
    # Different shard counts hold the same documents.
    run_pipeline(make(tmp_path, out="s1", workers=1, shards=1))
    docs = lambda out: sorted((d for p in out.glob("part-*") for d in read_jsonl_zst(p)), key=lambda d: d["id"])
    assert docs(tmp_path / "s1") == docs(tmp_path / "w2")


def test_resume_after_interruption_skips_completed_shards(tmp_path):
    write_inputs(tmp_path / "in")
    run_pipeline(make(tmp_path, out="full", shards=2))
    partial = run_pipeline(make(tmp_path, out="out", shards=2), limit_shards=1)
    out = tmp_path / "out"
    assert partial["complete"] is False and partial["shards_done"] == 1
    assert not (out / "stats.json").exists() and not (out / "part-00001.jsonl.zst").exists()
    first = out / "part-00000.jsonl.zst"
    mtimes = (first.stat().st_mtime_ns, (out / "stats" / "part-00000.json").stat().st_mtime_ns)
    stats = run_pipeline(make(tmp_path, out="out", workers=2, shards=2))
    assert stats["complete"] and stats["conserved"]
    assert (first.stat().st_mtime_ns, (out / "stats" / "part-00000.json").stat().st_mtime_ns) == mtimes
    assert shard_files(out) == shard_files(tmp_path / "full")
    full = json.loads((tmp_path / "full" / "stats.json").read_text())
    assert {k: v for k, v in stats.items() if k != "steps"} == {k: v for k, v in full.items() if k != "steps"}


def test_resume_after_a_worker_crash(tmp_path, test_steps, monkeypatch):
    write_inputs(tmp_path / "in")
    monkeypatch.setattr(Explode, "armed", True)
    with pytest.raises(JobFailed, match=r"shard part-00001 of 2 .*RuntimeError: worker died"):
        run_pipeline(make(tmp_path, steps=[{"name": "explode"}], shards=2))
    out = tmp_path / "out"
    assert (out / "part-00000.jsonl.zst").exists()
    assert [p.name for p in out.rglob("part-00001*")] == []  # neither a partial shard nor its .tmp
    monkeypatch.setattr(Explode, "armed", False)
    stats = run_pipeline(make(tmp_path, steps=[{"name": "explode"}], shards=2))
    assert stats["complete"] and stats["docs_in"] == 120


def test_rerun_with_a_different_pipeline_refuses_to_mix_shards(tmp_path):
    write_inputs(tmp_path / "in", n_files=2)
    run_pipeline(make(tmp_path, shards=2))
    with pytest.raises(BessemerError, match="different pipeline"):
        run_pipeline(make(tmp_path, steps=[{"name": "pii", "action": "tag"}], shards=2))


def test_parquet_output_and_more_shards_than_files(tmp_path):
    write_inputs(tmp_path / "in", n_files=1)
    cfg = make(tmp_path, shards=3)
    cfg.output.format = "parquet"
    stats = run_pipeline(cfg)
    assert sorted(p.name for p in (tmp_path / "out").glob("part-*")) == [f"part-0000{i}.parquet" for i in range(3)]
    assert stats["docs_out"] == 24 and stats["conserved"]


def test_data_package_never_imports_torch(tmp_path):
    write_inputs(tmp_path / "in", n_files=1)
    code = textwrap.dedent(f"""
        import sys
        from bessemer.data.pipeline_toml import Pipeline
        from bessemer.data.phases import run_pipeline
        import bessemer.data.readers, bessemer.data.writers, bessemer.data.stats, bessemer.data.pii.redact
        run_pipeline(Pipeline.from_dict({{"input": {{"paths": [{str(tmp_path / 'in')!r}]}},
                                          "steps": [{{"name": "pii"}}], "output": {{"dir": {str(tmp_path / 'o')!r}}}}}))
        assert "torch" not in sys.modules, "bessemer.data imported torch"
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_normalize_quality_pii_chain_conserves_and_sinks_quality_rejections(tmp_path):
    """The step kinds together: normalize and quality drop through the executor's reject callback, pii rewrites."""
    write_inputs(tmp_path / "in")
    good = ("The quick brown fox jumps over the lazy dog and then runs to the river with the other animals. "
            "It is a sunny day, and the fox is happy to be out in the field with the birds that sing. "
            "Later that afternoon the farmer walks along the fence to check on his sheep and his old horse. "
            "He notices that the gate has been left open, so he closes it before the cows can wander off. "
            "In the evening the family gathers for dinner and talks about the weather and the coming harvest. "
            "The children want to know whether they may visit the town market with their cousins next week.")
    with open(tmp_path / "in" / "f9.jsonl", "w") as f:
        f.write(json.dumps({"text": good + " Mail me at fox@example.com."}) + "\n")
        f.write(json.dumps({"text": "\u200b\u200b  "}) + "\n")  # empty after normalization
    steps = ({"name": "normalize"}, {"name": "quality"}, {"name": "pii"})
    stats = run_pipeline(make(tmp_path, steps=steps, workers=2, shards=2))
    out = tmp_path / "out"
    kept = [d for p in sorted(out.glob("part-*")) for d in read_jsonl_zst(p)]
    rejected = [d for p in sorted((out / "rejected").glob("part-*")) for d in read_jsonl_zst(p)]
    assert stats["conserved"] and stats["docs_in"] == 122 == len(kept) + len(rejected)
    assert stats["rejected"]["normalize.empty"] == 1
    assert sum(n for r, n in stats["rejected"].items() if r.startswith("quality.")) == 96  # the short docs
    assert [d["text"].count("[EMAIL]") for d in kept] == [1]
    names = [s["name"] for s in stats["steps"]]
    assert names == ["input", "normalize", "quality", "pii"]
    for prev, st in zip(stats["steps"], stats["steps"][1:]):
        assert st["docs_in"] == prev["docs_out"] == st["docs_out"] + sum(st["rejected"].values())
