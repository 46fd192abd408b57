"""An async save by bessemer's checkpointer with NCCL as the CUDA backend: the FSDP2-sharded model and its
optimizer staged from the GPU (into pinned host buffers where torch has the stager), written by DCP in the
background while training goes on, committed, then recovered into a fresh model — weights, optimizer moments
and the CUDA generator equal to the bit to what they were at the save."""

import torch
import torch.distributed as dist

from bessemer.checkpoint.store import Checkpointer, ModelParts
from bessemer.config import load_config
from bessemer.parallel.dims import Launch
from bessemer.rng import RNGState


def full(t):
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def tensors(state: dict, prefix: str = "") -> dict[str, torch.Tensor]:
    out = {}
    for k, v in state.items():
        if isinstance(v, dict):
            out |= tensors(v, f"{prefix}{k}.")
        elif isinstance(v, torch.Tensor):
            out[prefix + str(k)] = full(v).detach().clone()
    return out


def checkpointer(run_dir, model, optimizers) -> Checkpointer:
    cfg = load_config(None, ["--checkpoint.async_save=true"]).checkpoint
    return Checkpointer(cfg, run_dir, {"model": ModelParts([model]), "optimizer": optimizers, "rng": RNGState()},
                        Launch(rank=dist.get_rank(), world_size=dist.get_world_size()))


def test_async_save_over_nccl_recovers_model_optimizer_and_cuda_rng_bitwise(tmp_path, process_group,
                                                                           build_sharded, train_steps):
    cfg, model, optimizers = build_sharded()
    train_steps(cfg, model, optimizers, 2)
    ckpt = checkpointer(tmp_path, model, optimizers)
    path = ckpt.save(2, "micro")
    assert path is not None
    weights, moments = tensors(model.state_dict()), tensors(optimizers.state_dict())
    cuda_draws = torch.rand(64, device="cuda")
    train_steps(cfg, model, optimizers, 1, seed=2)  # the next step changes every weight while the write runs
    ckpt.finish()
    assert (path / "manifest.json").exists() and ckpt.problems(path) == []

    _, fresh, fresh_optimizers = build_sharded("--run.seed=7")  # other initial weights
    restored = checkpointer(tmp_path, fresh, fresh_optimizers)
    assert restored.recover(tmp_path)[:2] == (2, "micro")
    assert torch.equal(torch.rand(64, device="cuda"), cuda_draws)
    got = tensors(fresh.state_dict())
    assert got.keys() == weights.keys() and all(torch.equal(got[k], weights[k]) for k in weights)
    got = tensors(fresh_optimizers.state_dict())
    assert got.keys() == moments.keys() and all(torch.equal(got[k], moments[k]) for k in moments)
