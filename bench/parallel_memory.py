"""Per-rank memory of parameters + AdamW states for each parallel layout, against the single-process run.

Each layout trains the `tiny` model for one step on real gloo processes (torchrun), then every rank counts
the bytes of its local parameter shards and optimizer states. The ideal for a layout is the single-process
total divided by tp x pp x dp_shard (dp_replicate keeps full copies by design). For each layout the script
prints the largest per-rank total and `measured / ideal` (1.00 = perfect scaling; pipeline stages that also
hold the embedding or the head make it somewhat larger).

Ends with `ratio parallel_memory <worst measured / ideal over the sharded layouts>` (lower is better).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

LAYOUTS = {  # name: (ranks, overrides)
    "single": (1, []),
    "dp_replicate2": (2, ["--parallel.dp_replicate=2", "--parallel.dp_shard=1"]),
    "dp_shard2": (2, ["--parallel.dp_shard=2"]),
    "dp_shard4": (4, ["--parallel.dp_shard=4"]),
    "tp2": (2, ["--parallel.tp=2"]),
    "tp4": (4, ["--parallel.tp=4"]),
    "pp2": (2, ["--parallel.pp=2"]),
    "pp2_tp2_dp_shard2": (8, ["--parallel.pp=2", "--parallel.tp=2", "--parallel.dp_shard=2"]),
}


def worker(out: Path, overrides: list[str]) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    sys.path.insert(0, str(REPO))
    from bessemer.config import load_config
    from bessemer.train.trainer import Trainer

    cfg = load_config(REPO / "configs" / "debug.toml", [
        f"--run.dir={out.parent / 'run'}", f"--data.path={REPO / 'data' / 'debug'}", "--model.name=tiny",
        "--train.steps=1", "--train.global_batch=16", "--train.micro_batch=2", "--checkpoint.at_end=false",
        "--metrics.tensorboard=false", "--metrics.peak_tflops=1", *overrides])
    trainer = Trainer(cfg, log=False)
    trainer.train_step()  # creates the AdamW states

    def nbytes(t: torch.Tensor) -> int:
        t = t.to_local() if isinstance(t, DTensor) else t
        return t.numel() * t.element_size()

    params = sum(nbytes(p) for part in trainer.model_parts for p in part.parameters())
    optim = sum(nbytes(v) for opt in trainer.optimizers.optimizers for s in opt.state.values()
                for v in s.values() if isinstance(v, torch.Tensor) and v.dim() > 0)
    mine = {"rank": trainer.launch.rank, "params": params, "optimizer": optim}
    everyone = [mine]
    if dist.is_initialized():
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)
    if trainer.launch.rank == 0:
        out.write_text(json.dumps(everyone))
    trainer.close()


def run_layout(name: str, tmp: Path) -> list[dict]:
    nproc, overrides = LAYOUTS[name]
    out = tmp / name / "bytes.json"
    out.parent.mkdir(parents=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           __file__, "--worker", str(out), *overrides]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"layout {name} failed:\n{proc.stderr[-4000:]}")
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.worker:
        return worker(args.worker, rest)
    with tempfile.TemporaryDirectory() as tmp:
        results = {name: run_layout(name, Path(tmp)) for name in LAYOUTS}
    single = results["single"][0]
    total = single["params"] + single["optimizer"]
    print(f"model tiny (vocab 1024): single process {single['params'] / 2**20:.2f} MiB parameters + "
          f"{single['optimizer'] / 2**20:.2f} MiB AdamW states")
    print(f"{'layout':<20} {'ranks':>5} {'max per-rank MiB':>17} {'ideal MiB':>10} {'measured/ideal':>15}")
    worst = 0.0
    for name, ranks in results.items():
        _, overrides = LAYOUTS[name]
        shard = 1
        for key in ("tp", "pp", "dp_shard"):
            for o in overrides:
                if o.startswith(f"--parallel.{key}="):
                    shard *= int(o.split("=")[1])
        biggest = max(r["params"] + r["optimizer"] for r in ranks)
        ideal = total / shard
        ratio = biggest / ideal
        if shard > 1:
            worst = max(worst, ratio)
        print(f"{name:<20} {len(ranks):>5} {biggest / 2**20:>17.2f} {ideal / 2**20:>10.2f} {ratio:>15.2f}")
    print("ratio = the worst sharded layout's largest per-rank bytes / (single-process bytes / (tp x pp x "
          "dp_shard)); 1.00 is ideal, lower is better")
    print(f"ratio parallel_memory {worst:.3f}")


if __name__ == "__main__":
    main()
