"""`bessemer ckpt list|verify|export-hf|restore`. Argument parsing only at import; each action imports what it
needs when it runs (torch only for those that read tensors)."""

import argparse
from pathlib import Path

from bessemer.errors import BessemerError


def add_parser(sub: argparse._SubParsersAction) -> None:
    ckpt = sub.add_parser("ckpt", help="list, verify, export and restore checkpoints").add_subparsers(
        dest="ckpt_command", required=True, metavar="ACTION")
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


def run(args: argparse.Namespace) -> int:
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
        from bessemer.checkpoint.cold_tier import restore
        from bessemer.checkpoint.listing import run_checkpoint_config
        from bessemer.checkpoint.paths import tier_dirs

        cfg = run_checkpoint_config(args.run_dir)
        if not cfg.cold.url:
            raise BessemerError(f"{args.run_dir}/config.toml sets no checkpoint.cold.url: nothing to restore from")
        print(restore(cfg.cold, tier_dirs(cfg, Path(args.run_dir))["macro"], args.step))
        return 0
    raise AssertionError(args.ckpt_command)
