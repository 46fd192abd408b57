"""`bessemer data run|stats|STEP`: one-step and TOML pipelines, the summary, exit codes, the report, no torch."""

import json
import subprocess
import sys
import textwrap

import pytest

from bessemer.cli import main
from bessemer.data.cli import available_steps, parse_option
from bessemer.report.data_report import build_data_report
from tests.unit.data.test_pipeline import read_jsonl_zst, write_inputs


def write_toml(tmp_path, **executor) -> str:
    extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in executor.items())
    path = tmp_path / "p.toml"
    path.write_text(textwrap.dedent(f"""
        [input]
        paths = ["{tmp_path / 'in'}"]
        format = "jsonl"

        [[steps]]
        name = "pii"
        action = "mask"

        [[steps]]
        name = "normalize"

        [executor]
        kind = "local"
        shards = 2
    """) + extra + f'\n[output]\ndir = "{tmp_path / "out"}"\nformat = "jsonl.zst"\n')
    return str(path)


def test_run_pipeline_prints_summary_and_writes_report(tmp_path, capsys):
    write_inputs(tmp_path / "in", n_files=3, per_file=20)
    assert main(["data", "run", write_toml(tmp_path), "--workers", "1"]) == 0
    shown = capsys.readouterr().out
    for word in ("input", "pii", "normalize", "input.invalid_json", "conserved", "docs in"):
        assert word in shown, word
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["conserved"] and stats["docs_in"] == 60 and stats["shards"] == 2
    assert [s["name"] for s in stats["steps"]] == ["input", "pii", "normalize"]
    page = (tmp_path / "out" / "report" / "index.html").read_text()
    assert "input.invalid_json" in page and "normalize" in page and 'src="docs.png"' in page
    assert (tmp_path / "out" / "report" / "docs.png").read_bytes()[:4] == b"\x89PNG"
    kept = [d for p in sorted((tmp_path / "out").glob("part-*")) for d in read_jsonl_zst(p)]
    assert len(kept) == stats["docs_out"] and not any("@example.com" in d["text"] for d in kept)

    assert main(["data", "stats", str(tmp_path / "out")]) == 0
    assert "conserved" in capsys.readouterr().out
    assert main(["data", "stats", str(tmp_path / "out"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["docs_out"] == stats["docs_out"]


def test_one_step_command(tmp_path, capsys):
    write_inputs(tmp_path / "in", n_files=2, per_file=10)
    rc = main(["data", "pii", "--input", str(tmp_path / "in" / "f0.jsonl"), "--input", str(tmp_path / "in" / "f1.jsonl"),
               "--output", str(tmp_path / "out"), "--rejected", str(tmp_path / "rej"), "--format", "jsonl",
               "--option", "action=hash", "--option", 'salt="s"', "--no-report"])
    assert rc == 0, capsys.readouterr().err
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["conserved"] and stats["docs_in"] == 20 and stats["shards"] == 2
    assert sorted(p.name for p in (tmp_path / "out").glob("part-*")) == ["part-00000.jsonl", "part-00001.jsonl"]
    assert sorted(p.name for p in (tmp_path / "rej").glob("part-*")) == ["part-00000.jsonl.zst", "part-00001.jsonl.zst"]
    assert not (tmp_path / "out" / "report").exists()
    docs = [json.loads(line) for line in (tmp_path / "out" / "part-00000.jsonl").read_text().splitlines()]
    assert docs and all(d["metadata"]["pii"]["action"] == "hash" for d in docs)


@pytest.mark.parametrize("argv, message", [
    (["data", "pii", "--input", "{tmp}/missing", "--output", "{tmp}/out"], "missing"),
    (["data", "pii", "--input", "{tmp}/in", "--output", "{tmp}/out", "--option", "acton=mask"], "did you mean 'action'"),
    (["data", "pii", "--input", "{tmp}/in", "--output", "{tmp}/out", "--option", "oops"], "KEY=VALUE"),
    (["data", "run", "{tmp}/nope.toml"], "no such pipeline file"),
    (["data", "stats", "{tmp}"], "no stats.json"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    write_inputs(tmp_path / "in", n_files=1, per_file=5)
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_parse_option_reads_toml_values():
    assert parse_option("action=hash") == ("action", "hash")
    assert parse_option("min_words=50") == ("min_words", 50)
    assert parse_option('types=["EMAIL", "PHONE"]') == ("types", ["EMAIL", "PHONE"])
    assert parse_option("keep=true") == ("keep", True)


def test_steps_listed_only_when_their_module_exists(monkeypatch):
    from bessemer.data import steps as pipeline

    monkeypatch.setitem(pipeline.STEPS, "not-yet", "bessemer.data.not_written_yet:Step")
    names = available_steps()
    assert "pii" in names and "normalize" in names and "not-yet" not in names


def test_report_from_stats_json(tmp_path):
    (tmp_path / "stats.json").write_text(json.dumps({
        "shards": 1, "docs_in": 10, "docs_out": 7, "docs_rejected": 3, "conserved": True,
        "rejected": {"input.invalid_json": 1, "quality.gopher.too_few_words": 2},
        "steps": [{"name": "input", "docs_in": 10, "docs_out": 9, "bytes_in": 900, "bytes_out": 800,
                   "rejected": {"input.invalid_json": 1}, "seconds": 0.1, "extra": {}},
                  {"name": "quality", "docs_in": 9, "docs_out": 7, "bytes_in": 800, "bytes_out": 650,
                   "rejected": {"quality.gopher.too_few_words": 2}, "seconds": 0.2, "extra": {}}]}))
    page = build_data_report(tmp_path).read_text()
    assert "quality.gopher.too_few_words" in page and "77.8%" in page and "holds" in page
    assert (tmp_path / "report" / "docs.png").stat().st_size > 1000


def test_data_command_in_subprocess_loads_no_torch(tmp_path):
    write_inputs(tmp_path / "in", n_files=1, per_file=10)
    code = ("import sys; from bessemer.cli import main; "
            f"rc = main(['data', 'normalize', '--input', {str(tmp_path / 'in')!r}, '--output', {str(tmp_path / 'out')!r}]); "
            "heavy = [m for m in ('torch', 'ray') if m in sys.modules]; "
            "assert rc == 0 and not heavy, (rc, heavy)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    help_only = ("import sys; from bessemer.cli import build_parser; build_parser(); "
                 "assert not [m for m in ('torch', 'jieba', 'ftfy', 'matplotlib') if m in sys.modules]")
    subprocess.run([sys.executable, "-c", help_only], check=True, timeout=60)
    assert (tmp_path / "out" / "report" / "index.html").is_file()
