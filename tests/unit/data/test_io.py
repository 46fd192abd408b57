"""Readers and writers: hostile input never crashes and every bad record is rejected with its reason;
round trips through JSONL, JSONL.zst, Parquet, text folders and WARC."""

import gzip
import io
import json
import os
import random
import time

import pytest
import zstandard

from bessemer.data.document import Document
from bessemer.data.phases import run_pipeline
from bessemer.data.pipeline_toml import InputConfig, Pipeline
from bessemer.data.readers import InputFile, list_inputs, read_file
from bessemer.data.writers import JsonlWriter, ParquetWriter

INPUT_REASONS = {"input.invalid_json", "input.invalid_utf8", "input.nul_bytes", "input.missing_text",
                 "input.too_large", "input.truncated", "input.unreadable"}


def read(path, format="jsonl", **kw) -> list[Document]:
    return list(read_file(InputFile(str(path), path.name), InputConfig(paths=[str(path)], format=format, **kw)))


def kept(docs):
    return [d for d in docs if "reason" not in d.metadata]


def reasons(docs):
    return [d.metadata["reason"] for d in docs if "reason" in d.metadata]


def lines(n: int, seed: int = 0) -> bytes:
    """n JSONL records whose text is incompressible, so truncating the compressed file cuts mid-stream."""
    rnd = random.Random(seed)
    return b"".join(json.dumps({"text": rnd.randbytes(24).hex(), "n": i}).encode() + b"\n" for i in range(n))


# --- hostile JSONL -----------------------------------------------------------------------------------------


def test_bad_lines_are_rejected_with_reason_and_source(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_bytes(
        b'{"text": "good one", "id": "g1", "lang": "en"}\n'
        b'{"text": "caf\xe9"}\n'                      # Latin-1 byte: invalid UTF-8
        b'{"text": "broken\n'                         # malformed JSON
        b'{"text": "a\x00b"}\n'                       # raw NUL byte
        b'{"text": "a\\u0000b"}\n'                    # NUL through a JSON escape
        b'{"text": "\\ud800 lone surrogate"}\n'      # parses, but cannot be written as UTF-8
        b'{"body": "no text field"}\n'
        b'[1, 2, 3]\n'
        + b"[" * 100_000 + b"\n"                      # nesting deep enough to blow the recursion limit
        + b"\n"                                       # blank: not a record
        b'{"text": "good two"}\n'
    )
    docs = read(p)
    assert [(d.id, d.text) for d in kept(docs)] == [("g1", "good one"), ("bad/11", "good two")]
    assert kept(docs)[0].metadata == {"lang": "en"}
    assert reasons(docs) == ["input.invalid_utf8", "input.invalid_json", "input.nul_bytes", "input.nul_bytes",
                             "input.invalid_utf8", "input.missing_text", "input.invalid_json", "input.invalid_json"]
    bad = docs[1]
    assert bad.id == "bad/2" and bad.metadata["source"].endswith("bad.jsonl:2")
    assert "\\xe9" in bad.metadata["raw"] and bad.text == ""
    assert docs[2].metadata["source"].endswith(":3") and "error" in docs[2].metadata
    assert len(docs[8].metadata["raw"]) < 300  # the raw preview is truncated


def test_empty_files_give_no_documents(tmp_path):
    for name, data in [("a.jsonl", b""), ("b.jsonl.gz", b""), ("c.jsonl.zst", b""),
                       ("d.jsonl.gz", gzip.compress(b"")), ("e.jsonl.zst", zstandard.ZstdCompressor().compress(b""))]:
        (tmp_path / name).write_bytes(data)
        assert read(tmp_path / name) == [], name


def test_huge_document_streams_and_size_cap(tmp_path):
    big = "x" * (50 << 20)  # 50 MB on one line
    p = tmp_path / "big.jsonl"
    with open(p, "w") as f:
        f.write(json.dumps({"text": big}) + "\n" + json.dumps({"text": "after"}) + "\n")
    t = time.perf_counter()
    docs = read(p)
    assert [len(d.text) for d in docs] == [50 << 20, 5]
    del docs
    capped = read(p, max_doc_bytes=1 << 20)
    assert reasons(capped) == ["input.too_large"] and capped[0].metadata["size"] > 50 << 20
    assert [d.text for d in kept(capped)] == ["after"]  # the rest of the huge line was skipped, not parsed
    assert time.perf_counter() - t < 30


@pytest.mark.parametrize("suffix", [".gz", ".zst"])
def test_truncated_compressed_file_keeps_what_came_before(tmp_path, suffix):
    data = lines(20_000)
    packed = gzip.compress(data) if suffix == ".gz" else zstandard.ZstdCompressor().compress(data)
    p = tmp_path / f"cut.jsonl{suffix}"
    p.write_bytes(packed[: len(packed) // 2])
    docs = read(p)
    good = kept(docs)
    assert 1000 < len(good) < 20_000
    assert [d.metadata["n"] for d in good] == list(range(len(good)))  # a clean prefix of the file
    assert reasons(docs).count("input.truncated") == 1
    assert set(reasons(docs)) <= {"input.truncated", "input.invalid_json"}  # a half line may precede the cut
    cut = docs[-1]
    assert cut.metadata["reason"] == "input.truncated" and cut.metadata["source"].endswith(p.name)


def test_concatenated_zstd_frames_are_one_stream(tmp_path):
    c = zstandard.ZstdCompressor()
    p = tmp_path / "multi.jsonl.zst"
    p.write_bytes(c.compress(lines(3)) + c.compress(lines(2, seed=1)))
    assert len(kept(read(p))) == 5 and reasons(read(p)) == []


def test_not_actually_gzip_is_unreadable(tmp_path):
    p = tmp_path / "fake.jsonl.gz"
    p.write_bytes(b'{"text": "plain"}\n')
    assert reasons(read(p)) == ["input.unreadable"]


def test_binary_file_as_jsonl_and_as_text(tmp_path):
    p = tmp_path / "random.bin"
    p.write_bytes(os.urandom(200_000))
    docs = read(p)
    assert docs and not kept(docs) and set(reasons(docs)) <= INPUT_REASONS
    assert reasons(read(p, format="text")) == ["input.nul_bytes"]


def test_hostile_directory_end_to_end_every_rejection_in_the_sink(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\nnope\n{"text": "x\x00"}\n')
    (src / "empty.jsonl").write_bytes(b"")
    (src / "binary.jsonl").write_bytes(os.urandom(20_000))
    packed = gzip.compress(lines(5000))
    (src / "cut.jsonl.gz").write_bytes(packed[: len(packed) // 2])
    out = tmp_path / "out"
    stats = run_pipeline(Pipeline.from_dict({"input": {"paths": [str(src)]}, "output": {"dir": str(out)},
                                             "executor": {"shards": 2}}))
    rejected = [json.loads(line) for p in sorted((out / "rejected").iterdir())
                for line in zstandard.ZstdDecompressor().stream_reader(p.read_bytes()).read().splitlines()]
    assert stats["conserved"] and stats["docs_rejected"] == len(rejected) > 3
    by_reason: dict[str, int] = {}
    for r in rejected:
        by_reason[r["metadata"]["reason"]] = by_reason.get(r["metadata"]["reason"], 0) + 1
    assert by_reason == stats["rejected"]
    assert {"input.invalid_utf8", "input.invalid_json", "input.nul_bytes", "input.truncated"} <= set(by_reason)
    assert stats["docs_in"] == stats["docs_out"] + stats["docs_rejected"]


# --- round trips -------------------------------------------------------------------------------------------

DOCS = [Document("a", "first 文本", {"lang": "zh", "n": 1}), Document("b", "second\nline", {}),
        Document("c", "", {"nested": {"k": [1, 2]}})]


@pytest.mark.parametrize("name", ["x.jsonl", "x.jsonl.zst"])
def test_jsonl_round_trip(tmp_path, name):
    with JsonlWriter(str(tmp_path / name)) as w:
        for d in DOCS:
            w.write(Document(d.id, d.text, dict(d.metadata)))
    assert read(tmp_path / name) == DOCS
    assert not list(tmp_path.glob("*.tmp"))


def test_writer_is_atomic(tmp_path):
    with pytest.raises(RuntimeError), JsonlWriter(str(tmp_path / "x.jsonl.zst")) as w:
        w.write(DOCS[0])
        raise RuntimeError("worker died")
    assert list(tmp_path.iterdir()) == []


def test_parquet_round_trip_and_foreign_columns(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    with ParquetWriter(str(tmp_path / "x.parquet"), rows_per_group=2) as w:
        for d in DOCS:
            w.write(Document(d.id, d.text, dict(d.metadata)))
    assert read(tmp_path / "x.parquet", format="parquet") == DOCS
    pq.write_table(pa.table({"content": ["hi", None, "a\x00"], "url": ["u1", "u2", "u3"]}), tmp_path / "f.parquet")
    docs = read(tmp_path / "f.parquet", format="parquet", text_field="content")
    assert docs[0] == Document("f/1", "hi", {"url": "u1"})
    assert reasons(docs) == ["input.missing_text", "input.nul_bytes"]
    assert reasons(read(tmp_path / "f.parquet", format="parquet")) == ["input.missing_text"]  # no 'text' column
    (tmp_path / "junk.parquet").write_bytes(b"PAR1 not really")
    assert reasons(read(tmp_path / "junk.parquet", format="parquet")) == ["input.unreadable"]


def test_text_folder_ids_are_relative_paths(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.txt").write_text("alpha")
    (tmp_path / "b.txt").write_text("beta")
    (tmp_path / "c.txt").write_bytes(b"bad \xff")
    (tmp_path / "ignored.md").write_text("not a .txt")
    files = list_inputs([str(tmp_path)], "text")
    assert [f.name for f in files] == ["b.txt", "c.txt", "sub/a.txt"]
    cfg = InputConfig(paths=[str(tmp_path)], format="text")
    docs = [d for f in files for d in read_file(f, cfg)]
    assert [(d.id, d.text) for d in kept(docs)] == [("b.txt", "beta"), ("sub/a.txt", "alpha")]
    assert reasons(docs) == ["input.invalid_utf8"]


def _warc(path, gzip_: bool) -> None:
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    with open(path, "wb") as f:
        w = WARCWriter(f, gzip=gzip_)
        for url, ctype, body in [("http://a.example/", "text/html; charset=utf-8", "<p>héllo</p>".encode()),
                                 ("http://a.example/logo.png", "image/png", b"\x89PNG\x00"),
                                 ("http://b.example/", "text/html; charset=gbk", "<p>你好</p>".encode("gbk")),
                                 ("http://c.example/", "text/html", b"<p>\xff\xfe</p>")]:
            headers = StatusAndHeaders("200 OK", [("Content-Type", ctype)], protocol="HTTP/1.1")
            w.write_record(w.create_warc_record(url, "response", payload=io.BytesIO(body), http_headers=headers))
        request = io.BytesIO(b"GET / HTTP/1.1\r\n\r\n")
        w.write_record(w.create_warc_record("http://a.example/", "request", payload=request))


@pytest.mark.parametrize("name", ["x.warc", "x.warc.gz"])
def test_warc_html_responses_become_documents(tmp_path, name):
    _warc(tmp_path / name, gzip_=name.endswith(".gz"))
    docs = read(tmp_path / name, format="warc")
    good = kept(docs)
    assert [d.text for d in good] == ["<p>héllo</p>", "<p>你好</p>"]
    assert good[0].metadata["url"] == "http://a.example/" and good[0].metadata["format"] == "html"
    assert good[0].metadata["content_type"].startswith("text/html") and good[0].metadata["status"] == "200"
    assert good[0].id.startswith("urn:uuid:")
    assert reasons(docs) == ["input.invalid_utf8"]


def test_truncated_warc_keeps_earlier_records(tmp_path):
    _warc(tmp_path / "x.warc.gz", gzip_=True)
    data = (tmp_path / "x.warc.gz").read_bytes()
    (tmp_path / "cut.warc.gz").write_bytes(data[: int(len(data) * 0.6)])
    docs = read(tmp_path / "cut.warc.gz", format="warc")
    assert kept(docs) and kept(docs)[0].text == "<p>héllo</p>"
    assert set(reasons(docs)) <= {"input.truncated", "input.unreadable", "input.invalid_utf8"}


def test_list_inputs_errors_and_globs(tmp_path):
    from bessemer.errors import BessemerError

    (tmp_path / "a.jsonl").write_text("")
    (tmp_path / "b.jsonl.zst").write_bytes(b"")
    assert [f.name for f in list_inputs([str(tmp_path / "*.jsonl*")], "jsonl")] == ["a.jsonl", "b.jsonl.zst"]
    with pytest.raises(BessemerError, match="does not exist"):
        list_inputs([str(tmp_path / "missing.jsonl")], "jsonl")
    with pytest.raises(BessemerError, match="matches no file"):
        list_inputs([str(tmp_path / "*.parquet")], "parquet")
