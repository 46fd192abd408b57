"""ParallelDims: the degrees of each parallel dimension, validated against the world, and the DeviceMesh.

The only place that reads the launcher's environment (RANK, WORLD_SIZE, LOCAL_RANK). Mesh dimensions, outer
to inner: pp, dp_replicate, dp_shard, tp — tensor parallelism innermost so its heavy, latency-bound traffic
stays between neighbouring ranks (the GPUs of one node), pipeline outermost (point-to-point, cheapest).
"""

import os
from dataclasses import dataclass

from bessemer.config import ParallelConfig
from bessemer.errors import ConfigError


_LAUNCH_HINT = " (start that many ranks with `bessemer train CFG --nproc N` or under torchrun)"


@dataclass(frozen=True)
class Launch:
    """Where this process sits, as the launcher (torchrun, srun) says."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @staticmethod
    def from_env() -> "Launch":
        env = os.environ
        return Launch(int(env.get("RANK", 0)), int(env.get("LOCAL_RANK", 0)), int(env.get("WORLD_SIZE", 1)))

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


@dataclass(frozen=True)
class ParallelDims:
    dp_replicate: int
    dp_shard: int
    tp: int
    pp: int
    world_size: int

    @staticmethod
    def from_config(cfg: ParallelConfig, world_size: int) -> "ParallelDims":
        dp_shard = cfg.dp_shard
        if dp_shard == -1:
            rest = cfg.dp_replicate * cfg.tp * cfg.pp
            if world_size % rest:
                raise ConfigError(f"world size {world_size} is not divisible by dp_replicate x tp x pp = "
                                  f"{cfg.dp_replicate} x {cfg.tp} x {cfg.pp} = {rest}{_LAUNCH_HINT}")
            dp_shard = world_size // rest
        dims = ParallelDims(cfg.dp_replicate, dp_shard, cfg.tp, cfg.pp, world_size)
        dims.check()
        return dims

    def check(self) -> None:
        product = self.dp_replicate * self.dp_shard * self.tp * self.pp
        if product != self.world_size:
            raise ConfigError(f"dp_replicate x dp_shard x tp x pp = {self.dp_replicate} x {self.dp_shard} x "
                              f"{self.tp} x {self.pp} = {product}, but the world size is {self.world_size}"
                              f"{_LAUNCH_HINT}")

    @property
    def dp(self) -> int:
        """Data-parallel ranks in all: each sees a different part of the batch."""
        return self.dp_replicate * self.dp_shard

    def describe(self) -> str:
        return (f"world {self.world_size} = pp {self.pp} x dp_replicate {self.dp_replicate} x dp_shard "
                f"{self.dp_shard} x tp {self.tp}")


def restart_attempt() -> int:
    """0 for the first start of a job, n for torchrun's n-th automatic restart (--max-restarts)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def init_distributed(launch: Launch, device_type: str) -> None:
    """Join the process group (gloo on CPU, nccl on GPU) when launched with more than one rank."""
    import datetime

    import torch.distributed as dist

    if not launch.distributed or dist.is_initialized():
        return
    backend = "nccl" if device_type == "cuda" else "gloo"
    attempt = restart_attempt()
    if attempt == 0:
        dist.init_process_group(backend)
        return
    # After an automatic restart torchrun's agent still serves the store of the failed attempt, holding the
    # addresses of the dead ranks under the default keys (gloo's full-mesh connect then dials them and times
    # out). The new ranks meet under a key prefix of their own.
    env = os.environ
    agent_store = env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), launch.world_size,
                          is_master=not agent_store and launch.rank == 0, timeout=datetime.timedelta(minutes=10))
    dist.init_process_group(backend, store=dist.PrefixStore(f"bessemer/attempt_{attempt}", store), rank=launch.rank,
                            world_size=launch.world_size)


def build_mesh(dims: ParallelDims, device_type: str):
    """The 4-D DeviceMesh (pp, dp_replicate, dp_shard, tp), and the 1-D data-parallel mesh (dp_replicate and
    dp_shard flattened) that data loading and loss averaging use."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device_type, (dims.pp, dims.dp_replicate, dims.dp_shard, dims.tp),
                            mesh_dim_names=("pp", "dp_replicate", "dp_shard", "tp"))
    return mesh, mesh["dp_replicate", "dp_shard"]._flatten("dp")
