"""Inputs through the curation readers: JSONL plain, gzip and zstd, Parquet, .txt files, directories;
bad records counted by reason, never fatal."""

import gzip
import json

import pytest

from bessemer.errors import BessemerError
from bessemer.tokenizer.inputs import BadRecords, list_sources, read_documents


def test_formats_and_directories(tmp_path):
    lines = [json.dumps({"text": f"doc {i}", "meta": {"lang": "en" if i % 2 else "zh"}}) for i in range(4)]
    (tmp_path / "a.jsonl").write_text("\n".join(lines[:2]) + "\n")
    with gzip.open(tmp_path / "b.jsonl.gz", "wt") as f:
        f.write(lines[2] + "\n")
    zstandard = pytest.importorskip("zstandard")
    (tmp_path / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress((lines[3] + "\n").encode()))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "d.txt").write_text("a whole file\nis one document")
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"text": ["row one", "row two"], "domain": ["web", "code"]}), tmp_path / "e.parquet")
    (tmp_path / "ignored.csv").write_text("x")
    bad = BadRecords()
    docs = list(read_documents(tmp_path, bad, domain_field="meta.lang"))
    assert docs == [("doc 0", "zh"), ("doc 1", "en"), ("doc 2", "zh"), ("doc 3", "en"), ("row one", None),
                    ("row two", None), ("a whole file\nis one document", None)]
    assert bad.total == 0
    assert list(read_documents(tmp_path / "e.parquet", bad, domain_field="metadata.domain")) == [
        ("row one", "web"), ("row two", "code")]


def test_bad_records_are_counted_with_their_place(tmp_path):
    src = tmp_path / "x.jsonl"
    src.write_bytes(b'{"text": "ok"}\n[1, 2]\n{"text": 3}\n\xff\xfe\n{"text": "fine"}\n\n{oops\n')
    bad = BadRecords(keep=2)
    docs = list(read_documents(src, bad))
    assert docs == [("ok", None), ("fine", None)]
    assert bad.counts == {"input.invalid_json": 2, "input.missing_text": 1, "input.invalid_utf8": 1}
    assert bad.summary() == (f"skipped 4 bad input records (2 input.invalid_json, 1 input.invalid_utf8, "
                             f"1 input.missing_text): {src}:2 input.invalid_json; {src}:3 input.missing_text (first 2)")


@pytest.mark.parametrize("suffix", [".gz", ".zst"])
def test_truncated_compressed_file_keeps_what_was_read_and_says_so(tmp_path, suffix):
    lines = b"".join(json.dumps({"text": f"doc {i} " + "x" * (i % 97)}).encode() + b"\n" for i in range(20000))
    if suffix == ".gz":
        data = gzip.compress(lines)
    else:
        zstandard = pytest.importorskip("zstandard")
        data = zstandard.ZstdCompressor().compress(lines[:300_000]) + zstandard.ZstdCompressor().compress(lines[300_000:])
        (tmp_path / "whole.jsonl.zst").write_bytes(data)  # two frames back to back
        assert len(list(read_documents(tmp_path / "whole.jsonl.zst", BadRecords()))) == 20000
    (tmp_path / f"t.jsonl{suffix}").write_bytes(data[: len(data) * 3 // 4])
    bad = BadRecords()
    docs = list(read_documents(tmp_path / f"t.jsonl{suffix}", bad))
    assert 0 < len(docs) < 20000 and "input.truncated" in bad.summary()


def test_missing_and_unsupported_inputs(tmp_path):
    with pytest.raises(BessemerError, match="does not exist"):
        list_sources(tmp_path / "nope")
    with pytest.raises(BessemerError, match="holds no .jsonl"):
        list_sources(tmp_path)
    with pytest.raises(BessemerError, match="unknown input format"):
        list_sources(tmp_path, "csv")
