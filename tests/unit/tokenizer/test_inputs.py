"""Input formats: JSONL plain, gzip and zstd, .txt files, directories; bad lines counted, never fatal."""

import gzip
import json

import pytest

from bessemer.errors import BessemerError
from bessemer.tokenizer.inputs import BadLines, input_files, read_documents


def test_formats_and_directories(tmp_path):
    lines = [json.dumps({"text": f"doc {i}", "meta": {"lang": "en" if i % 2 else "zh"}}) for i in range(4)]
    (tmp_path / "a.jsonl").write_text("\n".join(lines[:2]) + "\n")
    with gzip.open(tmp_path / "b.jsonl.gz", "wt") as f:
        f.write(lines[2] + "\n")
    zstandard = pytest.importorskip("zstandard")
    (tmp_path / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress((lines[3] + "\n").encode()))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "d.txt").write_text("a whole file\nis one document")
    (tmp_path / "ignored.csv").write_text("x")
    bad = BadLines()
    docs = list(read_documents(tmp_path, bad, domain_field="meta.lang"))
    assert docs == [("doc 0", "zh"), ("doc 1", "en"), ("doc 2", "zh"), ("doc 3", "en"),
                    ("a whole file\nis one document", None)]
    assert bad.total == 0


def test_bad_lines_are_counted_with_their_place(tmp_path):
    src = tmp_path / "x.jsonl"
    src.write_bytes(b'{"text": "ok"}\n[1, 2]\n{"text": 3}\n\xff\xfe\n{"text": "lone \\ud800 surrogate"}\n\n{oops\n')
    bad = BadLines(keep=2)
    docs = list(read_documents(src, bad))
    assert docs == [("ok", None), ("lone \ufffd surrogate", None)]
    assert bad.counts == {"no string field 'text'": 2, "invalid JSON": 2}
    assert bad.summary() == (f"skipped 4 bad input lines (2 invalid JSON, 2 no string field 'text'): "
                             f"{src}:2 no string field 'text'; {src}:3 no string field 'text' (first 2)")


@pytest.mark.parametrize("suffix", [".gz", ".zst"])
def test_truncated_compressed_file_keeps_what_was_read_and_says_so(tmp_path, suffix):
    lines = b"".join(json.dumps({"text": f"doc {i} " + "x" * (i % 97)}).encode() + b"\n" for i in range(20000))
    if suffix == ".gz":
        data = gzip.compress(lines)
    else:
        zstandard = pytest.importorskip("zstandard")
        data = zstandard.ZstdCompressor().compress(lines[:300_000]) + zstandard.ZstdCompressor().compress(lines[300_000:])
        (tmp_path / "whole.jsonl.zst").write_bytes(data)  # two frames back to back
        assert len(list(read_documents(tmp_path / "whole.jsonl.zst", BadLines()))) == 20000
    (tmp_path / f"t.jsonl{suffix}").write_bytes(data[: len(data) * 3 // 4])
    bad = BadLines()
    docs = list(read_documents(tmp_path / f"t.jsonl{suffix}", bad))
    assert 0 < len(docs) < 20000 and "unreadable after the last good line" in bad.summary()


def test_missing_and_unsupported_inputs(tmp_path):
    with pytest.raises(BessemerError, match="does not exist"):
        input_files(tmp_path / "nope")
    with pytest.raises(BessemerError, match="holds no .jsonl"):
        input_files(tmp_path)
    (tmp_path / "x.csv").write_text("a")
    with pytest.raises(BessemerError, match="expected one of"):
        input_files(tmp_path / "x.csv")
