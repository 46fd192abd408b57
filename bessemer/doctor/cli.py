"""`bessemer doctor`: check a node before a run is started on it. Argument parsing only at import; the checks
and rich are imported when the command runs. No torch."""

import argparse

EXAMPLES = """examples:
  bessemer doctor                                   this machine: a table; exit 1 if a check fails
  bessemer doctor --json --strict                   one JSON document; exit 1 on a warning too
  bessemer doctor --expect-gpus 8 --expect-link-rate 400      an 8-GPU node with NDR (400 Gb/s) ports
  bessemer doctor --config run.toml                 the run's timeout vs its checkpoint save, its checkpoint dirs
  bessemer doctor --root snapshots/gpu-042 --only rdma.links,rdma.pfc      a copy of another node
  torchrun --nproc-per-node 8 -m bessemer.cli doctor --runtime --tp 2 --json    plus the runtime checks
  bessemer doctor --run-dir runs/x                  the hangs of a run: who hung, where, what the others waited in

exit codes: 0 all passed (warnings allowed unless --strict), 1 a check failed (or warned with --strict; with
--run-dir: the run had a hang), 2 bad arguments or config. See docs/doctor.md."""


def _gpu_count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a GPU count >= 1, got {text!r}")
    return int(text)


def _positive(unit: str):
    """An argparse type: a number > 0 in `unit`."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not value > 0 or value == float("inf"):
            raise argparse.ArgumentTypeError(f"expected a number of {unit} > 0, got {text!r}")
        return value
    return parse


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "doctor", help="check this node (or a snapshot of one) for settings that break or slow training",
        usage="bessemer doctor [--json] [--strict] [--root DIR] [--only ID,...] [--expect-gpus N] "
              "[--expect-link-rate GBPS] [--config RUN.toml [--storage-write-gbs GBS]] [--ckpt-dir DIR ...] "
              "[--runtime [--tp N ...]] | --run-dir RUN [--json]",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXAMPLES,
        description="Host checks of the kernel settings, limits, clock, NCCL environment, InfiniBand/RoCE fabric, "
                    "GPUs and checkpoint storage; with --runtime, collective checks over every rank of a job.")
    p.add_argument("--json", action="store_true",
                   help="print one JSON document (with schema_version) instead of a table (default: a table)")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when a check warns, not only when one fails (default: warnings keep exit 0)")
    p.add_argument("--root", metavar="DIR", default=None,
                   help="read /proc, /sys, /etc and /dev/shm under DIR (a snapshot of another node); checks that "
                        "need the live machine skip unless DIR holds their fixture file (default: this machine)")
    p.add_argument("--only", metavar="ID,...", default=None,
                   help="run only these check ids, comma-separated (default: all)")
    p.add_argument("--expect-gpus", type=_gpu_count, default=None, metavar="N",
                   help="the node has N GPUs: gpu.health fails when the driver does not load or fewer answer "
                        "(default: not counted, a node without GPUs skips)")
    p.add_argument("--expect-link-rate", type=_positive("Gb/s"), default=None, metavar="GBPS",
                   help="the rate every InfiniBand/RoCE port in use must reach, in Gb/s (400 = NDR, 200 = HDR); "
                        "rdma.links fails for slower ports (default: not checked, mixed rates only warn)")
    p.add_argument("--config", metavar="RUN.toml", default=None,
                   help="a run config: nccl.env compares its parallel.timeout_s with one checkpoint save (its "
                        "model's checkpoint over the measured or --storage-write-gbs bandwidth), and "
                        "storage.checkpoint probes its checkpoint dirs (default: no run)")
    p.add_argument("--storage-write-gbs", type=_positive("GB/s"), default=None, metavar="GBS",
                   help="with --config: the checkpoint storage's write bandwidth in GB/s as planned (`bessemer plan "
                        "--storage-write-gbs`), instead of the write probe here (default: measured)")
    p.add_argument("--ckpt-dir", metavar="DIR", action="append", default=None,
                   help="where checkpoints will be written, repeatable (default: --config's checkpoint dirs, else "
                        "the current and temp directories)")
    p.add_argument("--run-dir", metavar="RUN", default=None,
                   help="instead of checking this node, sum up the hangs of a finished or failed run: the hang "
                        "watchdog's verdicts and every rank's dump under RUN/logs/hang/ (default: no run)")
    p.add_argument("--runtime", action="store_true",
                   help="also run the runtime checks over every rank of a job (under torchrun): collective "
                        "bandwidth, RNG, initial weights, clock skew, data loader (default: host checks only)")
    from bessemer.doctor.runtime import add_runtime_arguments  # argparse only: torch loads when the checks run

    add_runtime_arguments(p)
    return p


def run(args: argparse.Namespace) -> int:
    """The host checks' report (table or JSON) and, with --runtime, the runtime checks'. Exit 1 when any check
    fails (or, with --strict, warns), else 0."""
    from bessemer.doctor.host import select
    from bessemer.errors import BessemerError

    if args.run_dir is not None:
        return report_hangs(args.run_dir, args.json)
    args.only = [i.strip() for i in args.only.split(",") if i.strip()] if args.only else None
    select(args.only)  # an unknown id stops every rank here, before any waits in a collective
    if args.storage_write_gbs is not None and args.config is None:
        raise BessemerError("--storage-write-gbs needs --config RUN.toml (the checkpoint it sizes is the run's)")
    run_cfg = None
    if args.config is not None:
        from bessemer.config import load_config

        run_cfg = load_config(args.config)  # a bad config stops every rank here too
    if not args.runtime:
        return _report_host(args, _host_checks(args, run_cfg))
    from bessemer.doctor.runtime import run_runtime
    from bessemer.parallel.dims import Launch

    # Host checks once per node (its first local rank), not once per GPU; then every rank joins the runtime
    # checks, which rank 0 reports. With --json rank 0 prints one document holding its node's host checks and
    # the runtime checks; another node's first rank prints its own node's host document.
    launch = Launch.from_env()
    host_code, host_doc = 0, None
    if launch.local_rank == 0:
        checks = _host_checks(args, run_cfg)
        if args.json and launch.rank == 0:
            host_doc = host_document(checks, args.root)
            host_code = exit_code(checks, args.strict)
        else:
            host_code = _report_host(args, checks)
    return max(host_code, run_runtime(args, host=host_doc))


def report_hangs(run_dir: str, as_json: bool) -> int:
    """`--run-dir`: every hang of the run (hangs.summarize) as text or one JSON document; 1 when there was one."""
    import json
    from pathlib import Path

    from bessemer.doctor.check import SCHEMA_VERSION
    from bessemer.errors import BessemerError
    from bessemer.hangs import hangs_dir, summarize

    if not Path(run_dir).is_dir():
        raise BessemerError(f"--run-dir {run_dir}: no such directory")
    hangs = summarize(run_dir)
    if as_json:
        print(json.dumps({"schema_version": SCHEMA_VERSION, "run_dir": str(run_dir), "hangs": hangs}, indent=2))
        return 1 if hangs else 0
    if not hangs:
        print(f"no hangs in {run_dir} (nothing under {hangs_dir(run_dir)})")
        return 0
    print(f"{len(hangs)} hang(s) in {run_dir}:")
    for h in hangs:
        print(f"\nattempt {h['attempt']}, step {h['step']}: {h['message']}")
        print(f"  dumps: {h['dir']}")
        for r in h["ranks"]:
            role = "hung" if r["rank"] in h["culprits"] else "live"
            inside = ", ".join(f"{w['op'] or 'a collective'} #{w['seq']} on {w['desc'] or w['group']}"
                               for w in r.get("pending", []))
            last = r.get("last")
            last_text = (f"last entered {last['op']} #{last['seq']} on {last['desc'] or last['group']}"
                         if last else "no collective recorded")
            print(f"  rank {r['rank']} ({role}, host {r['host']}, pid {r['pid']}, step {r['step']}): "
                  f"{'waits in ' + inside if inside else last_text}; training thread in "
                  f"{' < '.join(r.get('where', [])) or '?'}; stacks: {r['stacks']}")
        for rank in h["no_dump"]:
            print(f"  rank {rank} (hung): no dump (a stopped process cannot write one; its last heartbeat is in the "
                  f"verdict)")
    return 1


def _host_checks(args: argparse.Namespace, run_cfg) -> list:
    from bessemer.doctor.host import run_checks

    settings = run_settings(run_cfg, args.storage_write_gbs, args.root) if run_cfg is not None else {}
    config_dirs = settings.pop("ckpt_dirs", None)
    return run_checks(root=args.root, only=args.only, ckpt_dirs=args.ckpt_dir or config_dirs,
                      expect_gpus=args.expect_gpus, expect_link_rate_gbps=args.expect_link_rate, **settings)


def run_settings(cfg, storage_write_gbs: float | None, root: str | None) -> dict:
    """What a run config (JobConfig) tells the host checks, as run_checks keywords: its collective timeout,
    its checkpoint dirs, and how long one checkpoint save takes — the checkpoint its model implies (weights and
    AdamW states, plan/storage.py's bytes per parameter) over the planned write bandwidth, or over the slowest
    of its checkpoint dirs as this node's write probe measures it (one writer: a shared filesystem's
    aggregate bandwidth can be higher, give it with `storage_write_gbs`)."""
    from pathlib import Path

    from bessemer.checkpoint.paths import tier_dirs
    from bessemer.model.registry import MODEL_SIZES, count_params
    from bessemer.plan.storage import CHECKPOINT_BYTES_PER_PARAM

    dirs = tier_dirs(cfg.checkpoint, Path(cfg.run.dir))
    ckpt_dirs = [dirs["macro"]] + ([dirs["micro"]] if cfg.checkpoint.micro.interval != 0 else [])
    settings = {"timeout_s": cfg.parallel.timeout_s, "ckpt_dirs": ckpt_dirs}
    model = MODEL_SIZES[cfg.model.name]
    if cfg.model.vocab_size:
        model = model.with_vocab(cfg.model.vocab_size)
    gb = count_params(model)["total"] * CHECKPOINT_BYTES_PER_PARAM / 1e9
    size = f"{gb:,.1f} GB checkpoint of {cfg.model.name}"
    if cfg.checkpoint.async_save:
        return settings | {"save_basis": "checkpoint.async_save: the write runs in the background, collectives "
                                         "do not wait on it"}
    if storage_write_gbs is not None:
        return settings | {"checkpoint_save_s": gb / storage_write_gbs,
                           "save_basis": f"planned: {size} at {storage_write_gbs:g} GB/s, --storage-write-gbs"}
    if root is not None:
        return settings | {"save_basis": f"the {size} has no measured write bandwidth under --root (the probe "
                                         f"needs the live filesystem): give --storage-write-gbs"}
    from bessemer.doctor.host_storage import write_probe

    measured = []
    for directory in ckpt_dirs:
        existing = next(p for p in (directory.absolute(), *directory.absolute().parents) if p.exists())
        try:
            measured.append((write_probe(existing), directory))
        except OSError:
            continue  # storage.checkpoint reports the directory that cannot be written
    if not measured:
        return settings | {"save_basis": f"no checkpoint dir of the run could be written to measure the {size}"}
    mb_s, slowest = min(measured)
    return settings | {"checkpoint_save_s": gb * 1e3 / mb_s,
                       "save_basis": f"measured: {size} at {mb_s:.0f} MB/s, write+fsync into {slowest}"}


def host_document(checks: list, root: str | None) -> dict:
    """The host checks as JSON-ready data (the body of `--json` without --runtime)."""
    from bessemer.doctor.host import host_name, summarize

    return {"host": host_name(root), "root": root, "checks": [c.as_dict() for c in checks],
            "summary": summarize(checks)}


def _report_host(args: argparse.Namespace, checks: list) -> int:
    import json

    from bessemer.doctor.check import SCHEMA_VERSION

    if args.json:
        print(json.dumps({"schema_version": SCHEMA_VERSION, **host_document(checks, args.root)}, indent=2,
                         default=str))
    else:
        _print_table(checks, args.root)
    return exit_code(checks, args.strict)


def exit_code(checks: list, strict: bool = False) -> int:
    """1 when a check failed, or with `strict` warned; else 0."""
    bad = ("fail", "warn") if strict else ("fail",)
    return 1 if any(c.status in bad for c in checks) else 0


STYLES = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def _print_table(checks: list, root: str | None) -> None:
    from rich.console import Console
    from rich.table import Table

    from bessemer.doctor.host import host_name, summarize

    where = f"{host_name(root) or 'node'} (snapshot {root})" if root else host_name()
    table = Table(title=f"bessemer doctor: {where}", show_lines=True)
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("evidence", overflow="fold")  # fold, not "…": a truncated command is no use
    table.add_column("fix", overflow="fold")
    for c in checks:
        style = STYLES[c.status]
        table.add_row(c.id, f"[{style}]{c.status}[/]", _plain(c.evidence), _plain(c.fix))
    console = Console(emoji=False)  # "0000:ab:00.0" is a PCI address, not the :ab: emoji
    if not console.is_terminal:  # piped or logged: rich would wrap at 80 columns
        console = Console(width=160, emoji=False)
    console.print(table)
    counts = summarize(checks)
    console.print("  ".join(f"[{STYLES[s]}]{n} {s}[/]" for s, n in counts.items()))


def _plain(text: str) -> str:
    from rich.markup import escape

    return escape(text)
