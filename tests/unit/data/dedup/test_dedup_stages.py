"""The file-based dedup stages: sorted band files, the k-way merge, pairs, union-find, per-shard removals, fsspec."""

import json
import os
import random
import sys
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from dedup_corpus import corpus, write_shards

from bessemer.data import io
from bessemer.data.dedup import graph, stages
from bessemer.data.dedup.files import load_rows, save_npy
from bessemer.data.dedup.lexical import DedupStep
from bessemer.data.dedup.minhash import DedupConfig
from bessemer.data.dedup.stages import (
    BAND_RECORD,
    SLOTS,
    _Run,
    merge_sorted,
    run_dedup_stages,
)
from bessemer.data.document import Document
from bessemer.data.readers import open_bytes
from bessemer.data.writers import JsonlWriter


def _docs() -> list[Document]:
    docs, _ = corpus(n_clusters=12, n_hard=8, n_single=15, seed=11)
    docs += [Document("copy-a", docs[0].text.upper()), Document("copy-b", docs[0].text), Document("empty", "")]
    docs += [Document("empty-2", "...")]  # normalizes to "", the same text as "empty"
    for i, d in enumerate(docs):
        d.metadata["quality_score"] = float(i % 3)
    return docs


def _step_removals(docs: list[Document], n: int, **kw) -> dict[str, tuple[str, str]]:
    stream = [Document(d.id, d.text, dict(d.metadata)) for i in range(n) for d in docs[i::n]]
    step = DedupStep(**kw)
    list(step.run(stream))
    return {d.id: (d.metadata["reason"], d.metadata["duplicate_of"]) for d in step.rejected}


def _rejected(root: str) -> dict[str, tuple[str, str]]:
    out = {}
    for name in io.listdir(root):
        if name.endswith(".jsonl.zst"):
            with open_bytes(io.join(root, name)) as f:
                for line in f:
                    d = json.loads(line)
                    out[d["id"]] = (d["metadata"]["reason"], d["metadata"]["duplicate_of"])
    return out


def test_band_files_are_sorted_and_indexed(tmp_path):
    paths = write_shards(tmp_path / "in", _docs(), 2)
    work = str(tmp_path / "w")
    run_dedup_stages(paths, work, stop_after="signatures")
    for s in range(2):
        d = tmp_path / "w" / "signatures" / f"{s:05d}"
        index = np.load(d / "index.npy")
        for b in range(14):
            rec = np.frombuffer((d / f"band-{b:03d}.bin").read_bytes(), BAND_RECORD)
            key = rec["key"]
            assert np.all(key[1:] >= key[:-1])
            same = key[1:] == key[:-1]
            assert np.all(rec["idx"][1:][same] > rec["idx"][:-1][same])  # indices ascend inside a bucket
            slot = (key >> np.uint64(56)).astype(np.int64)
            assert index[b][-1] == len(rec)
            for t in (0, 17, 128, 255):
                assert index[b][t] == np.count_nonzero(slot < t)
        assert np.load(d / "minhash.npy").dtype == np.uint32


def _random_run(rng: np.random.Generator, n: int, keys: np.ndarray) -> np.ndarray:
    rec = np.zeros(n, BAND_RECORD)
    rec["key"] = np.sort(rng.choice(keys, n))
    rec["idx"] = np.arange(n)
    rec["tag"] = rng.integers(0, 3, n)
    return rec


@pytest.mark.parametrize("block", [1024, 5000])
def test_k_way_merge_matches_a_full_sort(tmp_path, block):
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 1 << 63, 3000, dtype=np.uint64)
    keys[:3] = [7, 7, 7]
    runs, want = [], []
    for s, n in enumerate([0, 40000, 1, 17000, 9000]):
        rec = _random_run(rng, n, keys)
        if s == 3:  # one key repeated across many blocks
            rec["key"][2000:9000] = np.sort(rec["key"])[5000]
            rec["key"] = np.sort(rec["key"])
        url = str(tmp_path / f"{s}.bin")
        Path(url).write_bytes(rec.tobytes())
        runs.append(_Run(url, BAND_RECORD, 0, n, block))
        want += [(int(k), s, int(i)) for k, i in zip(rec["key"], rec["idx"])]
    got, seen_keys = [], set()
    for recs, shard in merge_sorted(runs):
        chunk_keys = set(recs["key"].tolist())
        assert not chunk_keys & seen_keys, "a run of equal keys was split across chunks"
        seen_keys |= chunk_keys
        got += list(zip(recs["key"].tolist(), shard.tolist(), recs["idx"].tolist()))
    assert got == sorted(want)


def _reference_pairs(key, rows, tag, k_max):
    """The buckets one at a time, as a loop (the rule of graph.ALL_PAIRS_UP_TO)."""
    out = set()
    buckets: dict[int, list] = {}
    for k, r, t in zip(key.tolist(), rows.tolist(), tag.tolist() if tag is not None else [None] * len(key)):
        buckets.setdefault(k, []).append((r, t))
    for members in buckets.values():
        if tag is not None:
            first: dict = {}
            for r, t in members:
                first.setdefault(t, r)
            members = [(r, t) for r, t in members if first[t] == r]
        m = [r for r, _ in members]
        if len(m) <= k_max:
            out |= set(combinations(m, 2))
        else:
            out |= {(m[0], x) for x in m[1:]} | {(m[i - 1], m[i]) for i in range(2, len(m))}
    return out


@pytest.mark.parametrize("use_tag", [False, True])
def test_candidate_pairs_match_a_loop(use_tag):
    rng = np.random.default_rng(1)
    key = np.sort(rng.integers(0, 60, 800).astype(np.uint64))
    rows = np.arange(800, dtype=np.int64) * 3
    tag = rng.integers(0, 4, 800).astype(np.uint32) if use_tag else None
    got = graph.candidate_pairs(key, rows, tag, all_pairs_up_to=8)
    assert {tuple(p) for p in got.tolist()} == _reference_pairs(key, rows, tag, 8)
    assert len(got) == len({tuple(p) for p in got.tolist()})


def test_components_match_a_python_union_find():
    rng = random.Random(2)
    for n, m in [(1, 0), (10, 3), (200, 150), (500, 1200)]:
        edges = np.array([(rng.randrange(n), rng.randrange(n)) for _ in range(m)], np.int64).reshape(-1, 2)
        parent = list(range(n))

        def find(x, parent=parent):
            while parent[x] != x:
                x = parent[x]
            return x

        for a, b in edges.tolist():
            ra, rb = find(a), find(b)
            parent[max(ra, rb)] = min(ra, rb)
        want = [find(i) for i in range(n)]
        assert graph.components(edges, n).tolist() == want
        # a spanning forest keeps exactly those components
        nodes = np.unique(edges)
        forest = stages.spanning_forest(edges)
        assert len(forest) == len(nodes) - len({want[x] for x in nodes.tolist()})
        if len(forest):
            assert graph.components(forest, n)[nodes].tolist() == [want[x] for x in nodes.tolist()]


def test_keeper_policy():
    root = np.array([0, 0, 0, 0, 4, 4])
    score = np.array([1.0, 2.0, 2.0, 2.0, -np.inf, -np.inf])
    length = np.array([50, 10, 30, 30, 5, 5])
    ids = np.array([b"a", b"z", b"y", b"x", b"q", b"q"])
    rows = np.arange(6)
    # best score, then longest, then smallest id; equal ids: the first row
    assert graph.keepers(root, score, length, ids, rows).tolist() == [3, 3, 3, 3, 4, 4]


@pytest.mark.parametrize("kw", [{}, {"exact": False}, {"near": False}, {"score_key": None, "threshold": None}])
def test_stages_equal_the_step_and_write_per_shard_removals(tmp_path, kw):
    docs = _docs()
    paths = write_shards(tmp_path / "in", docs, 3)
    want = _step_removals(docs, 3, **kw)
    r = run_dedup_stages(paths, str(tmp_path / "w"), DedupConfig(**kw))
    assert _rejected(str(tmp_path / "w" / "rejected")) == want
    assert r["removed"] == len(want) and r["docs"] == len(docs)
    assert r["rejected"] == {x: [v[0] for v in want.values()].count(x) for x in {v[0] for v in want.values()}}
    ids_by_shard = [[d.id for d in docs[i::3]] for i in range(3)]
    for s in range(3):
        z = np.load(tmp_path / "w" / "clusters" / f"{s:05d}.npz")
        idx = z["idx"].tolist()
        assert idx == sorted(idx)
        assert {ids_by_shard[s][i] for i in idx} == {i for i in want if i in set(ids_by_shard[s])}


def test_filter_copies_kept_lines_as_the_parsed_path_would_write_them(tmp_path, monkeypatch):
    docs = _docs()
    unique = ["Tidal charts for the northern harbour list two high waters a day, eleven minutes later each week.",
              "Our choir rehearses on Thursdays in the hall behind the bakery; new tenors are always welcome."]
    docs += [Document(f"kept-{i}", text) for i, text in enumerate(unique)]  # kept: nothing like them
    docs[-1].metadata.update(reason="an input field named reason", nested={"a": [1, 2.5, None]}, url="https://x.y/é")
    docs[-2].metadata["lone"] = "\udc80"  # written as a \\u escape: copied too, it reads back the same
    paths = write_shards(tmp_path / "in", docs, 2)
    with open_bytes(paths[0]) as f:  # and a blank line and a bad line in the shard: numbered as the reader does
        lines = f.read().splitlines(keepends=True)
    with JsonlWriter(str(tmp_path / "bad.jsonl.zst")) as w:
        for line in lines[:3] + [b"\n", b"{not json\n"] + lines[3:]:
            w.write_line(line)
    paths[0] = str(tmp_path / "bad.jsonl.zst")
    read_rows, copies = stages.read_rows, []

    def counting(path, passthrough):
        for row, item in read_rows(path, passthrough):
            copies.append(isinstance(item, bytes))
            yield row, item

    monkeypatch.setattr(stages, "read_rows", counting)
    copied = run_dedup_stages(paths, str(tmp_path / "fast"))
    assert any(copies) and not all(copies)
    monkeypatch.setattr(stages, "read_rows", lambda path, passthrough: read_rows(path, lambda row, line: False))
    parsed = run_dedup_stages(paths, str(tmp_path / "slow"))
    assert copied["rejected"] == parsed["rejected"] and copied["removed"] > 0
    rejected = lambda run: sorted(str(p) for p in (tmp_path / run / "rejected").iterdir())
    for a, b in [*zip(copied["outputs"], parsed["outputs"]), *zip(rejected("fast"), rejected("slow"), strict=True)]:
        with open_bytes(a) as fa, open_bytes(b) as fb:
            assert fa.read() == fb.read(), (a, b)
    with open_bytes(rejected("fast")[0]) as f:
        assert b"input.invalid_json" in f.read()


def test_load_rows_reads_a_rewritten_file_anew(tmp_path):
    url = str(tmp_path / "m.npy")
    save_npy(url, np.arange(12, dtype=np.uint32).reshape(4, 3))
    assert load_rows(url, np.array([1, 3])).tolist() == [[3, 4, 5], [9, 10, 11]]
    save_npy(url, np.arange(100, 110, dtype=np.int64).reshape(5, 2))  # header cached for the old file
    got = load_rows(url, np.array([0, 4]))
    assert got.dtype == np.int64 and got.tolist() == [[100, 101], [108, 109]]
    save_npy(url, np.empty((0, 3), np.uint32))
    assert load_rows(url, np.array([], np.int64)).shape == (0, 3)


def test_hash_range_parts_give_the_same_answer(tmp_path):
    docs = _docs()
    paths = write_shards(tmp_path / "in", docs, 3)
    one = run_dedup_stages(paths, str(tmp_path / "p1"))
    four = run_dedup_stages(paths, str(tmp_path / "p4"), parts=4, workers=2)
    assert _rejected(str(tmp_path / "p1" / "rejected")) == _rejected(str(tmp_path / "p4" / "rejected"))
    assert {k: v for k, v in one.items() if k != "outputs"} == {k: v for k, v in four.items() if k != "outputs"}
    assert len(list((tmp_path / "p4" / "edges").glob("band-000-*.npy"))) == 4
    with pytest.raises(ValueError, match="parts must divide"):
        run_dedup_stages(paths, str(tmp_path / "p3"), parts=3)
    assert SLOTS % 4 == 0


def test_work_dir_on_an_fsspec_filesystem(tmp_path):
    docs = _docs()
    paths = write_shards(tmp_path / "in", docs, 2)
    work = "memory://dedup-test/work"
    try:
        r = run_dedup_stages(paths, work, rejected_dir="memory://dedup-test/rejected")
        assert _rejected("memory://dedup-test/rejected") == _step_removals(docs, 2)
        assert r["outputs"][0].startswith("memory://") and io.exists(r["outputs"][0])
        again = run_dedup_stages(paths, work, rejected_dir="memory://dedup-test/rejected")  # all markers done
        assert again == r
    finally:
        io.remove("memory://dedup-test", recursive=True)


def test_missing_file_names_it(tmp_path):
    paths = write_shards(tmp_path / "in", _docs(), 2)
    work = tmp_path / "w"
    run_dedup_stages(paths, str(work), stop_after="signatures")
    (work / "signatures" / "00001" / "index.npy").unlink()
    with pytest.raises(Exception, match="00001/index.npy"):
        run_dedup_stages(paths, str(work))


def test_errors_name_the_job(tmp_path):
    paths = write_shards(tmp_path / "in", _docs(), 2)
    work = tmp_path / "w"
    run_dedup_stages(paths, str(work), stop_after="signatures")
    (work / "signatures" / "00001" / "band-004.bin").write_bytes(b"x" * 5)  # not a whole record
    with pytest.raises(Exception, match=r"_bucket failed: .*00001/band-004.bin: truncated sorted file"):
        run_dedup_stages(paths, str(work))


def test_no_torch_and_no_cycles():
    import subprocess

    code = ("import sys; import bessemer.data.dedup.lexical, bessemer.data.dedup.stages, bessemer.data.dedup.semantic, "
            "bessemer.data.dedup.semantic_stages; assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_small_verify_chunks_and_forest_folding_give_the_same_answer(tmp_path, monkeypatch):
    docs = _docs()
    paths = write_shards(tmp_path / "in", docs, 3)
    monkeypatch.setattr(stages, "VERIFY_PAIRS", 5)  # many settle() rounds, each verified in chunks of 5
    monkeypatch.setattr(stages, "FOREST_EDGES", 7)  # and the kept pairs folded into a forest again and again
    run_dedup_stages(paths, str(tmp_path / "w"))  # workers=1: in this process, so the patch applies
    assert _rejected(str(tmp_path / "w" / "rejected")) == _step_removals(docs, 3)


def test_work_dir_on_s3(s3_endpoint, tmp_path, monkeypatch):
    """Input shards, work dir and exclusion sink on a real S3-protocol server (moto on loopback)."""
    import uuid

    url, options = s3_endpoint
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", options["endpoint_url"])
    prefix = f"{url}/{uuid.uuid4().hex[:8]}"
    docs = _docs()
    local = write_shards(tmp_path / "in", docs, 2)
    paths = []
    for p in local:
        paths.append(f"{prefix}/in/{Path(p).name}")
        io.write_bytes(paths[-1], Path(p).read_bytes())
    r = run_dedup_stages(paths, f"{prefix}/work", rejected_dir=f"{prefix}/rejected")
    assert _rejected(f"{prefix}/rejected") == _step_removals(docs, 2)
    assert r["removed"] == len(_step_removals(docs, 2)) and io.exists(f"{prefix}/work/clusters/00001.npz")
    assert run_dedup_stages(paths, f"{prefix}/work", rejected_dir=f"{prefix}/rejected") == r  # resumes: all done
