"""parallel.timeout_s reaches every process group the trainer creates, on 4 real gloo ranks (torchrun): the default
group and its store, the mesh's dimension groups and the flattened data-parallel group (which torch creates with
gloo's 30-minute default), the tied-embedding groups of a pipeline and the async checkpoint group. Each group's
timeout is read back from its gloo backend, and one mesh sub-group is shown to honour it: a collective whose
peer never joins fails with gloo's "Timed out waiting <timeout>ms"."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 20  # long enough for 4 ranks to start on a busy machine; the missing-peer collective waits this long
OVERRIDES = ["--parallel.pp=2", "--parallel.dp_shard=2", "--model.name=debug-tied", "--checkpoint.async_save=true",
             f"--parallel.timeout_s={TIMEOUT_S}"]


def worker(run_dir: Path) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    from bessemer.config import load_config
    from bessemer.train.trainer import Trainer

    cfg = load_config(REPO / "configs" / "debug.toml", [
        f"--run.dir={run_dir}", f"--data.path={REPO / 'data' / 'debug'}", "--train.steps=2", "--train.seq_len=32",
        "--checkpoint.at_end=false", "--metrics.tensorboard=false", "--metrics.telemetry_period_s=0",
        "--metrics.peak_tflops=1", *OVERRIDES])
    trainer = Trainer(cfg, log=False)
    rank = trainer.launch.rank
    groups = [{"name": c10d._world.pg_names[pg], "desc": pg.group_desc, "size": pg.size(),
               "timeout_s": pg._get_backend(torch.device("cpu")).options._timeout.total_seconds()}
              for pg in c10d._world.pg_map]
    result = {"groups": groups, "store_timeout_s": c10d._get_default_store().timeout.total_seconds()}
    # A collective on this rank's dp_shard group that its peer never joins: the first of each pair calls it.
    shard = trainer.build.mesh["dp_shard"]
    if shard.get_local_rank() == 0:
        try:
            dist.all_reduce(torch.ones(1), group=shard.get_group())
            result["missing_peer"] = "returned"
        except RuntimeError as e:
            result["missing_peer"] = str(e)
    (run_dir / f"rank{rank}.json").write_text(json.dumps(result))
    deadline = time.monotonic() + 3 * TIMEOUT_S  # the peer that stays out waits for the others' answers
    while len(list(run_dir.glob("rank*.json"))) < trainer.launch.world_size and time.monotonic() < deadline:
        time.sleep(0.2)
    os._exit(0)  # past a failed collective: no teardown that could wait on it


@pytest.mark.distributed
@pytest.mark.timeout(400)
def test_every_group_the_trainer_creates_times_out_after_parallel_timeout_s(tmp_path):
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=4", __file__, str(run)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=360, check=False, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    results = {r: json.loads((run / f"rank{r}.json").read_text()) for r in range(4)}
    for rank, result in results.items():
        assert result["store_timeout_s"] == TIMEOUT_S
        wrong = [g for g in result["groups"] if g["timeout_s"] != TIMEOUT_S]
        assert not wrong, f"rank {rank}: groups without parallel.timeout_s: {wrong}"
        descs = {g["desc"] for g in result["groups"]}
        # Every kind of group: the default one, the four mesh dimensions, the flattened dp (mesh_dp), the pipeline's
        # tied embeddings (first and last stage), the async checkpoint group.
        assert {"default_pg", "mesh_pp", "mesh_dp_replicate", "mesh_dp_shard", "mesh_tp", "tied_embeddings",
                "checkpoint_async", "mesh_dp"} <= descs, descs
    waited = [r for r in results.values() if "missing_peer" in r]
    assert len(waited) == 2  # the first rank of each dp_shard pair
    for r in waited:
        assert f"Timed out waiting {TIMEOUT_S * 1000}ms" in r["missing_peer"], r["missing_peer"]


if __name__ == "__main__":
    worker(Path(sys.argv[1]))
