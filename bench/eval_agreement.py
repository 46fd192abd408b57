"""`bessemer eval` against lm-eval-harness 0.4 on real benchmark slices: per-item agreement of the choices.

Reads the slices and their lm-eval task YAMLs from ../shared/eval-bench (ARC-Easy/Challenge, PIQA, Social IQa,
HellaSwag, XCOPA-zh; `--data` elsewhere), never copies them. For each `<name>.yaml` there, bessemer scores
`<name>.jsonl` through a task file with the defaults (context / choices / gold, zero-shot, target delimiter " "),
and lm-eval scores the same file through the YAML with `--model hf` on the exported directory. Printed per
benchmark: items, the share of items where both pick the same choice (acc and acc_norm rules), both accuracies,
and the largest difference of one continuation's log-likelihood. MODEL is a checkpoint (exported to a temporary
directory first) or a Hugging Face directory; both read it with a window of `--window` tokens (its config's
max_position_embeddings rewritten in a copy: the debug model's 128 is shorter than some PIQA answers, which
neither tool can score). Ends with `ratio eval_agreement X`: the share of identical
per-item choices over all benchmarks and both rules (1.0 = every choice identical).

    python bench/eval_agreement.py RUN/checkpoints/macro/step_00000100 --limit 50
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bessemer.benchmarks.tasks import read_task  # noqa: E402
from bessemer.checkpoint.export import export_checkpoint  # noqa: E402
from bessemer.eval.loading import load_hf_dir  # noqa: E402
from bessemer.eval.results import evaluate  # noqa: E402


def lm_eval_run(hf_dir: Path, data: Path, tasks: list[str], limit: int | None, device: str) -> dict:
    import lm_eval
    from lm_eval.tasks import TaskManager

    here = os.getcwd()
    os.chdir(data)  # the YAMLs' data_files are relative to their folder
    try:
        out = lm_eval.simple_evaluate(model="hf", model_args=f"pretrained={hf_dir},dtype=float32", tasks=tasks,
                                      device=device, batch_size=8, log_samples=True, limit=limit,
                                      task_manager=TaskManager(include_path=str(data)))
    finally:
        os.chdir(here)
    return {t: sorted(out["samples"][t], key=lambda s: s["doc_id"]) for t in tasks}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", type=Path, help="checkpoint directory or Hugging Face directory")
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "eval-bench")
    ap.add_argument("--limit", type=int, default=None, help="first N items of each benchmark (default all 200)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--window", type=int, default=1024, help="tokens the model reads at once (default 1024)")
    args = ap.parse_args()
    data = args.data.resolve()
    names = sorted(p.stem for p in data.glob("*.yaml") if not p.stem.endswith("_lmeval_fmt"))
    with tempfile.TemporaryDirectory() as tmp:
        hf_dir = Path(tmp) / "hf"
        if (args.model / "manifest.json").is_file():
            export_checkpoint(args.model, hf_dir)
        else:
            shutil.copytree(args.model, hf_dir)
        for name, key in (("config.json", "max_position_embeddings"), ("tokenizer_config.json", "model_max_length")):
            config = json.loads((hf_dir / name).read_text())
            (hf_dir / name).write_text(json.dumps({**config, key: args.window}))
        tasks = []
        for name in names:
            toml = Path(tmp) / f"bench_{name}.toml"
            toml.write_text(f'data = "{data / (name + ".jsonl")}"\n' + (f"limit = {args.limit}\n" if args.limit else ""))
            tasks.append(read_task(toml))
        ours = {t["name"]: t for t in evaluate(load_hf_dir(hf_dir, device=args.device), tasks, 8)["tasks"]}
        theirs = lm_eval_run(hf_dir, data, [f"bench_{n}" for n in names], args.limit, args.device)
    same = total = 0
    print(f"{'benchmark':<16}{'items':>6}{'same acc':>10}{'same norm':>10}  {'acc ours/lm-eval':>18}  "
          f"{'acc_norm ours/lm-eval':>22}  max|dll|")
    for name in names:
        items, ref = ours[f"bench_{name}"]["items"], theirs[f"bench_{name}"]
        lls = [[r[0] for r in s["filtered_resps"]] for s in ref]
        chars = [[len(c) for c in s["doc"]["choices"]] for s in ref]
        pred = [int(np.argmax(x)) for x in lls]
        pred_norm = [int(np.argmax(np.array(x) / c)) for x, c in zip(lls, chars)]
        a = sum(i["pred"] == p for i, p in zip(items, pred))
        b = sum(i["pred_norm"] == p for i, p in zip(items, pred_norm))
        same, total = same + a + b, total + 2 * len(items)
        diff = max(abs(x - y) for i, ll in zip(items, lls) for x, y in zip(i["loglikelihoods"], ll))
        acc_ref, norm_ref = np.mean([s["acc"] for s in ref]), np.mean([s["acc_norm"] for s in ref])
        t = ours[f"bench_{name}"]
        print(f"{name:<16}{len(items):>6}{a / len(items):>10.3f}{b / len(items):>10.3f}  "
              f"{t['acc']:>8.4f} / {acc_ref:<7.4f}  {t['acc_norm']:>10.4f} / {norm_ref:<9.4f}  {diff:.1e}")
    print(f"ratio eval_agreement {same / total:.4f}")


if __name__ == "__main__":
    main()
