"""`bessemer data run|stats|STEP`: run a pipeline TOML, or one step alone, and print its stats. No torch.

Building the parser imports only the step registry (`steps.py`: no step modules), so `bessemer data
--help` stays fast and loads neither jieba nor ftfy; a step appears as a subcommand only when its module
exists (checked with `find_spec`, without importing it).
"""

import argparse
import importlib.util
import json
import tomllib
from pathlib import Path

from bessemer.errors import BessemerError

FORMATS = ("jsonl.zst", "jsonl", "parquet")
INPUT_FORMATS = ("jsonl", "parquet", "text", "warc")
# Step arguments with a flag of their own (every other one goes through --option KEY=VALUE): flag -> argparse
# settings; `dest` is the step's argument.
STEP_FLAGS: dict[str, dict[str, dict]] = {
    "decontaminate": {"--tasks": {"dest": "tasks", "nargs": "+", "required": True, "metavar": "TASK",
                                  "help": "benchmark task files (TOML, as `bessemer eval` reads them) or directories "
                                          "of them"}},
}


def available_steps() -> list[str]:
    """Registered steps whose module is present (a step another change has not landed yet is left out)."""
    from bessemer.data.steps import STEPS

    names = []
    for name, target in STEPS.items():
        module = target.partition(":")[0] if isinstance(target, str) else target.__module__
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if found:
            names.append(name)
    return names


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def add_parser(sub: argparse._SubParsersAction) -> None:
    steps = available_steps()
    p = sub.add_parser("data", help="curate raw text: run a pipeline or one step; stats, report",
                       description="Curate raw text into clean shards. Every rejected document goes to the "
                                   "exclusion sink with its reason; stats.json proves in = out + rejected. "
                                   "See docs/data.md and docs/data-cli.md.")
    actions = p.add_subparsers(dest="data_command", required=True, metavar="ACTION")

    r = actions.add_parser("run", help="run (or resume) a pipeline TOML; writes shards, stats.json, report/",
                           description="Run the pipeline; a rerun skips the shards already done.")
    r.add_argument("pipeline", metavar="PIPELINE.toml")
    r.add_argument("--workers", type=_positive, default=None, metavar="N",
                   help="overrides executor.workers (processes, or local Ray CPUs)")
    r.add_argument("--executor", choices=("local", "ray"), default=None, help="overrides executor.kind")
    r.add_argument("--address", default=None, metavar="HOST:PORT",
                   help="join the Ray cluster whose head is at HOST:PORT (as `ray start --head` prints it; also "
                        "\"auto\" or ray://...); implies --executor ray")
    r.add_argument("--no-report", action="store_true", help="don't write OUTDIR/report/index.html")

    s = actions.add_parser("stats", help="print the stats.json of an output directory",
                           description="Print the per-step summary of OUTDIR/stats.json.")
    s.add_argument("outdir", metavar="OUTDIR")
    s.add_argument("--json", action="store_true", help="print stats.json itself")
    s.add_argument("--report", action="store_true", help="also (re)build OUTDIR/report/index.html")

    from bessemer.data.quality.classifier import (
        add_quality_train_arguments,  # argparse only; fasttext loads when run
    )

    add_quality_train_arguments(actions.add_parser(
        "quality-train", help="train the fastText quality classifier from labeled JSONL",
        description="Train a fastText model (label hq/lq, 1/0, ...) for the quality step's `model` option; "
                    "prints held-out precision and recall."))

    for name in steps:
        st = actions.add_parser(name, help=f"run the {name} step alone",
                                description=f"A one-step pipeline: read IN, run {name}, write OUT (shards, "
                                            f"stats.json, report/) and the rejected documents.")
        st.add_argument("--input", required=True, action="append", metavar="IN",
                        help="file, directory or glob; repeatable")
        st.add_argument("--output", required=True, metavar="OUT", help="output directory")
        st.add_argument("--rejected", default="", metavar="REJ", help="exclusion sink (default OUT/rejected)")
        st.add_argument("--workers", type=_positive, default=1, metavar="N", help="worker processes (default 1)")
        st.add_argument("--shards", type=int, default=0, metavar="N",
                        help="output shards (default: one per input file)")
        st.add_argument("--format", choices=FORMATS, default="jsonl.zst", help="output format (default jsonl.zst)")
        st.add_argument("--input-format", choices=INPUT_FORMATS, default="jsonl", help="default jsonl")
        st.add_argument("--text-field", default="text", help="JSONL field / Parquet column with the text")
        st.add_argument("--executor", choices=("local", "ray"), default="local")
        st.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a step argument (value read as TOML: 3, true, \"x\", [\"a\"]; else a string); "
                             "repeatable")
        st.add_argument("--no-report", action="store_true", help="don't write OUT/report/index.html")
        for flag, settings in STEP_FLAGS.get(name, {}).items():
            st.add_argument(flag, **settings)


def parse_option(text: str) -> tuple[str, object]:
    """`action=hash` -> ("action", "hash"); `min_words=50` -> 50; `types=["EMAIL"]` -> ["EMAIL"]."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise BessemerError(f"--option {text!r}: expected KEY=VALUE")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key, value


def step_pipeline(args: argparse.Namespace):
    """The one-step pipeline of `bessemer data STEP ...`."""
    from bessemer.data.pipeline_toml import Pipeline

    spec: dict = {"name": args.data_command}
    for settings in STEP_FLAGS.get(args.data_command, {}).values():
        spec[settings["dest"]] = getattr(args, settings["dest"])
    for text in args.option:
        key, value = parse_option(text)
        spec[key] = value
    return Pipeline.from_dict({
        "input": {"paths": args.input, "format": args.input_format, "text_field": args.text_field},
        "steps": [spec],
        "executor": {"kind": args.executor, "workers": args.workers, "shards": args.shards},
        "output": {"dir": args.output, "format": args.format, "rejected": args.rejected},
    }, where=f"bessemer data {args.data_command}")


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    raise AssertionError(n)


def print_stats(stats: dict, title: str = "") -> None:
    """A rich table of stats.json: one row per step (docs in/out, bytes, rejected by reason, seconds)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title or None, title_justify="left")
    for col in ("step", "docs in", "docs out", "bytes out", "rejected", "seconds"):
        table.add_column(col, justify="left" if col in ("step", "rejected") else "right")
    for st in stats.get("steps", []):
        reasons = "\n".join([f"{reason}: {n:,}" for reason, n in st["rejected"].items()]
                            + [f"{reason}: {n:,} parts cut" for reason, n in st.get("extra", {}).get("cut", {}).items()]
                            ) or "-"
        table.add_row(st["name"], f"{st['docs_in']:,}", f"{st['docs_out']:,}", _fmt_bytes(st["bytes_out"]),
                      reasons, f"{st['seconds']:.2f}")
    console = Console(width=max(100, Console().width))
    console.print(table)
    verdict = "conserved" if stats.get("conserved") else "NOT CONSERVED"
    done = "" if stats.get("complete", True) else f" (incomplete: {stats.get('shards_done')} of {stats.get('shards')} shards)"
    console.print(f"{stats.get('docs_in', 0):,} in = {stats.get('docs_out', 0):,} out + "
                  f"{stats.get('docs_rejected', 0):,} rejected: {verdict}; {stats.get('shards', 0)} shards{done}",
                  highlight=False)


def read_stats(outdir: str) -> dict:
    """`<outdir>/stats.json` of a local or remote (`s3://...`) output directory."""
    from bessemer.data import io

    path = io.join(outdir, "stats.json")
    if not io.exists(path):
        raise BessemerError(f"no stats.json in {outdir} (not a finished `bessemer data` output directory)")
    try:
        return json.loads(io.read_bytes(path))
    except json.JSONDecodeError as e:
        raise BessemerError(f"{path}: not valid JSON ({e})") from None


def write_report(outdir: str) -> str:
    """Build `<outdir>/report/` from its stats.json; a remote output directory gets it built locally and uploaded."""
    from bessemer.data import io
    from bessemer.report.data_report import build_data_report

    if io.is_local(outdir):
        return str(build_data_report(outdir))
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "stats.json").write_text(json.dumps(read_stats(outdir)), encoding="utf-8")
        built = build_data_report(tmp, title=outdir.rstrip("/").rpartition("/")[2]).parent
        for f in sorted(built.iterdir()):
            io.write_bytes(io.join(outdir, "report", f.name), f.read_bytes())
    return io.join(outdir, "report", "index.html")


def _run(pipeline, report: bool) -> int:
    from bessemer.data.phases import run_pipeline

    stats = run_pipeline(pipeline)
    print_stats(stats, title=f"bessemer data: {pipeline.output.dir}")
    if report:
        print(f"report: {write_report(pipeline.output.dir)}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.data_command == "quality-train":
        from bessemer.data.quality.classifier import run_quality_train

        return run_quality_train(args)
    if args.data_command == "stats":
        stats = read_stats(args.outdir)
        if args.json:
            print(json.dumps(stats, indent=1))
        else:
            print_stats(stats, title=f"{args.outdir}/stats.json")
        if args.report:
            print(f"report: {write_report(args.outdir)}")
        return 0
    if args.data_command == "run":
        from bessemer.data.pipeline_toml import load_pipeline

        if not Path(args.pipeline).is_file():
            raise BessemerError(f"no such pipeline file: {args.pipeline}")
        pipeline = load_pipeline(args.pipeline)
        if args.workers is not None:
            pipeline.executor.workers = args.workers
        if args.executor is not None:
            pipeline.executor.kind = args.executor
        if args.address is not None:
            pipeline.executor.kind, pipeline.executor.address = "ray", args.address
        pipeline.executor.validate()
        return _run(pipeline, not args.no_report)
    return _run(step_pipeline(args), not args.no_report)
