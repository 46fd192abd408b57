"""Initialisation that scales: each rank materialises only its shards on real gloo ranks (torchrun), yet the
gathered weights equal the single-process `build_model` of the same seed, FSDP and tensor-parallel shards hold
different values, and every pipeline stage has its own layers (the tied head copy equals the embedding)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
SEED = 7
LAYOUTS = {  # name: (ranks, model size, parallel config)
    "pp2_dp_shard2": (4, "debug", {"pp": 2, "dp_shard": 2}),
    "tp2_dp_shard2": (4, "debug", {"tp": 2, "dp_shard": 2}),
    "pp2_dp_shard2_tied": (4, "debug-tied", {"pp": 2, "dp_shard": 2}),
}


def worker(out: Path, size: str, layout: dict) -> None:
    """Build this rank's parts, compare the gathered weights with one process's, report shard fingerprints."""
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    from bessemer.config import ParallelConfig, PrecisionConfig
    from bessemer.model.llama import build_model
    from bessemer.model.registry import get_model_args
    from bessemer.parallel.build import build_model_parts
    from bessemer.parallel.dims import (
        Launch,
        ParallelDims,
        build_mesh,
        init_distributed,
    )

    launch = Launch.from_env()
    cfg = ParallelConfig(**layout)
    dims = ParallelDims.from_config(cfg, launch.world_size)
    init_distributed(launch, "cpu")
    mesh, _ = build_mesh(dims, "cpu")
    args = get_model_args(size)
    parts, ids = build_model_parts(args, 32, dims, mesh, cfg, PrecisionConfig(), torch.device("cpu"), SEED)
    reference = build_model(args, 32, "cpu", seed=SEED).state_dict()  # what one process starts from
    mine = {"rank": launch.rank, "stages": ids, "mismatched": [], "shards": {}}
    for part in parts:
        for name, p in part.named_parameters():
            full = p.full_tensor() if isinstance(p, DTensor) else p.detach()
            if not torch.equal(full, reference[name]):
                mine["mismatched"].append(name)
            local = p.to_local() if isinstance(p, DTensor) else p.detach()
            mine["shards"][name] = local.flatten()[:8].tolist()
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    if launch.rank == 0:
        out.write_text(json.dumps(everyone))
    dist.destroy_process_group()


def run_layout(name: str, tmp_path: Path) -> list[dict]:
    nproc, size, layout = LAYOUTS[name]
    out = tmp_path / "init.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", __file__,
           str(out), size, json.dumps(layout)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=240, check=False,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return json.loads(out.read_text())


@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_shards_gather_to_the_single_process_init_and_differ(name, tmp_path):
    ranks = run_layout(name, tmp_path)
    for r in ranks:
        assert r["mismatched"] == [], f"rank {r['rank']}: gathered weights differ from one process's"
    # Ranks holding a shard of the same parameter hold different values (FSDP / tensor-parallel shards);
    # norms (all ones) are the exception.
    holders: dict[str, list[tuple]] = {}
    for r in ranks:
        for pname, values in r["shards"].items():
            holders.setdefault(pname, []).append(tuple(values))
    sharded = {k: v for k, v in holders.items() if not k.endswith("norm.weight")}
    assert sharded and all(len(set(v)) == len(v) for v in sharded.values()), name
    # Every pipeline stage gets its own values: no two layers start alike.
    firsts = [v[0] for k, v in sharded.items() if k.startswith("layers.") and k.endswith("attention.wq.weight")]
    assert len(set(firsts)) == len(firsts)
    if name.endswith("tied"):
        # The last stage's head copy starts as the first stage's embedding, shard for shard.
        emb = sorted(r["shards"]["tok_embeddings.weight"] for r in ranks if "tok_embeddings.weight" in r["shards"])
        head = sorted(r["shards"]["output.weight"] for r in ranks if "output.weight" in r["shards"])
        assert emb == head and len(emb) == 2
    else:
        stages = {tuple(r["stages"]) for r in ranks}
        assert len(stages) == (2 if name.startswith("pp2") else 1)


if __name__ == "__main__":
    worker(Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3]))
