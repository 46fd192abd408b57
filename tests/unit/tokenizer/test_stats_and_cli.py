"""`bessemer tokenizer stats` numbers, and the command line: errors as one line, bad input records counted,
no torch."""

import json
import subprocess
import sys

import pytest

from bessemer.cli import main
from bessemer.tokenizer.stats import format_stats, tokenizer_stats


def test_stats_are_sane(trained, corpus_file):
    stats = tokenizer_stats(trained["bpe"], corpus_file)
    d = stats["domains"]
    assert set(d) == {"code", "prose_en", "prose_zh", "legal_zh"}
    assert d["prose_en"]["bytes_per_token"] > 2.5 and 1 < d["prose_en"]["tokens_per_word"] < 3
    assert d["code"]["bytes_per_token"] > 2 and d["code"]["byte_fallback_rate"] == 0.0
    # Chinese characters are 3 bytes; the legal templates repeat, so their tokens are long.
    assert d["legal_zh"]["bytes_per_token"] > d["prose_zh"]["bytes_per_token"] > 1
    assert d["prose_zh"]["byte_fallback_rate"] > 0  # rare characters stay as byte pieces in a 3000 vocabulary
    assert len(d["legal_zh"]["longest_tokens_used"][0]) >= 10  # a whole template clause
    assert len(stats["longest_tokens"]) == 10 and stats["merges"] > 0
    assert "legal_zh" in format_stats(stats)


def test_stats_of_sentencepiece_counts_byte_pieces(trained, corpus_file, tmp_path):
    stats = tokenizer_stats(trained["sentencepiece"], corpus_file, max_docs=20)
    assert all(d["docs"] <= 20 for d in stats["domains"].values())
    # Unigram keeps every character it saw; characters it never saw are byte pieces: 4 each here.
    unseen = tmp_path / "unseen.jsonl"
    unseen.write_text(json.dumps({"text": "𝔘𝔫𝔦", "metadata": {"domain": "math"}}) + "\n")
    math = tokenizer_stats(trained["sentencepiece"], unseen)["domains"]["math"]
    assert (math["tokens"], math["byte_fallback_rate"], math["words"]) == (12, 1.0, 1)


def test_cli_train_encode_stats_with_bad_lines(tmp_path, corpus, capsys):
    src = tmp_path / "in.jsonl"
    lines = [json.dumps(d, ensure_ascii=False) for d in corpus[:150]]
    lines[3] = "{not json"
    lines[7] = json.dumps({"body": "no text field"})
    src.write_text("\n".join(lines) + "\n")
    assert main(["tokenizer", "train", "--input", str(src), "--vocab-size", "600", "--output", str(tmp_path / "tok"),
                 "--domains", "web"]) == 0
    out, err = capsys.readouterr()
    assert (f"skipped 2 bad input records (1 input.invalid_json, 1 input.missing_text): {src}:4 input.invalid_json; "
            f"{src}:8 input.missing_text") in err
    assert "vocab 600" in out and "web" in out
    meta = json.loads((tmp_path / "tok" / "tokenizer_meta.json").read_text())
    assert meta["corpus"]["bad_lines"] == 2 and meta["corpus"]["docs"] == 148

    assert main(["tokenizer", "encode", "--tokenizer", str(tmp_path / "tok"), "--input", str(src),
                 "--output", str(tmp_path / "shards"), "--workers", "1"]) == 0
    out, err = capsys.readouterr()
    assert "wrote 148 documents" in out and "skipped 2 bad input records" in err
    assert main(["tokenizer", "stats", "--tokenizer", str(tmp_path / "tok"), "--input", str(src), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["bad_lines"] == 2


@pytest.mark.parametrize("action", ["train", "encode", "stats"])
def test_cli_missing_and_empty_input(tmp_path, trained, capsys, action):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    tail = {"train": ["--vocab-size", "600", "--output", str(tmp_path / "tok")],
            "encode": ["--tokenizer", str(trained["bpe"]), "--output", str(tmp_path / "shards")],
            "stats": ["--tokenizer", str(trained["bpe"])]}[action]
    assert main(["tokenizer", action, "--input", str(tmp_path / "missing.jsonl"), *tail]) == 2
    err = capsys.readouterr().err
    assert "missing.jsonl' does not exist" in err and err.count("\n") == 1
    assert main(["tokenizer", action, "--input", str(empty), *tail]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no documents" in err and "empty.jsonl" in err


def test_cli_other_errors(tmp_path, trained, capsys):
    assert main(["tokenizer", "encode", "--tokenizer", str(tmp_path), "--input", str(tmp_path),
                 "--output", str(tmp_path / "o")]) == 2
    assert "no tokenizer at" in capsys.readouterr().err
    src = tmp_path / "a.txt"
    src.write_text("hello")
    assert main(["tokenizer", "train", "--input", str(src), "--vocab-size", "100", "--output", str(tmp_path / "t")]) == 2
    assert "too small" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["tokenizer", "train", "--input", str(src), "--vocab-size", "100", "--output", "x", "--kind", "wordpiece"])


def test_tokenizer_commands_do_not_import_torch(tmp_path, corpus_file):
    code = f"""
import sys
from bessemer.cli import main
tok, shards = {str(tmp_path / 'tok')!r}, {str(tmp_path / 'shards')!r}
assert main(["tokenizer", "train", "--input", {str(corpus_file)!r}, "--vocab-size", "1000", "--output", tok]) == 0
assert main(["tokenizer", "encode", "--tokenizer", tok, "--input", {str(corpus_file)!r}, "--output", shards,
             "--workers", "1", "--heldout", "0.1"]) == 0
assert main(["tokenizer", "stats", "--tokenizer", tok, "--input", {str(corpus_file)!r}, "--max-docs", "5"]) == 0
assert "torch" not in sys.modules, "torch was imported"
"""
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "shards" / "index.json").is_file() and (tmp_path / "shards" / "heldout" / "index.json").is_file()
