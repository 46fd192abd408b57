"""`bessemer doctor`: check a node before a run is started on it. Argument parsing only at import; the checks
and rich are imported when the command runs. No torch."""

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "doctor", help="check this node (or a snapshot of one) for settings that break or slow training",
        usage="bessemer doctor [--json] [--root DIR] [--only ID,...] [--ckpt-dir DIR ...] [--runtime [--tp N ...]]",
        description="Host checks: vm.max_map_count, numa.affinity, clock.sync, nccl.env, rdma.links, rdma.pfc, "
                    "gpu.health, storage.checkpoint, shm.size, limits, versions. Exit 1 if any fails. "
                    "See docs/doctor.md.")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--root", metavar="DIR", default=None,
                   help="read /proc, /sys, /etc and /dev/shm under DIR (a snapshot of another node); checks that "
                        "need the live machine skip unless DIR holds their fixture file")
    p.add_argument("--only", metavar="ID,...", default=None, help="run only these check ids (comma-separated)")
    p.add_argument("--ckpt-dir", metavar="DIR", action="append", default=None,
                   help="where checkpoints will be written (repeatable; default: the current and temp directories)")
    p.add_argument("--runtime", action="store_true",
                   help="also run the runtime checks over every rank of a job (under torchrun): collective "
                        "bandwidth, RNG, initial weights, clock skew, data loader")
    from bessemer.doctor.runtime import add_runtime_arguments  # argparse only: torch loads when the checks run

    add_runtime_arguments(p)
    return p


def run(args: argparse.Namespace) -> int:
    """The host checks' report (table or JSON) and, with --runtime, the runtime checks' (printed after it, by
    rank 0); exit 1 when any check fails, else 0."""
    from bessemer.doctor.host import select

    args.only = [i.strip() for i in args.only.split(",") if i.strip()] if args.only else None
    select(args.only)  # an unknown id stops every rank here, before any waits in a collective
    if args.runtime:
        from bessemer.doctor.runtime import run_runtime
        from bessemer.parallel.dims import Launch

        # Host checks once per node (its first local rank), not once per GPU; then every rank joins the
        # runtime checks, which rank 0 reports.
        host_code = _report_host(args) if Launch.from_env().local_rank == 0 else 0
        return max(host_code, run_runtime(args))
    return _report_host(args)


def _report_host(args: argparse.Namespace) -> int:
    import json

    from bessemer.doctor.host import host_name, run_checks, summarize

    checks = run_checks(root=args.root, only=args.only, ckpt_dirs=args.ckpt_dir)
    if args.json:
        print(json.dumps({"host": host_name(args.root), "root": args.root, "checks": [c.as_dict() for c in checks],
                          "summary": summarize(checks)}, indent=2, default=str))
    else:
        _print_table(checks, args.root)
    return _exit_code(checks)


def _exit_code(checks: list) -> int:
    return 1 if any(c.status == "fail" for c in checks) else 0


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
    console = Console()
    if not console.is_terminal:  # piped or logged: rich would wrap at 80 columns
        console = Console(width=160)
    console.print(table)
    counts = summarize(checks)
    console.print("  ".join(f"[{STYLES[s]}]{n} {s}[/]" for s, n in counts.items()))


def _plain(text: str) -> str:
    from rich.markup import escape

    return escape(text)
