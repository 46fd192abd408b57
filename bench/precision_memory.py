"""Peak training memory for each activation-checkpointing mode and for optimizer-state offload, as ratios to
the run without either (the anchor, measured in the same invocation).

Each configuration trains the `tiny` model in a fresh process: one warm-up step (AdamW allocates its
states), then the peak is reset and two more steps run.
- On a GPU the peak is `torch.cuda.max_memory_allocated`.
- On CPU it is the process's resident high-water mark (VmHWM, reset through /proc/self/clear_refs) minus
  what the process held before the trainer was built: model, gradients, optimizer states and activations.
On a CPU-only machine the "device" and the host are the same memory, so offload cannot lower the measured
peak there; for offload the script also prints the bytes of training state that stay with the device
optimizer (parameters, gradients, device AdamW states) against those the host optimizer holds, which is
what leaves the GPU on a GPU machine.

Ends with `ratio precision_memory_ac_full <full-checkpointing peak / no-checkpointing peak>` (lower is better).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CONFIGS = {  # name: overrides
    "baseline": [],
    "ac_full": ["--precision.activation_checkpoint.mode=full"],
    "ac_selective_every2": ["--precision.activation_checkpoint.mode=selective",
                            "--precision.activation_checkpoint.every=2"],
    "ac_selective_ops": ["--precision.activation_checkpoint.mode=selective",
                         "--precision.activation_checkpoint.save_ops=mm,sdpa"],
    "offload_partial": ["--precision.offload.mode=partial", "--precision.offload.fraction=0.5"],
    "offload_full": ["--precision.offload.mode=full"],
}


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024  # kB
    raise RuntimeError(f"{field} not in /proc/self/status")


def worker(name: str, out: Path, args: argparse.Namespace) -> None:
    import torch
    from torch.distributed.tensor import DTensor

    sys.path.insert(0, str(REPO))
    from bessemer.config import load_config
    from bessemer.train.trainer import Trainer

    cfg = load_config(REPO / "configs" / "debug.toml", [
        f"--run.dir={out.parent / name}", f"--data.path={REPO / 'data' / 'debug'}", f"--model.name={args.model}",
        "--train.steps=3", f"--train.global_batch={args.batch}", f"--train.micro_batch={args.batch}",
        f"--train.seq_len={args.seq_len}", f"--precision.dtype={args.dtype}", "--checkpoint.at_end=false",
        "--metrics.tensorboard=false", "--metrics.peak_tflops=1", *CONFIGS[name]])
    cuda = torch.cuda.is_available()
    start = 0 if cuda else _status("VmRSS")
    trainer = Trainer(cfg, log=False)
    trainer.train_step()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    else:
        Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM to the current resident set
    for _ in range(2):
        trainer.train_step()
    peak = torch.cuda.max_memory_allocated() if cuda else _status("VmHWM") - start

    def nbytes(ts) -> int:
        ts = [t.to_local() if isinstance(t, DTensor) else t for t in ts]
        return sum(t.numel() * t.element_size() for t in ts if isinstance(t, torch.Tensor) and t.dim() > 0)

    opts = trainer.optimizers
    device_state = nbytes(opts.params) * 2 + nbytes(  # parameters + their gradients, AdamW states on the device
        v for o in opts.device_optimizers if o is not None for s in o.state.values() for v in s.values())
    host_state = nbytes(h for o in opts.host_optimizers if o is not None for h in o.host) * 2 + nbytes(
        v for o in opts.host_optimizers if o is not None for s in o.state.values() for v in s.values())
    out.write_text(json.dumps({"peak": peak, "device_state": device_state, "host_state": host_state,
                               "device": "cuda" if cuda else "cpu"}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.out, args)
        return

    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in CONFIGS:
            out = Path(tmp) / f"{name}.json"
            cmd = [sys.executable, __file__, "--worker", name, "--out", str(out), "--model", args.model,
                   "--batch", str(args.batch), "--seq-len", str(args.seq_len), "--dtype", args.dtype]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
            if proc.returncode != 0:
                sys.exit(f"{name} failed:\n{proc.stderr[-3000:]}")
            results[name] = json.loads(out.read_text())

    base = results["baseline"]
    where = "CUDA max allocated" if base["device"] == "cuda" else "CPU resident high-water mark above start"
    print(f"model {args.model}, {args.batch} x {args.seq_len} tokens per step, {args.dtype}; peak = {where}")
    print(f"{'config':<22} {'peak MiB':>10} {'ratio':>7} {'device state MiB':>17} {'ratio':>7} {'host state MiB':>15}")
    for name, r in results.items():
        print(f"{name:<22} {r['peak'] / 2**20:>10.1f} {r['peak'] / base['peak']:>7.3f} "
              f"{r['device_state'] / 2**20:>17.1f} {r['device_state'] / base['device_state']:>7.3f} "
              f"{r['host_state'] / 2**20:>15.1f}")
    print("ratio = config / baseline (no checkpointing, no offload); lower is better")
    for name in CONFIGS:
        if name != "baseline":
            key = "peak" if name.startswith("ac_") else "device_state"
            print(f"ratio precision_memory_{name} {results[name][key] / base[key]:.3f}")


if __name__ == "__main__":
    main()
