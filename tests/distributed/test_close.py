"""`Trainer.close` in the states a trainer can be left in — a forward and backward with no optimizer step (what a
stop mid-step leaves, and what the memory bench does), a step taken by hand with the metrics writer running, a
pipeline schedule's forward and backward — on real gloo ranks (torchrun): every rank closes, closes again, and
exits 0."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
REPO = Path(__file__).resolve().parents[2]
CASES = {  # name: (ranks, what the trainer does before close, overrides)
    "forward_backward": (2, "forward_backward", ["--parallel.dp_shard=2", "--model.name=debug-tied",
                                                 "--precision.dtype=bf16", "--precision.reduce_dtype=bf16"]),
    "train_step_logging": (2, "train_step", ["--parallel.dp_shard=2"]),
    "pipeline_forward_backward": (2, "forward_backward", ["--parallel.pp=2", "--parallel.microbatches=2"]),
}


def worker(run_dir: Path, action: str, overrides: list[str]) -> None:
    from bessemer.config import load_config
    from bessemer.train.trainer import Trainer

    cfg = load_config(REPO / "configs" / "debug.toml", [
        f"--run.dir={run_dir}", f"--data.path={REPO / 'data' / 'debug'}", "--train.steps=2", "--train.seq_len=32",
        "--checkpoint.at_end=false", "--metrics.tensorboard=false", "--metrics.telemetry_period_s=0",
        "--metrics.peak_tflops=1", *overrides])
    trainer = Trainer(cfg, log=action == "train_step")
    if action == "forward_backward":
        inputs, targets = trainer.loader.next_batch()
        trainer.step.forward_backward(inputs, targets)  # no optimizer step
    else:
        trainer.train_step()
    trainer.close()
    trainer.close()
    (run_dir / f"closed.rank{trainer.launch.rank}").touch()


@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", list(CASES))
def test_every_rank_closes_and_exits_0(name, tmp_path):
    nproc, action, overrides = CASES[name]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", __file__,
           str(tmp_path / "run"), action, *overrides]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=240, check=False, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert sorted(p.name for p in (tmp_path / "run").glob("closed.rank*")) == [f"closed.rank{r}" for r in range(nproc)]


if __name__ == "__main__":
    worker(Path(sys.argv[1]), sys.argv[2], sys.argv[3:])
