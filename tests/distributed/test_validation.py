"""Validation during training ([eval]) in three layouts: the held-out loss per domain logged at step N equals
`bessemer eval`'s perplexity of the step-N checkpoint on the same held-out shards (relative 1e-5), the benchmark
task scored in the layout gets `bessemer eval`'s accuracy, and the per-domain training loss is there under
pipeline parallelism too, equal to the one-process run's."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.distributed.runs import run_train

pytestmark = pytest.mark.distributed

STEPS, MAX_TOKENS = 20, 3000
TASK = "tests/e2e/eval_tasks/tiny_en.toml"
MIXTURE = "--data.domains=prose_en:0.5,code:0.25,prose_zh:0.25"
COMMON = ["configs/debug.toml", f"--train.steps={STEPS}", "--train.deterministic=true", MIXTURE,
          "--metrics.tensorboard=false", "--metrics.peak_tflops=1", "--checkpoint.macro.interval=10",
          "--eval.interval=10", f"--eval.max_tokens={MAX_TOKENS}", f"--eval.tasks={TASK}"]
LAYOUTS = {"single": (1, ["--train.micro_batch=2"]),
           "dp_shard2_tp2": (4, ["--parallel.dp_shard=2", "--parallel.tp=2", "--train.micro_batch=2"]),
           "pp2_dp_shard2": (4, ["--parallel.pp=2", "--parallel.dp_shard=2", "--train.micro_batch=4"])}
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def bessemer(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "bessemer.cli", *args], capture_output=True, text=True, env=ENV,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc.stdout


@pytest.fixture(scope="module")
def heldout(tmp_path_factory) -> Path:
    """Held-out shards written by `tokenizer encode --heldout` with the debug data's tokenizer, from text no
    test wrote: Python's own modules (code) and the bundled Chinese prose."""
    import argparse
    import difflib
    import email
    import textwrap

    root = tmp_path_factory.mktemp("heldout")
    with open(root / "docs.jsonl", "w", encoding="utf-8") as f:
        for module in (argparse, difflib, email, textwrap, json):
            for chunk in Path(module.__file__).read_text(encoding="utf-8").split("\n\n\n"):
                if len(chunk) > 200:
                    f.write(json.dumps({"text": chunk, "metadata": {"domain": "code"}}) + "\n")
        for line in Path("bessemer/demo/zh.txt").read_text(encoding="utf-8").splitlines():
            if len(line) > 10:
                f.write(json.dumps({"text": line, "metadata": {"domain": "prose_zh"}}, ensure_ascii=False) + "\n")
    bessemer("tokenizer", "encode", "--tokenizer", "data/debug", "--input", str(root / "docs.jsonl"),
             "--output", str(root / "shards"), "--heldout", "0.3", "--workers", "1", "--no-progress")
    return root / "shards" / "heldout"


def _task_files(tmp: Path, shards: Path, domains: list[str]) -> list[str]:
    files = []
    for name in domains:
        f = tmp / f"val_{name}.toml"
        f.write_text(f'kind = "perplexity"\nshards = "{shards}"\ndomain = "{name}"\nmax_tokens = {MAX_TOKENS}\n')
        files.append(str(f))
    return files


@pytest.fixture(scope="module")
def single(heldout, tmp_path_factory):
    run = tmp_path_factory.mktemp("single") / "R"
    records, events = run_train(run, 1, [*COMMON, *LAYOUTS["single"][1], f"--eval.paths={heldout}"])
    return run, records, events


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_heldout_loss_equals_bessemer_eval(layout, heldout, single, tmp_path):
    nproc, extra = LAYOUTS[layout]
    if layout == "single":
        run, records, events = single
    else:
        run = tmp_path / "R"
        records, events = run_train(run, nproc, [*COMMON, *extra, f"--eval.paths={heldout}"])
    validations = {e["step"]: e for e in events if e["event"] == "validation"}
    assert sorted(validations) == [10, 20]
    logged = validations[STEPS]
    assert sorted(logged["val_loss"]) == ["code", "prose_zh"]
    assert logged["val_tokens"]["code"] == MAX_TOKENS  # the held-out prose_zh stream is shorter: all of it

    # Per-domain training loss in every layout (pipeline included), equal to the one-process run's.
    ref = {r["step"]: r["domain_loss"] for r in single[1]}
    for r in records:
        assert sorted(r["domain_loss"]) == ["code", "prose_en", "prose_zh"], (layout, r["step"])
        worst = max(abs(r["domain_loss"][d] - ref[r["step"]][d]) / ref[r["step"]][d] for d in ref[r["step"]])
        assert worst < 1e-4, (layout, r["step"], r["domain_loss"], ref[r["step"]])

    ckpt_root = run / "checkpoints" / "macro"
    out = tmp_path / "scores.json"
    bessemer("eval", str(ckpt_root / f"step_{STEPS:08d}"), "--tasks", *_task_files(tmp_path, heldout,
                                                                                   list(logged["val_loss"])),
             TASK, "--output", str(out))
    scored = {t["name"]: t for t in json.loads(out.read_text())["tasks"]}
    for name, loss in logged["val_loss"].items():
        theirs = math.log(scored[f"val_{name}"]["perplexity"])
        print(f"\n{layout} step {STEPS} {name}: logged {loss:.8f}, bessemer eval {theirs:.8f}")
        assert abs(loss - theirs) <= 1e-5 * abs(theirs), (layout, name, loss, theirs)
        assert logged["val_tokens"][name] == scored[f"val_{name}"]["tokens"]
    task = scored["tiny_en"]
    assert logged["tasks"]["tiny_en"] == {"acc": task["acc"], "acc_norm": task["acc_norm"], "n": task["n"]}
