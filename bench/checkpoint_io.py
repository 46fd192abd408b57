"""Checkpoint I/O against the disk's own speed, measured in the same run on the same directory.

- save: bessemer's synchronous save until committed (DCP shards + rank file, each fsynced and checksummed while
  written, the entries exchanged, manifest, rename, directory fsyncs) in MB/s, against `dd` writing the same
  number of bytes with fsync (conv=fsync) -> ratio ours / dd (higher is better, 1.0 = disk speed; goal >= 0.8);
- async: the training stall of an async save (what the step waits for: the copy into the host buffers kept
  from the previous save) against the whole synchronous save -> ratio stall / sync (lower is better; goal
  <= 0.05);
- load + verify: checksumming every file against the manifest and loading model and optimizer, in MB/s,
  against plainly reading the same files -> ratio ours / read (higher is better).

The model is `tiny` unless --model says otherwise (its AdamW states make the checkpoint 3x the weights).
Ends with `ratio checkpoint_save_vs_dd X`.
"""

import argparse
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
from bessemer.model.registry import get_model_args  # noqa: E402
from bessemer.train.optim import Optimizers  # noqa: E402
from bessemer.train.state import TrainState  # noqa: E402


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
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temporary directory)")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = build_model(get_model_args(args.model), 256)
    opts = Optimizers([model], TrainConfig())
    model(torch.randint(0, 100, (1, 16))).float().mean().backward()
    opts.step()  # AdamW states exist

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)

        def checkpointer(name: str, *overrides: str) -> Checkpointer:
            # keep = 0: no pruning, so the time until committed holds no deletion of the previous round's save.
            cfg = load_config(None, [f"--checkpoint.micro.dir={root / name}", "--checkpoint.micro.keep=0",
                                     *overrides]).checkpoint
            return Checkpointer(cfg, root, {"model": ModelParts([model]), "optimizer": opts,
                                            "train_state": TrainState()})

        sync, async_ = checkpointer("sync"), checkpointer("async", "--checkpoint.async_save=true")
        sync_s, thread_s, stall_s, dd_s, load_s, read_s = [], [], [], [], [], []
        for step in range(1, args.rounds + 1):
            t0 = time.perf_counter()
            path = sync.save(step, "micro")
            thread_s.append(time.perf_counter() - t0)
            sync.finish()  # until committed: the manifest written, the directory renamed and fsynced
            sync_s.append(time.perf_counter() - t0)
            nbytes = dir_bytes(path)
            mib = max(1, nbytes >> 20)
            t0 = time.perf_counter()
            subprocess.run(["dd", "if=/dev/zero", f"of={root / 'dd.bin'}", "bs=1M", f"count={mib}", "conv=fsync"],
                           check=True, capture_output=True)
            dd_s.append((time.perf_counter() - t0) * nbytes / (mib << 20))
            (root / "dd.bin").unlink()
            t0 = time.perf_counter()
            async_.save(step, "micro")
            stall_s.append(time.perf_counter() - t0)
            async_.finish()
            t0 = time.perf_counter()
            read_all(path)
            read_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            assert not sync.problems(path)
            sync.load(path)
            load_s.append(time.perf_counter() - t0)

    mb = nbytes / 1e6
    med = statistics.median
    stall = med(stall_s) / med(sync_s)
    print(f"model {args.model}: checkpoint {mb:.1f} MB (weights + AdamW states + rank file), {args.rounds} rounds, "
          f"medians; torch {torch.__version__}")
    print(f"save (sync, until committed): {mb / med(sync_s):8.1f} MB/s   dd with fsync: {mb / med(dd_s):8.1f} MB/s")
    print(f"sync save, training thread:   {med(thread_s) * 1e3:8.1f} ms     until committed: {med(sync_s) * 1e3:8.1f} ms")
    print(f"async stall:                  {med(stall_s) * 1e3:8.1f} ms     ({stall:.1%} of a sync save; goal <= 5%)")
    print(f"load + verify:                {mb / med(load_s):8.1f} MB/s   plain read:    {mb / med(read_s):8.1f} MB/s")
    print(f"ratio checkpoint_async_stall_vs_sync {stall:.3f}  (lower is better; goal <= 0.05)")
    print(f"ratio checkpoint_load_verify_vs_read {med(read_s) / med(load_s):.3f}  (higher is better)")
    print(f"ratio checkpoint_save_vs_dd {med(dd_s) / med(sync_s):.3f}  (higher is better; 1.0 = disk speed; goal >= 0.8)")


if __name__ == "__main__":
    main()
