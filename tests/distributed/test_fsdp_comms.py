"""The CPU reduce-scatter (parallel/fsdp.py) on real gloo ranks: pieces give the bits of one call, and the input's
memory is given back when the collective returns; the tied embedding unit reshards once the head's gradient
has landed, before the blocks' backward."""

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(fn, *args) -> None:
    mp.spawn(fn, args=(_port(), *args), nprocs=WORLD, join=True)


def _init(rank: int, port: int) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)


def _pieces_worker(rank: int, port: int) -> None:
    from bessemer.parallel.fsdp import PiecewiseReduceScatter

    _init(rank, port)
    gen = torch.Generator().manual_seed(rank)
    for dtype in (torch.float32, torch.bfloat16):
        full = torch.randn(WORLD * 10_007, generator=gen).to(dtype)
        expected = torch.empty(10_007, dtype=dtype)
        dist.reduce_scatter_tensor(expected, full.clone(), op=dist.ReduceOp.SUM)
        comm = PiecewiseReduceScatter(piece_bytes=4096)  # ~20 pieces
        inp = comm.allocate((full.numel(),), dtype=dtype, device=torch.device("cpu"))
        inp.copy_(full)
        out = comm.allocate((10_007,), dtype=dtype, device=torch.device("cpu"))
        comm(out, inp, dist.group.WORLD, dist.ReduceOp.SUM)
        assert torch.equal(out, expected), f"rank {rank} {dtype}: pieces differ from one call"
        assert inp.untyped_storage().nbytes() == 0, "the reduce-scatter input was not given back"
    dist.destroy_process_group()


@pytest.mark.distributed
def test_piecewise_reduce_scatter_is_bitwise_one_call_and_frees_its_input():
    _run(_pieces_worker)


def _tied_worker(rank: int, port: int) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor

    from bessemer.config import PrecisionConfig
    from bessemer.model.llama import build_model
    from bessemer.model.registry import get_model_args
    from bessemer.parallel.fsdp import apply_fsdp
    from bessemer.precision.policy import PrecisionPolicy

    _init(rank, port)
    mesh = init_device_mesh("cpu", (WORLD,))
    model = build_model(get_model_args("debug-tied"), 16, "cpu", seed=0)
    apply_fsdp(model, mesh, PrecisionPolicy(PrecisionConfig()))
    seen = []
    last_block = model.layers[str(len(model.layers) - 1)]
    last_block.register_full_backward_pre_hook(
        lambda *_: seen.append(isinstance(model.output.weight, DTensor)))
    tokens = torch.randint(0, model.args.vocab_size, (2, 16), generator=torch.Generator().manual_seed(rank))
    for _ in range(2):  # twice: the hook re-arms at every forward
        model(tokens).float().logsumexp(-1).mean().backward()
    assert seen == [True, True], f"tied unit still gathered during the blocks' backward: {seen}"
    assert all(p.grad is not None for p in model.parameters())
    dist.destroy_process_group()


@pytest.mark.distributed
def test_tied_unit_is_resharded_before_the_blocks_backward():
    _run(_tied_worker)
