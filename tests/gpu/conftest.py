"""Tests that need a CUDA GPU. Every test under tests/gpu is marked `gpu` and skipped where torch sees no GPU,
so the suite stays green on CPU-only machines; `pytest -m gpu` selects them (scripts/gpu_check.sh runs them on
one GPU, docs/performance.md).

On one GPU there is one rank, so the FSDP2 tests shard over a one-rank mesh: the same parameter casts, FP8
all-gathers, hooks and DTensor state dicts as on many ranks, with collectives of one."""

from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
DEBUG_SEQ = 64


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m selection reads the markers
def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA GPU: torch.cuda.is_available() is False")
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.gpu)
            if not torch.cuda.is_available():
                item.add_marker(skip)


@pytest.fixture(autouse=True)
def _fresh_compile_caches():
    """Each test compiles the debug blocks its own way; dynamo's per-code caches would otherwise add up across
    tests to its recompile limit (which parallel/compile.py turns into an error)."""
    yield
    torch._dynamo.reset()


@pytest.fixture(scope="session")
def process_group(tmp_path_factory):
    """A one-rank process group with the backends the trainer uses on GPUs (NCCL for CUDA tensors, gloo for CPU
    ones), met through a file store: no port to pick."""
    import torch.distributed as dist

    from bessemer.parallel.dims import process_group_backend

    torch.cuda.set_device(0)
    store = dist.FileStore(str(tmp_path_factory.mktemp("pg") / "store"), 1)
    dist.init_process_group(process_group_backend("cuda"), store=store, rank=0, world_size=1)
    yield dist.group.WORLD
    dist.destroy_process_group()


@pytest.fixture(scope="session")
def mesh(process_group):
    """bessemer's 4-D mesh (pp, dp_replicate, dp_shard, tp), all of size 1, on CUDA."""
    from bessemer.parallel.dims import ParallelDims, build_mesh

    return build_mesh(ParallelDims(dp_replicate=1, dp_shard=1, tp=1, pp=1, world_size=1), "cuda")[0]


@pytest.fixture
def build_sharded(mesh):
    """build(*overrides, compile_blocks=False) -> (config, model, optimizers): the debug model on the GPU, put
    through `parallelize`'s steps in its order — FP8 conversion, activation checkpointing, compile per block,
    FSDP2 — on the one-rank mesh (`parallelize` itself shards only when dp_shard > 1), then materialised and
    initialised from the config's seed. bf16 unless an override says otherwise."""
    from bessemer.config import load_config
    from bessemer.model.llama import Transformer
    from bessemer.model.registry import MODEL_SIZES
    from bessemer.parallel.compile import apply_compile
    from bessemer.parallel.fsdp import apply_fsdp
    from bessemer.parallel.recompute import apply_activation_checkpointing
    from bessemer.precision.fp8 import convert_to_fp8
    from bessemer.precision.policy import PrecisionPolicy
    from bessemer.train.optim import Optimizers

    def build(*overrides: str, compile_blocks: bool = False):
        cfg = load_config(None, ["--precision.dtype=bf16", f"--train.seq_len={DEBUG_SEQ}", *overrides])
        policy = PrecisionPolicy(cfg.precision)
        with torch.device("meta"):
            model = Transformer(MODEL_SIZES["debug"], cfg.train.seq_len)
        convert_to_fp8(model, policy, cfg.precision.fp8, tp=1, sharded=True)
        apply_activation_checkpointing(model, cfg.precision.activation_checkpoint)
        if compile_blocks:
            apply_compile(model)
        apply_fsdp(model, mesh["dp_shard"], policy)
        model.to_empty(device="cuda")
        model.init_weights(cfg.run.seed)
        return cfg, model, Optimizers([model], cfg.train)

    return build


@pytest.fixture
def train_steps():
    """train(config, model, optimizers, steps, seed=1) -> losses: bessemer's loss, the FP8 scale precompute
    after every optimizer step, no autocast (FSDP2 casts the parameters), on fixed random batches of 4."""
    from bessemer.precision.fp8 import precompute_fp8_scales
    from bessemer.precision.policy import PrecisionPolicy, compute_context
    from bessemer.train.builders import loss_fn

    def train(cfg, model, optimizers, steps: int, seed: int = 1) -> list[float]:
        policy, device = PrecisionPolicy(cfg.precision), torch.device("cuda")
        vocab = model.tok_embeddings.num_embeddings
        data = torch.randint(0, vocab, (steps, 4, cfg.train.seq_len + 1),
                             generator=torch.Generator().manual_seed(seed)).to(device)
        losses = []
        for batch in data:
            optimizers.zero_grad()
            with compute_context(policy, device, autocast=False):
                loss = loss_fn(model(batch[:, :-1]), batch[:, 1:])
                loss.backward()
            optimizers.step()
            precompute_fp8_scales([model])
            losses.append(loss.detach())
        return [float(x) for x in torch.stack(losses).cpu()]

    return train

