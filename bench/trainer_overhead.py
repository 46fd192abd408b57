"""Trainer overhead: bessemer's training loop vs a plain PyTorch loop on the same model and the same batches.

Both sides run the same debug-size model from the same initial weights over the same micro-batches with
gradient accumulation, AdamW (fused, as the trainer builds it), clipping and the same LR schedule. Ours also
reads the batches from the memory-mapped shards, skips non-finite steps, keeps each step's numbers on the
device and pulls them every metrics.log_interval = 10 steps (debug.toml's), writing a metrics.jsonl and
TensorBoard record for every step from its writer thread; the anchor has the batches in memory and logs
nothing. Each round times both, ours first in even rounds and the anchor first in odd ones, so that neither
side always runs on the heels of the other and both share any drift of the machine.

Prints the median time per step of each and `ratio trainer_overhead <ours / anchor>` (lower is better;
1.00 = no overhead).
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bessemer.config import load_config  # noqa: E402
from bessemer.model.llama import build_model  # noqa: E402
from bessemer.train.optim import LRMultiplier, build_adamw  # noqa: E402
from bessemer.train.trainer import Trainer  # noqa: E402


def make_config(run_dir: Path, steps: int):
    return load_config(REPO / "configs" / "debug.toml", [
        f"--run.dir={run_dir}", f"--data.path={REPO / 'data' / 'debug'}", f"--train.steps={steps}",
        "--train.seq_len=256", "--train.global_batch=16", "--train.micro_batch=8", "--checkpoint.at_end=false",
        "--metrics.peak_tflops=1", "--metrics.progress=false", "--metrics.log_interval=10"])


def time_ours(run_dir: Path, steps: int) -> float:
    trainer = Trainer(make_config(run_dir, steps))
    trainer.console.enabled = False  # no console lines in the bench output; files are still written
    t0 = time.perf_counter()
    trainer.train()
    return (time.perf_counter() - t0) / steps


def time_anchor(run_dir: Path, steps: int, batches: list, model_args) -> float:
    cfg = make_config(run_dir, steps)
    torch.manual_seed(cfg.run.seed)
    model = build_model(model_args, cfg.train.seq_len)
    t = cfg.train
    opt = build_adamw(model, t)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, LRMultiplier(t.warmup, t.steps, t.schedule, t.min_lr_ratio))
    accum = cfg.train.global_batch // cfg.train.micro_batch
    t0 = time.perf_counter()
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        for inputs, targets in batches[step * accum:(step + 1) * accum]:
            loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten(0, 1))
            (loss / accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.train.grad_clip)
        opt.step()
        sched.step()
    loss.item()
    return (time.perf_counter() - t0) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="steps per timed block")
    # Round means of either side spread by +-10% on the 2-core machine even when it is otherwise idle; nine
    # rounds keep the medians' ratio within a few percent from one run of the bench to the next.
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        probe = Trainer(make_config(tmp / "probe", args.steps))
        batches = [probe.loader.next_batch() for _ in range(args.steps * probe.loader.accum_steps)]
        ours, anchor = [], []
        for r in range(args.rounds):
            if r % 2:
                anchor.append(time_anchor(tmp / f"anchor{r}", args.steps, batches, probe.model_args))
            ours.append(time_ours(tmp / f"ours{r}", args.steps))
            if not r % 2:
                anchor.append(time_anchor(tmp / f"anchor{r}", args.steps, batches, probe.model_args))
    o, a = statistics.median(ours), statistics.median(anchor)
    print(f"model debug, 16 x 256 tokens per step (2 micro-batches), {args.rounds} rounds of {args.steps} steps, "
          f"{torch.get_num_threads()} threads")
    print(f"bessemer trainer: {1000 * o:.1f} ms/step   plain PyTorch loop: {1000 * a:.1f} ms/step")
    per_round = sorted(x / y for x, y in zip(ours, anchor))
    print(f"per-round ratios {per_round[0]:.3f} .. {per_round[-1]:.3f} (the spread is the machine's noise)")
    print("ratio = bessemer time / plain loop time (lower is better)")
    print(f"ratio trainer_overhead {o / a:.3f}")


if __name__ == "__main__":
    main()
