"""Trainer overhead: bessemer's training loop vs a plain PyTorch loop on the same model and the same batches.

Both sides run the same debug-size model from the same initial weights over the same micro-batches with
gradient accumulation, AdamW (fused, as the trainer builds it), clipping and the same LR schedule. Ours also
reads the batches from the memory-mapped shards, skips non-finite steps, keeps each step's numbers on the
device and pulls them every metrics.log_interval = 10 steps (debug.toml's), writing a metrics.jsonl and
TensorBoard record for every step from its writer thread; the anchor has the batches in memory and logs
nothing. Ours is timed over its whole `train()` (a fresh Trainer per round, built before the clock starts, as
the anchor's model and optimizer are): the start and end of the loop (collector pause, monitor start, the
writer's final drain) count too.

Each round times both back to back, ours first in even rounds and the anchor first in odd ones, so that neither
side always runs on the heels of the other. The machine's load drifts over minutes (other processes share its
2 cores) and moves either side's block by +-10%, but the two blocks of a round, seconds apart, see much the
same load: the ratio is the median over the rounds of ours / anchor within each round. The median of each
side's times and their ratio are printed too, and the ratio of the CPU time the process spent (all its threads:
ours includes its writer and telemetry threads). Last, `--pairs` single steps of each, alternating, each pair
seconds apart at most: the finest pairing, for the per-step cost alone.

Prints `ratio trainer_overhead <ours / anchor>` (lower is better; 1.00 = no overhead).
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


def time_ours(run_dir: Path, steps: int) -> tuple[float, float]:
    trainer = Trainer(make_config(run_dir, steps))
    trainer.console.enabled = False  # no console lines in the bench output; files are still written
    t0, c0 = time.perf_counter(), time.process_time()
    trainer.train()
    return (time.perf_counter() - t0) / steps, (time.process_time() - c0) / steps


class Anchor:
    """The plain PyTorch loop: the model, AdamW (fused, as the trainer builds it) and LR schedule, built from the
    trainer's config and seed, over batches held in memory."""

    def __init__(self, run_dir: Path, steps: int, batches: list, model_args):
        cfg = make_config(run_dir, steps)
        torch.manual_seed(cfg.run.seed)
        self.model = build_model(model_args, cfg.train.seq_len)
        t = self.train_cfg = cfg.train
        self.opt = build_adamw(self.model, t)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, LRMultiplier(t.warmup, t.steps, t.schedule,
                                                                              t.min_lr_ratio))
        self.accum = t.global_batch // t.micro_batch
        self.batches = batches

    def step(self, step: int) -> torch.Tensor:
        self.opt.zero_grad(set_to_none=True)
        first = (step * self.accum) % len(self.batches)
        for inputs, targets in self.batches[first:first + self.accum]:
            loss = F.cross_entropy(self.model(inputs).flatten(0, 1), targets.flatten(0, 1))
            (loss / self.accum).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.train_cfg.grad_clip)
        self.opt.step()
        self.sched.step()
        return loss


def time_anchor(run_dir: Path, steps: int, batches: list, model_args) -> tuple[float, float]:
    anchor = Anchor(run_dir, steps, batches, model_args)
    t0, c0 = time.perf_counter(), time.process_time()
    for step in range(steps):
        loss = anchor.step(step)
    loss.item()
    return (time.perf_counter() - t0) / steps, (time.process_time() - c0) / steps


def step_by_step(tmp: Path, steps: int, batches: list, model_args) -> list[float]:
    """The same comparison one step at a time, so that both sides of a pair see the same moment of the machine:
    a step of ours (`Trainer.train_step`: the step and its record settled and written at once — more host work
    than the loop, which settles every log_interval steps) and a step of the anchor, alternating which goes
    first; after two warm-up pairs, returns ours / anchor of each pair."""
    trainer = Trainer(make_config(tmp / "ours_steps", steps + 2))
    trainer.console.enabled = False
    anchor = Anchor(tmp / "anchor_steps", steps + 2, batches, model_args)
    ratios = []
    for i in range(steps + 2):
        t = [0.0, 0.0]
        for side in ((0, 1) if i % 2 else (1, 0)):
            t0 = time.perf_counter()
            if side == 0:
                trainer.train_step()
            else:
                anchor.step(i).item()
            t[side] = time.perf_counter() - t0
        if i >= 2:
            ratios.append(t[0] / t[1])
    trainer.reporter.close()
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # Short blocks and many rounds: the two blocks of a round run close together and share the machine's load
    # (about 6 s each on one thread here); the loop's start and end (a few ms) still count in every block.
    parser.add_argument("--steps", type=int, default=10, help="steps per timed block")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--pairs", type=int, default=40, help="step-by-step pairs after the rounds (0 = none)")
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
        pairs = step_by_step(tmp, args.pairs, batches, probe.model_args) if args.pairs else []
    o, a = statistics.median(w for w, _ in ours), statistics.median(w for w, _ in anchor)
    per_round = sorted(x[0] / y[0] for x, y in zip(ours, anchor))
    cpu_ratio = statistics.median(x[1] / y[1] for x, y in zip(ours, anchor))
    print(f"model debug, 16 x 256 tokens per step (2 micro-batches), {args.rounds} rounds of {args.steps} steps, "
          f"{torch.get_num_threads()} threads")
    print(f"bessemer trainer: {1000 * o:.1f} ms/step   plain PyTorch loop: {1000 * a:.1f} ms/step   "
          f"(medians; their ratio {o / a:.3f})")
    print(f"per-round ratios {per_round[0]:.3f} .. {per_round[-1]:.3f}, quartiles "
          f"{per_round[len(per_round) // 4]:.3f} .. {per_round[(3 * len(per_round)) // 4]:.3f}")
    fastest = min(w for w, _ in ours) / min(w for w, _ in anchor)
    print(f"fastest block of each side: ratio {fastest:.3f}; CPU time of the process (all its threads), median "
          f"over rounds of ours / anchor: {cpu_ratio:.3f}")
    if pairs:
        print(f"step by step ({len(pairs)} pairs of one step each, Trainer.train_step vs the plain step): median "
              f"ratio {statistics.median(pairs):.3f}, mean {statistics.fmean(pairs):.3f}")
    print("ratio = median over rounds of bessemer time / plain loop time in the same round (lower is better)")
    print(f"ratio trainer_overhead {statistics.median(per_round):.3f}")


if __name__ == "__main__":
    main()
