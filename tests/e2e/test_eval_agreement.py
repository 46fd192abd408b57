"""`bessemer eval` agrees with lm-eval-harness: a trained debug checkpoint, exported to Hugging Face, scored
by both on the same small task files (tests/e2e/eval_tasks: English 2-shot, Chinese zero-shot) gives the
same choice per item and the same acc / acc_norm."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # four processes start torch; slow on a busy host

TASKS = "tests/e2e/eval_tasks"
BESSEMER = [sys.executable, "-m", "bessemer.cli"]
ENV = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}


def bessemer(*args):
    proc = subprocess.run([*BESSEMER, *args], check=False, capture_output=True, text=True, env=ENV, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    run = tmp_path_factory.mktemp("eval") / "R"
    bessemer("train", "configs/debug.toml", "--train.steps=20", f"--run.dir={run}", "--metrics.tensorboard=false",
             "--metrics.peak_tflops=1")
    return run / "checkpoints" / "macro" / "step_00000020"


def lm_eval_samples(hf_dir, tasks: list[str]) -> dict:
    """lm-eval's per-item log-likelihoods and metrics, by task, in item order."""
    lm_eval = pytest.importorskip("lm_eval")
    from lm_eval.tasks import TaskManager

    out = lm_eval.simple_evaluate(model="hf", model_args=f"pretrained={hf_dir},dtype=float32", tasks=tasks,
                                  device="cpu", batch_size=4, log_samples=True,
                                  task_manager=TaskManager(include_path=f"{TASKS}/lmeval"))
    samples = {}
    for task in tasks:
        rows = sorted(out["samples"][task], key=lambda s: s["doc_id"])
        samples[task] = {"lls": [[r[0] for r in s["filtered_resps"]] for s in rows],
                         "acc": [s["acc"] for s in rows], "acc_norm": [s["acc_norm"] for s in rows],
                         "choices": [s["doc"]["choices"] for s in rows],
                         "aggregate": (out["results"][task]["acc,none"], out["results"][task]["acc_norm,none"])}
    return samples


def test_bessemer_eval_agrees_with_lm_eval(checkpoint, tmp_path):
    hf_dir = tmp_path / "hf"
    bessemer("ckpt", "export-hf", str(checkpoint), str(hf_dir))
    ours_file = tmp_path / "ours.json"
    proc = bessemer("eval", str(checkpoint), "--tasks", f"{TASKS}/tiny_en.toml", f"{TASKS}/tiny_zh.toml",
                    "--batch-size", "3", "--output", str(ours_file))
    assert "tiny_en" in proc.stdout and "acc_norm" in proc.stdout
    ours = {t["name"]: t for t in json.loads(ours_file.read_text())["tasks"]}
    theirs = lm_eval_samples(hf_dir, ["tiny_en", "tiny_zh"])
    for task in ("tiny_en", "tiny_zh"):
        items, ref = ours[task]["items"], theirs[task]
        assert len(items) == len(ref["lls"]) == 11
        # lm-eval's choices: argmax of the log-likelihoods, raw and per character.
        pred = [int(np.argmax(lls)) for lls in ref["lls"]]
        pred_norm = [int(np.argmax(np.array(lls) / [len(c) for c in cs])) for lls, cs in zip(ref["lls"], ref["choices"])]
        assert [i["pred"] for i in items] == pred, task
        assert [i["pred_norm"] for i in items] == pred_norm, task
        assert [float(i["pred"] == i["gold"]) for i in items] == ref["acc"]
        assert [float(i["pred_norm"] == i["gold"]) for i in items] == ref["acc_norm"]
        assert (ours[task]["acc"], ours[task]["acc_norm"]) == ref["aggregate"]
        # Same tokens scored: the log-likelihoods agree to float32 rounding of two implementations.
        diff = max(abs(a - b) for i, lls in zip(items, ref["lls"]) for a, b in zip(i["loglikelihoods"], lls))
        print(f"\n{task}: acc {ours[task]['acc']:.4f} acc_norm {ours[task]['acc_norm']:.4f}, "
              f"max |loglikelihood difference| vs lm-eval {diff:.1e}")
        assert diff < 1e-3
