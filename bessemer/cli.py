"""The `bessemer` command. Subcommands delegate to the packages; torch is imported only by those that train."""

import argparse
import os
import sys
from pathlib import Path

from bessemer.errors import BessemerError, TrainingInterrupted
from bessemer.proc import exit_rank, to_console


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


def _cmd_ckpt(args: argparse.Namespace, overrides: list[str]) -> int:
    if args.ckpt_command == "list":
        from bessemer.checkpoint.listing import format_rows, list_checkpoints

        rows = list_checkpoints(args.run_dir, verify=not args.quick)
        print(format_rows(rows))
        return 0 if all(r["valid"] for r in rows) else 1
    if args.ckpt_command == "verify":
        from bessemer.checkpoint.verify import verify

        failed = False
        for path in args.paths:
            problems = verify(path)
            failed |= bool(problems)
            for p in problems:
                print(f"FAIL {p}")
            if not problems:
                print(f"ok {path}")
        return 1 if failed else 0
    if args.ckpt_command == "export-hf":
        from bessemer.checkpoint.export import export_checkpoint

        print(export_checkpoint(args.ckpt, args.out, args.tokenizer, args.overwrite))
        return 0
    if args.ckpt_command == "restore":
        from bessemer.checkpoint.backup import restore
        from bessemer.checkpoint.listing import run_checkpoint_config
        from bessemer.checkpoint.paths import tier_dirs

        cfg = run_checkpoint_config(args.run_dir)
        if not cfg.cold.url:
            raise BessemerError(f"{args.run_dir}/config.toml sets no checkpoint.cold.url: nothing to restore from")
        print(restore(cfg.cold, tier_dirs(cfg, Path(args.run_dir))["macro"], args.step))
        return 0
    raise AssertionError(args.ckpt_command)


def _cmd_plan(args: argparse.Namespace, overrides: list[str]) -> int:
    from bessemer.plan.cli import run

    return run(args)


def _cmd_tokenizer(args: argparse.Namespace, overrides: list[str]) -> int:
    from bessemer.tokenizer.cli import run

    return run(args)


def _cmd_data(args: argparse.Namespace, overrides: list[str]) -> int:
    from bessemer.data.cli import run

    return run(args)


def _cmd_eval(args: argparse.Namespace, overrides: list[str]) -> int:
    from bessemer.eval.cli import run

    return run(args)


def _cmd_doctor(args: argparse.Namespace, overrides: list[str]) -> int:
    from bessemer.doctor.cli import run

    return run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bessemer", description="LLM pretraining: data, training, checkpoints.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _train_parser(sub)
    demo = sub.add_parser("demo", help="end to end on the bundled corpus: tokenizer, shards, training, report",
                          usage="bessemer demo [--run-dir DIR] [--section.key=value ...]")
    demo.add_argument("--run-dir", default="runs/demo", help="where everything goes (default runs/demo)")
    report = sub.add_parser("report", help="(re)build the HTML report of a run directory")
    report.add_argument("run_dir")
    ckpt = sub.add_parser("ckpt", help="list, verify, export and restore checkpoints").add_subparsers(dest="ckpt_command", required=True,
                                                                              metavar="ACTION")
    listing = ckpt.add_parser("list", help="a run's checkpoints per tier: step, size, validity (exit 1 if any is "
                                           "invalid)")
    listing.add_argument("run_dir")
    listing.add_argument("--quick", action="store_true", help="check manifests only, not every file's checksum")
    verify = ckpt.add_parser("verify", help="checksums, components, steps and NaN/inf/absurd values of "
                                            "checkpoints; one line per problem, exit 1 if any")
    verify.add_argument("paths", nargs="+", metavar="PATH", help="a checkpoint directory (.../step_NNNNNNNN)")
    export = ckpt.add_parser("export-hf", help="write a checkpoint as a Hugging Face Llama directory "
                                               "(safetensors + config.json + tokenizer)")
    export.add_argument("ckpt", help="a checkpoint directory (.../step_NNNNNNNN), any layout")
    export.add_argument("out", help="output directory")
    export.add_argument("--tokenizer", type=Path, default=None,
                        help="directory with tokenizer.json (default: the run's data directory)")
    export.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    restore = ckpt.add_parser("restore", help="download a cold backup (default: the newest) into the run's macro "
                                              "tier; the key comes from checkpoint.cold.key_env or key_file")
    restore.add_argument("run_dir")
    restore.add_argument("--step", type=int, default=None)
    from bessemer.doctor.cli import add_parser as add_doctor_parser  # argparse only; the checks load when run

    add_doctor_parser(sub)
    from bessemer.plan.cli import add_parser as add_plan_parser  # argparse only; the planner loads when run

    add_plan_parser(sub)
    from bessemer.tokenizer.cli import add_parser as add_tokenizer_parser  # argparse only; tokenizers loads when run

    add_tokenizer_parser(sub)
    from bessemer.data.cli import add_parser as add_data_parser  # argparse + step registry; steps load when run

    add_data_parser(sub)
    from bessemer.eval.cli import add_parser as add_eval_parser  # argparse only; torch loads when run

    add_eval_parser(sub)
    return parser


COMMANDS = {"train": _cmd_train, "demo": _cmd_demo, "report": _cmd_report, "ckpt": _cmd_ckpt,
            "doctor": _cmd_doctor, "plan": _cmd_plan, "tokenizer": _cmd_tokenizer, "data": _cmd_data,
            "eval": _cmd_eval}
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
