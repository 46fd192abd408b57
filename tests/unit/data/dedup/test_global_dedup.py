"""`dedup` as a global step: corpus-wide across shards, conserving, resumable per stage, same on Ray."""

import json

import pytest

from bessemer.cli import main
from bessemer.data.dedup import stages as dedup_stages
from bessemer.data.dedup.lexical import DedupStep
from bessemer.data.dedup.synthetic import corpus
from bessemer.data.document import Document
from bessemer.data.phases import plan, run_pipeline
from bessemer.data.pipeline_toml import Pipeline
from bessemer.data.readers import open_bytes
from bessemer.data.steps import Step, register_step

N_FILES = 3


class DropMarked(Step):
    """Rejects documents whose text contains "#drop#" (a per-shard step after the global one)."""

    name = "drop"

    def process(self, doc: Document) -> str | None:
        return "marked" if "#drop#" in doc.text else None


register_step("test-drop-marked", DropMarked)
STEPS = [{"name": "normalize"}, {"name": "dedup"}, {"name": "test-drop-marked"}]


def make_corpus() -> list[Document]:
    docs, _ = corpus(n_clusters=12, n_hard=8, n_single=15, seed=3)
    base = docs[0].text
    # exact copies (after normalization) of one document, dealt into every file below
    docs += [Document(f"copy-{i}", base.upper()) for i in range(N_FILES)]
    docs += [Document("marked-1", "#drop# a document unlike any other that the step after dedup drops")]
    for i, d in enumerate(docs):
        d.metadata["quality_score"] = float(i % 4)
    return docs


def write_files(root, docs: list[Document]) -> list[list[Document]]:
    """Deal the documents round-robin into N_FILES JSONL files (plus one broken line each)."""
    root.mkdir(parents=True, exist_ok=True)
    per_file = [docs[i::N_FILES] for i in range(N_FILES)]
    for i, part in enumerate(per_file):
        lines = [json.dumps({"id": d.id, "text": d.text, "quality_score": d.metadata["quality_score"]})
                 for d in part]
        (root / f"f{i}.jsonl").write_text("\n".join(lines + ["{broken"]) + "\n")
    return per_file


def make(tmp_path, out: str, shards: int = N_FILES, steps=STEPS, **executor) -> Pipeline:
    return Pipeline.from_dict({
        "input": {"paths": [str(tmp_path / "in")], "format": "jsonl"},
        "steps": [dict(s) for s in steps],
        "executor": {"shards": shards, **executor},
        "output": {"dir": str(tmp_path / out), "format": "jsonl.zst"},
    })


def read_dir(root, pattern: str) -> list[dict]:
    out = []
    for p in sorted(root.glob(pattern)):
        with open_bytes(str(p)) as f:
            out += [json.loads(line) for line in f]
    return out


def all_files(root) -> dict[str, bytes]:
    """Final shards and every exclusion file, by relative path."""
    files = {p.name: p.read_bytes() for p in sorted(root.glob("part-*"))}
    files |= {str(p.relative_to(root)): p.read_bytes() for p in sorted((root / "rejected").rglob("*.jsonl.zst"))}
    return files


def counts(stats: dict) -> list[dict]:
    return [{k: v for k, v in st.items() if k != "seconds"} for st in stats["steps"]]


def test_plan_splits_at_global_steps():
    stages = plan([{"name": "normalize"}, {"name": "dedup"}, {"name": "pii"}, {"name": "dedup"}])
    assert [(s.is_global, [x["name"] for x in s.steps]) for s in stages] == [
        (False, ["normalize"]), (True, ["dedup"]), (False, ["pii"]), (True, ["dedup"]), (False, [])]
    assert [s.index for s in stages] == [0, 1, 2, 3, 4]
    assert DedupStep.global_step is True


def test_duplicates_across_shards_are_found_and_conserved(tmp_path):
    docs = make_corpus()
    per_file = write_files(tmp_path / "in", docs)
    stats = run_pipeline(make(tmp_path, "out"))
    assert stats["complete"] and stats["conserved"]
    assert [s["name"] for s in stats["steps"]] == ["input", "normalize", "dedup", "test-drop-marked"]
    n = len(docs)
    assert stats["docs_in"] == n + N_FILES == stats["docs_out"] + stats["docs_rejected"]
    for st in stats["steps"]:
        assert st["docs_in"] == st["docs_out"] + sum(st["rejected"].values())
    for prev, st in zip(stats["steps"], stats["steps"][1:]):
        assert st["docs_in"] == prev["docs_out"]
    dedup = stats["steps"][2]
    assert set(dedup["rejected"]) <= {"dedup.exact_duplicate", "dedup.near_duplicate"}
    assert dedup["bytes_in"] == stats["steps"][1]["bytes_out"] and 0 < dedup["bytes_out"] < dedup["bytes_in"]
    assert stats["steps"][3]["rejected"] == {"drop.marked": 1}

    # The same removals as DedupStep over the whole stream (shard order), with the same reasons.
    step = DedupStep()
    stream = [Document(d.id, d.text, {"quality_score": d.metadata["quality_score"]}) for part in per_file for d in part]
    kept_whole = {d.id for d in step.run(stream)}
    want = {d.id: d.metadata["reason"] for d in step.rejected}
    rejected = read_dir(tmp_path / "out" / "rejected", "*/part-*.jsonl.zst")
    got = {d["id"]: d["metadata"]["reason"] for d in rejected if d["metadata"]["reason"].startswith("dedup.")}
    assert got == want and dedup["rejected"] == {r: list(want.values()).count(r) for r in set(want.values())}
    kept = {d["id"] for d in read_dir(tmp_path / "out", "part-*.jsonl.zst")}
    assert kept == kept_whole - {"marked-1"}
    assert len(rejected) == stats["docs_rejected"]
    # The copies sit in different shards: dedup inside each shard would keep one per shard.
    in_shard = set()
    for part in per_file:
        in_shard |= {d.id for d in DedupStep().run([Document(d.id, d.text, dict(d.metadata)) for d in part])}
    copies = {f"copy-{i}" for i in range(N_FILES)}
    assert len(copies & in_shard) >= N_FILES - 1 and len(copies & kept) <= 1
    assert len(kept_whole) < len(in_shard)
    written = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert written["conserved"] and counts(written) == counts(stats)


def test_single_shard_runs_the_step_in_shard_with_the_same_result(tmp_path):
    write_files(tmp_path / "in", make_corpus())
    one = run_pipeline(make(tmp_path, "one", shards=1))
    three = run_pipeline(make(tmp_path, "three"))
    assert not (tmp_path / "one" / "_phases").exists()
    assert {d["id"] for d in read_dir(tmp_path / "one", "part-*")} == \
        {d["id"] for d in read_dir(tmp_path / "three", "part-*")}
    def plain(stats: dict) -> list[dict]:
        return [{k: v for k, v in st.items() if k not in ("seconds", "extra")} for st in stats["steps"]]

    assert plain(one) == plain(three)


def test_resume_after_interruption_in_every_stage(tmp_path, monkeypatch):
    write_files(tmp_path / "in", make_corpus())
    full = run_pipeline(make(tmp_path, "full"))

    # stage 0 (per shard) interrupted after one shard
    partial = run_pipeline(make(tmp_path, "out"), limit_shards=1)
    assert partial == {"complete": False, "stage": 0, "shards_done": 1, "shards": N_FILES}
    # stage 1 (global) interrupted between its buckets and clusters stages
    real = dedup_stages._clusters

    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(dedup_stages, "_clusters", crash)
    with pytest.raises(KeyboardInterrupt):
        run_pipeline(make(tmp_path, "out"))
    assert (tmp_path / "out" / "_phases" / "1" / "edges" / "band-000-000.done").exists()
    assert not (tmp_path / "out" / "_phases" / "1" / "stats.json").exists()
    monkeypatch.setattr(dedup_stages, "_clusters", real)
    # stage 2 (per shard, final output) interrupted after one shard
    partial = run_pipeline(make(tmp_path, "out"), limit_shards=1)
    assert partial == {"complete": False, "stage": 2, "shards_done": 1, "shards": N_FILES}
    marker = tmp_path / "out" / "_phases" / "0" / "stats" / "part-00000.json"
    before = marker.stat().st_mtime_ns
    resumed = run_pipeline(make(tmp_path, "out"))
    assert marker.stat().st_mtime_ns == before  # finished shards are not run again
    assert all_files(tmp_path / "out") == all_files(tmp_path / "full")
    assert counts(resumed) == counts(full)
    # a finished run reruns as a no-op; a changed pipeline is refused
    assert counts(run_pipeline(make(tmp_path, "out"))) == counts(full)
    from bessemer.errors import BessemerError

    with pytest.raises(BessemerError, match="different pipeline"):
        run_pipeline(make(tmp_path, "out", steps=[{"name": "dedup", "threshold": 0.9}]))


def test_two_workers_and_cli(tmp_path, capsys):
    write_files(tmp_path / "in", make_corpus())
    one = run_pipeline(make(tmp_path, "w1", steps=[{"name": "dedup"}], workers=1))
    two = run_pipeline(make(tmp_path, "w2", steps=[{"name": "dedup"}], workers=2))
    assert all_files(tmp_path / "w1") == all_files(tmp_path / "w2") and counts(one) == counts(two)
    rc = main(["data", "dedup", "--input", str(tmp_path / "in"), "--output", str(tmp_path / "cli"), "--no-report"])
    assert rc == 0 and "conserved" in capsys.readouterr().out
    assert all_files(tmp_path / "cli") == all_files(tmp_path / "w1")


@pytest.mark.slow
def test_local_and_ray_identical(tmp_path):
    ray = pytest.importorskip("ray")
    write_files(tmp_path / "in", make_corpus())
    local = run_pipeline(make(tmp_path, "local", workers=1))
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        on_ray = run_pipeline(make(tmp_path, "ray", kind="ray", workers=2))
    finally:
        ray.shutdown()
    assert on_ray["complete"] and on_ray["conserved"]
    assert all_files(tmp_path / "local") == all_files(tmp_path / "ray")
    assert counts(local) == counts(on_ray)
