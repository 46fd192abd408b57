"""Checkpoint I/O against the disk's own speed, measured in the same run on the same directory.

- save: bessemer's synchronous save until committed (DCP shards + rank file, each checksummed while written and
  fsynced, the entries exchanged, manifest, rename, directory fsyncs) in MB/s, against `dd` writing the same
  number of bytes with fsync (conv=fsync) -> ratio ours / dd (higher is better, 1.0 = disk speed; goal >= 0.8);
- async: the training stall of an async save — what the training step waits for: the `save` call (state dicts,
  the copy to host memory started) plus whatever is left of that copy when the next step's optimizer step
  arrives after its forward and backward — against the whole synchronous save -> ratio stall / sync (lower is
  better; goal <= 0.05). The copy's own duration is printed beside it;
- load + verify: checksumming every file against the manifest and loading model and optimizer, in MB/s,
  against plainly reading the same files -> ratio ours / read (higher is better).

The default model, `llama3-1b-block`, is one block of llama3-1b (dim 2048, feed-forward 8192, 32 query and 8
key/value heads) with an 8K vocabulary: 94M parameters, a 1.1 GB checkpoint with AdamW's moments, made of the
tensors a llama3-1b checkpoint is made of (4-64 MB each, norms aside). Real checkpoints weigh hundreds of MB to
TBs per rank in tensors of that size, so the disk's speed decides their save time. The registry's small models
are far from that: `tiny` is 128 MB in 1,100 write items of 110 KB on average (the optimizer's per-parameter
settings are items of their own), so it measures DCP's fixed cost per item (a torch.save each, ~0.2 ms) rather
than the disk; `--model tiny` still runs it. Each round trains one step (batch 1 x 256 tokens) after the async
save, and deletes its checkpoints once it has loaded them, so every round writes into the same free space (kept,
they made later rounds several times slower on the development host's virtual disk, for dd and the saves alike).
Ends with `ratio checkpoint_save_vs_dd X`.
"""

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bessemer.checkpoint.store import Checkpointer, ModelParts  # noqa: E402
from bessemer.config import TrainConfig, load_config  # noqa: E402
from bessemer.model.llama import build_model  # noqa: E402
from bessemer.model.registry import ModelArgs, get_model_args  # noqa: E402
from bessemer.train.optim import Optimizers  # noqa: E402
from bessemer.train.state import TrainState  # noqa: E402

SEQ = 256
BENCH_MODELS = {"llama3-1b-block": ModelArgs(dim=2048, n_layers=1, n_heads=32, n_kv_heads=8, ffn_hidden=8192,
                                             vocab_size=8192)}


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def read_all(path: Path) -> None:
    for f in sorted(path.rglob("*")):
        if f.is_file():
            with open(f, "rb") as fh:
                while fh.read(8 << 20):
                    pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama3-1b-block", help=f"{', '.join(BENCH_MODELS)} or a registry size")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temporary directory)")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = build_model(BENCH_MODELS.get(args.model) or get_model_args(args.model), SEQ)
    opts = Optimizers([model], TrainConfig())

    def train_step() -> None:
        opts.zero_grad()
        model(torch.randint(0, 100, (1, SEQ))).float().mean().backward()
        opts.step()

    train_step()  # AdamW states exist

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)

        def checkpointer(name: str, *overrides: str) -> Checkpointer:
            # keep = 0: no pruning, so the time until committed holds no deletion of the previous round's save.
            cfg = load_config(None, [f"--checkpoint.micro.dir={root / name}", "--checkpoint.micro.keep=0",
                                     *overrides]).checkpoint
            return Checkpointer(cfg, root, {"model": ModelParts([model]), "optimizer": opts,
                                            "train_state": TrainState()})

        sync, async_ = checkpointer("sync"), checkpointer("async", "--checkpoint.async_save=true")
        sync_s, thread_s, stall_s, copy_s, step_s, dd_s, load_s, read_s = [], [], [], [], [], [], [], []

        def save(step: int) -> Path:
            t0 = time.perf_counter()
            path = sync.save(step, "micro")
            thread_s.append(time.perf_counter() - t0)
            sync.finish()  # until committed: the manifest written, the directory renamed and fsynced
            sync_s.append(time.perf_counter() - t0)
            return path

        def dd(nbytes: int) -> None:
            mib = max(1, nbytes >> 20)
            t0 = time.perf_counter()
            subprocess.run(["dd", "if=/dev/zero", f"of={root / 'dd.bin'}", "bs=1M", f"count={mib}", "conv=fsync"],
                           check=True, capture_output=True)
            dd_s.append((time.perf_counter() - t0) * nbytes / (mib << 20))
            (root / "dd.bin").unlink()

        nbytes = 0
        for step in range(1, args.rounds + 1):
            # Each save is paired with a dd run next to it (in alternating order), so both see the same load of
            # a shared host; the ratio is the median of the pairs'.
            if step % 2:
                path = save(step)
                nbytes = dir_bytes(path)
                dd(nbytes)
            else:
                dd(nbytes)
                path = save(step)
            async_.save(step, "micro")
            t0 = time.perf_counter()
            train_step()  # its optimizer step waits for what is left of the copy
            step_s.append(time.perf_counter() - t0)
            stall_s.append(async_.last_save_s)
            async_.finish()
            copy_s.append(async_.staging.copy_s)
            t0 = time.perf_counter()
            read_all(path)
            read_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            assert not sync.problems(path)
            sync.load(path)
            load_s.append(time.perf_counter() - t0)
            shutil.rmtree(path)
            shutil.rmtree(async_.tiers["micro"] / path.name)

    mb = nbytes / 1e6
    med = statistics.median
    stall = med(a / b for a, b in zip(stall_s, sync_s))
    vs_dd = med(a / b for a, b in zip(dd_s, sync_s))
    print(f"model {args.model}: checkpoint {mb:.1f} MB (weights + AdamW states + rank file), {args.rounds} rounds, "
          f"medians; torch {torch.__version__}")
    print(f"save (sync, until committed): {mb / med(sync_s):8.1f} MB/s   dd with fsync: {mb / med(dd_s):8.1f} MB/s")
    print(f"sync save, training thread:   {med(thread_s) * 1e3:8.1f} ms     until committed: "
          f"{med(sync_s) * 1e3:8.1f} ms")
    print(f"async stall:                  {med(stall_s) * 1e3:8.1f} ms     ({stall:.1%} of a sync save; goal <= 5%)")
    print(f"async copy to host memory:    {med(copy_s) * 1e3:8.1f} ms     beside a {med(step_s) * 1e3:.0f} ms "
          f"training step")
    print(f"load + verify:                {mb / med(load_s):8.1f} MB/s   plain read:    {mb / med(read_s):8.1f} MB/s")
    print(f"ratio checkpoint_async_stall_vs_sync {stall:.3f}  (lower is better; goal <= 0.05)")
    print(f"ratio checkpoint_load_verify_vs_read {med(read_s) / med(load_s):.3f}  (higher is better)")
    print(f"ratio checkpoint_save_vs_dd {vs_dd:.3f}  (higher is better; 1.0 = disk speed; goal >= 0.8)")


if __name__ == "__main__":
    main()
