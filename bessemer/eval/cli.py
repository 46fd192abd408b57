"""`bessemer eval MODEL --tasks TASK.toml ...`: multiple-choice accuracy and perplexity of a checkpoint or a
Hugging Face directory on local task files (docs/eval.md). Building the parser imports nothing heavy."""

import argparse
import json
import sys
from pathlib import Path


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="score a checkpoint or a Hugging Face directory on local benchmark task files",
                       description="Multiple choice by log-likelihood (acc, acc_norm as lm-eval-harness defines "
                                   "them) and perplexity, from task files (TOML) over local JSONL. See docs/eval.md.")
    p.add_argument("model", help="a checkpoint directory (.../checkpoints/macro/step_NNNNNNNN, any layout) or a "
                                 "Hugging Face Llama directory")
    p.add_argument("--tasks", nargs="+", required=True, metavar="TASK",
                   help="task files (.toml) or directories of them")
    p.add_argument("--tokenizer", type=Path, default=None,
                   help="directory with tokenizer.json (default: the model directory's, or the run's data "
                        "directory for a checkpoint)")
    p.add_argument("--batch-size", type=_positive, default=8, metavar="N", help="sequences per forward (default 8)")
    p.add_argument("--num-fewshot", type=int, default=None, metavar="K",
                   help="override every multiple-choice task's num_fewshot")
    p.add_argument("--limit", type=_positive, default=None, metavar="N", help="score only each task's first N items")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda when there is one)")
    p.add_argument("--output", type=Path, default=None, metavar="FILE",
                   help="write the results (per-item choices included) as JSON to FILE")
    p.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    from bessemer.benchmarks.tasks import expand
    from bessemer.errors import BessemerError

    tasks = expand(args.tasks)  # task files are checked before any model is loaded
    for task in tasks:
        if args.num_fewshot is not None:
            if args.num_fewshot < 0:
                raise BessemerError(f"--num-fewshot must be >= 0, got {args.num_fewshot}")
            task.num_fewshot = args.num_fewshot
        if args.limit is not None:
            task.limit = args.limit
    from bessemer.eval.loading import load_model
    from bessemer.eval.results import evaluate, format_table

    loaded = load_model(args.model, args.tokenizer, args.device)
    results = evaluate(loaded, tasks, args.batch_size)
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(results, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    if args.json:
        json.dump(results, sys.stdout, ensure_ascii=False)
        print()
    else:
        print(format_table(results))
    return 0
