"""The `bessemer` command. Subcommands delegate to the packages; torch is imported only by those that train."""

import argparse
import os
import sys
from collections.abc import Callable

from bessemer.checkpoint import cli as ckpt_cli
from bessemer.data import cli as data_cli
from bessemer.doctor import cli as doctor_cli
from bessemer.errors import BessemerError, TrainingInterrupted
from bessemer.eval import cli as eval_cli
from bessemer.plan import cli as plan_cli
from bessemer.proc import exit_rank, to_console
from bessemer.tokenizer import cli as tokenizer_cli

# The commands whose package's cli.py adds their parser and runs them. Those modules hold argparse only at
# import (no torch): each loads its work when it runs.
PACKAGE_CLIS = {"ckpt": ckpt_cli, "doctor": doctor_cli, "plan": plan_cli, "tokenizer": tokenizer_cli,
                "data": data_cli, "eval": eval_cli}


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def _train_parser(sub: argparse._SubParsersAction) -> None:
    from bessemer.config import describe

    p = sub.add_parser(
        "train", help="train a model from a TOML config",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="bessemer train CONFIG [--nproc N] [--max-restarts K] [--resume] [--dry-run] [--section.key=value ...]",
        description="Train a model. Any config key can be overridden: --train.steps=50 --run.dir=runs/x",
        epilog="config sections and keys:\n\n" + describe())
    p.add_argument("config", help="TOML file, e.g. configs/debug.toml")
    p.add_argument("--resume", action="store_true",
                   help="continue from the newest checkpoint in the run's checkpoint dir (fresh start if none)")
    p.add_argument("--dry-run", action="store_true", help="resolve and check the config, print the run, don't train")
    p.add_argument("--nproc", type=_positive, default=1, metavar="N",
                   help="start N local processes with torchrun (one per GPU, or CPU processes with gloo); not "
                        "needed when already running under torchrun or srun")
    p.add_argument("--max-restarts", type=int, default=0, metavar="K",
                   help="restart every rank up to K times after one fails (torchrun's elastic agent); each restart "
                        "resumes from the newest intact checkpoint")


def _cmd_train(args: argparse.Namespace, overrides: list[str]) -> int:
    from bessemer.config import load_config, split_overrides

    cfg = load_config(args.config, split_overrides(overrides))
    if args.dry_run:
        from bessemer.train.dry_run import describe_run

        print(describe_run(cfg, args.nproc))
        return 0
    from bessemer.train.launch import train

    if args.max_restarts < 0:
        raise BessemerError(f"--max-restarts must be >= 0, got {args.max_restarts}")
    return train(cfg, args.config, split_overrides(overrides), args.nproc, args.resume, args.max_restarts)


def _cmd_demo(args: argparse.Namespace, overrides: list[str]) -> int:
    from bessemer.config import split_overrides
    from bessemer.demo.run import run_demo

    run_demo(args.run_dir, split_overrides(overrides))
    return 0


def _cmd_report(args: argparse.Namespace, overrides: list[str]) -> int:
    from bessemer.report.run_report import build_report

    print(build_report(args.run_dir))
    return 0


def _package_command(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace, list[str]], int]:
    """A command parsed and run by its package's cli.py (which imports its work only when it runs)."""
    return lambda args, overrides: run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bessemer", description="LLM pretraining: data, training, checkpoints.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _train_parser(sub)
    demo = sub.add_parser("demo", help="end to end on the bundled corpus: tokenizer, shards, training, report",
                          usage="bessemer demo [--run-dir DIR] [--section.key=value ...]")
    demo.add_argument("--run-dir", default="runs/demo", help="where everything goes (default runs/demo)")
    report = sub.add_parser("report", help="(re)build the HTML report of a run directory")
    report.add_argument("run_dir")
    for package in PACKAGE_CLIS.values():
        package.add_parser(sub)
    return parser


COMMANDS = {"train": _cmd_train, "demo": _cmd_demo, "report": _cmd_report,
            **{name: _package_command(package.run) for name, package in PACKAGE_CLIS.items()}}
TAKES_OVERRIDES = {"train", "demo"}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    stray = [a for a in extra if a.startswith("--") and "." not in a.split("=", 1)[0]]
    if extra and (args.command not in TAKES_OVERRIDES or stray or not extra[0].startswith("--")):
        parser.error(f"unrecognized arguments: {' '.join(stray or extra)}")
    try:
        return COMMANDS[args.command](args, extra)
    except BessemerError as e:
        to_console(f"bessemer {args.command}: error: {e}")
        return 2
    except ImportError as e:  # an optional dependency: the message says what to install
        to_console(f"bessemer {args.command}: error: {e}")
        return 2
    except TrainingInterrupted as e:
        to_console(f"bessemer {args.command}: {e}")
        return e.exit_code
    except KeyboardInterrupt:
        to_console(f"bessemer {args.command}: interrupted")
        return 130


if __name__ == "__main__":
    status = main()
    if "TORCHELASTIC_RUN_ID" in os.environ:
        exit_rank(status)  # no interpreter finalization under torchrun (gloo teardown abort)
    sys.exit(status)
