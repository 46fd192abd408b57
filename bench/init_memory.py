"""Per-rank memory of building llama3-1b (1.24B parameters) on 8 CPU ranks and running one forward and backward
pass, against the ideal: the rank's parameter and gradient shards plus the largest unit FSDP gathers at once.

No rank ever builds the full model: parts are built on the meta device, parallelised, and each rank draws
only its own shards (model/llama.py, parallel/build.py). Each layout starts 8 gloo ranks (torchrun,
OMP_NUM_THREADS=1) through the real Trainer (bessemer's build path, `Trainer.__init__`), then runs one forward
and backward pass of one step (no optimizer step, so no AdamW states). Each rank measures its peak resident
memory (ru_maxrss) above the RSS it had right after `import torch` (a bare torch process, measured in the
same run). The same is then done starting from a llama3-1b-shaped Hugging Face directory
(`checkpoint.initial_load_hf`), written streamed, tensor by tensor, into a temporary directory deleted after.

Precision: bf16 compute and bf16 gradient reduction (precision.dtype / reduce_dtype), so FSDP gathers bf16
parameters and reduce-scatters bf16 gradients; parameters and gradient shards stay fp32. Sequence length 64,
so activations are small next to the weights: 8 ranks of llama3-1b must fit in a 24 GB machine.

Ends with `ratio init_memory <worst measured / ideal>` and `ratio init_memory_hf <...>` (goal <= 1.5).
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = "llama3-1b"
SEQ_LEN = 64
COMMON = [f"--model.name={MODEL}", "--model.vocab_size=128256", f"--train.seq_len={SEQ_LEN}", "--train.global_batch=8",
          "--train.steps=1", "--precision.dtype=bf16", "--precision.reduce_dtype=bf16", "--checkpoint.at_end=false",
          "--metrics.tensorboard=false", "--metrics.peak_tflops=1", "--metrics.telemetry_period_s=0"]
# glibc malloc keeps freed blocks below its (self-raising) mmap threshold in the heap, so a process's RSS stays at
# its high-water mark of every size class it ever used; with a fixed 1 MiB threshold every larger block is
# mmapped and returned when freed, so RSS follows the memory actually held. The usual CPU setting for
# PyTorch processes (the alternatives being jemalloc or tcmalloc), printed with the results.
ALLOCATOR = {"MALLOC_MMAP_THRESHOLD_": str(1 << 20)}
LAYOUTS = {  # name: overrides (8 ranks each)
    "dp_shard8": ["--parallel.dp_shard=8", "--train.micro_batch=1"],
    "pp2_dp_shard4": ["--parallel.pp=2", "--parallel.dp_shard=4", "--parallel.pp_schedule=1f1b",
                      "--parallel.microbatches=2", "--train.micro_batch=2"],
}


def rss_max_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def worker(out: Path, overrides: list[str]) -> None:
    import torch  # noqa: F401  (the baseline: a bare torch process)

    baseline = rss_max_bytes()  # a bare torch process
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    sys.path.insert(0, str(REPO))
    from bessemer.config import load_config
    from bessemer.train.trainer import Trainer

    cfg = load_config(REPO / "configs" / "debug.toml", [
        f"--run.dir={out.parent / 'run'}", f"--data.path={REPO / 'data' / 'debug'}", *COMMON, *overrides])
    trainer = Trainer(cfg, log=False)
    after_build = rss_max_bytes()
    inputs, targets = trainer.loader.next_batch()
    trainer.step.forward_backward(inputs, targets)  # one micro-batch's forward and backward, no optimizer step
    peak = rss_max_bytes()

    def nbytes(t) -> int:
        t = t.to_local() if isinstance(t, DTensor) else t
        return t.numel() * t.element_size()

    params = [p for part in trainer.model_parts for p in part.parameters()]
    args = trainer.model_args
    mine = {"rank": trainer.launch.rank, "baseline": baseline, "after_build": after_build - baseline,
            "peak": peak - baseline, "params": sum(nbytes(p) for p in params),
            "grads": sum(nbytes(p.grad) for p in params if p.grad is not None),
            "unit": args.vocab_size * args.dim * 2}  # the embedding (or head), gathered in bf16
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    if trainer.launch.rank == 0:
        out.write_text(json.dumps(everyone))
    trainer.close()


def available_bytes() -> int:
    """MemAvailable from /proc/meminfo (0 where there is none)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


# 8 ranks x (a bare torch process + 1.4 x the dp_shard 8 ideal of about 1.65 GiB, as measured): what a run needs.
NEEDED_BYTES = int(8 * (0.25 + 1.4 * 1.65) * 2**30)


# The previous layout's ranks have exited when torchrun returns, but the kernel gives their memory back over the
# following seconds (and other processes come and go): the guard polls this long before refusing.
MEMORY_WAIT_S = 60.0


def wait_for_memory(needed: int, timeout_s: float = MEMORY_WAIT_S, poll_s: float = 1.0) -> int:
    """MemAvailable once it reaches `needed` bytes, or what it is after `timeout_s` seconds (0: not known)."""
    deadline = time.monotonic() + timeout_s
    while (free := available_bytes()) and free < needed and time.monotonic() < deadline:
        time.sleep(poll_s)
    return free


def run_layout(name: str, tmp: Path, extra: list[str]) -> list[dict]:
    free = wait_for_memory(NEEDED_BYTES)
    if free and free < NEEDED_BYTES:  # the kernel's OOM killer would pick any process on the machine
        sys.exit(f"layout {name}: {free / 2**30:.1f} GiB available after waiting {MEMORY_WAIT_S:.0f} s, the 8 "
                 f"ranks may need {NEEDED_BYTES / 2**30:.1f} GiB; not started")
    out = tmp / name / "memory.json"
    out.parent.mkdir(parents=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=8", __file__,
           "--worker", str(out), *LAYOUTS[name], *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", **ALLOCATOR}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode:
        sys.exit(f"layout {name} failed:\n{proc.stderr[-4000:]}")
    return json.loads(out.read_text())


def write_hf_model(hf_dir: Path) -> None:
    """A llama3-1b-shaped Hugging Face directory of random bf16 weights, written one tensor at a time."""
    import torch

    sys.path.insert(0, str(REPO))
    from bessemer.checkpoint.hf import expected_shapes, write_hf_dir
    from bessemer.model.registry import get_model_args

    args = get_model_args(MODEL)
    shapes = expected_shapes(args)
    gen = torch.Generator().manual_seed(0)
    write_hf_dir(args, hf_dir, 8192, lambda name: torch.randn(shapes[name], generator=gen) * 0.02,
                 dtype=torch.bfloat16)


def report(label: str, results: dict[str, list[dict]]) -> float:
    gib = 2**30
    print(f"{label}: peak RSS per rank above a bare torch process (baseline measured in the same run), GiB")
    print(f"{'layout':<16} {'baseline':>9} {'built':>7} {'peak':>7} {'params':>7} {'grads':>7} {'unit':>7} "
          f"{'ideal':>7} {'peak/ideal':>11}")
    worst = 0.0
    for name, ranks in results.items():
        row = max(ranks, key=lambda r: r["peak"] / (r["params"] + r["grads"] + r["unit"]))
        ideal = row["params"] + row["grads"] + row["unit"]
        ratio = row["peak"] / ideal
        worst = max(worst, ratio)
        print(f"{name:<16} {row['baseline'] / gib:>9.2f} {row['after_build'] / gib:>7.2f} {row['peak'] / gib:>7.2f} "
              f"{row['params'] / gib:>7.2f} {row['grads'] / gib:>7.2f} {row['unit'] / gib:>7.2f} {ideal / gib:>7.2f} "
              f"{ratio:>11.2f}  (worst of 8 ranks: rank {row['rank']})")
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help="comma-separated subset of " + ",".join(LAYOUTS))
    args, rest = parser.parse_known_args()
    if args.worker:
        worker(args.worker, rest)
        from bessemer.proc import exit_rank

        # As every bessemer rank under torchrun leaves (bessemer/cli.py): without interpreter finalization, in
        # which gloo's threads, torn down while they still hold tensors, abort the process now and then
        # (SIGABRT, "terminate called without an active exception") after the work is done.
        exit_rank(0)
    names = args.layouts.split(",")
    print(f"model {MODEL} (1.24B parameters, tied embeddings) on 8 CPU ranks (gloo, OMP_NUM_THREADS=1); one "
          f"forward + backward at seq_len {SEQ_LEN}, no optimizer step; bf16 compute and gradient reduction, "
          f"fp32 parameter and gradient shards")
    print("ideal per rank = local parameter shard bytes + local gradient shard bytes + the largest unit FSDP "
          "gathers at once (the embedding, vocab x dim in bf16)")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        worst = report("random init", {name: run_layout(name, tmp / "init", []) for name in names})
        hf_dir = tmp / "hf"
        write_hf_model(hf_dir)
        os.sync()  # written back: clean page cache counts as available memory for the next layouts' check
        size = sum(f.stat().st_size for f in hf_dir.iterdir())
        print(f"wrote a {MODEL}-shaped Hugging Face directory, {size / 2**30:.2f} GiB (bf16 safetensors, streamed)")
        worst_hf = report("initial_load_hf", {name: run_layout(name, tmp / "hf_runs", [
            f"--checkpoint.initial_load_hf={hf_dir}"]) for name in names})
    print("ratio = the worst layout's and rank's peak / ideal; goal <= 1.5, lower is better")
    print(f"ratio init_memory {worst:.3f}")
    print(f"ratio init_memory_hf {worst_hf:.3f}")


if __name__ == "__main__":
    main()
