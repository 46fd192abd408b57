"""ParallelDims: the degrees of each parallel dimension, validated against the world, and the DeviceMesh.

The only place that reads the launcher's environment (RANK, WORLD_SIZE, LOCAL_RANK, GROUP_RANK). Mesh dimensions, outer
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
    node: int = 0  # the node's rank among the job's nodes (torchrun's GROUP_RANK; c10d may reassign it)

    @staticmethod
    def from_env() -> "Launch":
        env = os.environ
        return Launch(int(env.get("RANK", 0)), int(env.get("LOCAL_RANK", 0)), int(env.get("WORLD_SIZE", 1)),
                      int(env.get("GROUP_RANK", 0)))

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


_agreed_attempt: int | None = None  # set once by init_distributed: the attempt every rank agreed on


def restart_attempt() -> int:
    """0 for the first start of a job, n for torchrun's n-th automatic restart (--max-restarts). Once the
    process group exists this is the number every rank agreed on: torchrun's TORCHELASTIC_RESTART_COUNT
    counts only the restarts of that node's own agent, and after a failure on another node it stays 0."""
    if _agreed_attempt is not None:
        return _agreed_attempt
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def process_group_backend(device_type: str) -> str:
    """On GPUs NCCL for CUDA tensors and gloo for CPU ones (CPU-offloaded gradients and optimizer states, the
    checkpointer's small agreements); gloo alone on CPUs."""
    return "cuda:nccl,cpu:gloo" if device_type == "cuda" else "gloo"


def init_distributed(launch: Launch, device_type: str, timeout_s: float = 600.0) -> None:
    """Join the process group (`process_group_backend`) when launched with more than one rank. Every
    collective, and the rendezvous itself, fails after `timeout_s` seconds instead of hanging
    (parallel.timeout_s)."""
    import datetime

    import torch.distributed as dist

    global _agreed_attempt
    if not launch.distributed or dist.is_initialized():
        return
    backend = process_group_backend(device_type)
    timeout = datetime.timedelta(seconds=timeout_s)
    env = os.environ
    if "TORCHELASTIC_RUN_ID" not in env or "MASTER_ADDR" not in env:  # another launcher: its env:// rendezvous
        dist.init_process_group(backend, timeout=timeout)
        return
    # Under torchrun the agents' store outlives a failed attempt and still holds the dead ranks' addresses under
    # the default keys (gloo's full-mesh connect would dial them and time out), so each attempt meets under a
    # prefix of its own. Its number cannot come from TORCHELASTIC_RESTART_COUNT, which differs between nodes
    # (only the failed node's agent counts the restart): every rank counts its own starts in the store instead —
    # torchrun restarts all ranks of all nodes together, so the counts agree.
    agent_store = env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), launch.world_size,
                          is_master=not agent_store and launch.rank == 0, timeout=timeout)
    start = store.add(f"bessemer/starts/rank{launch.rank}", 1)
    # (A store of the workers' own, without the agent's, is new in every attempt: only the agent counts.)
    _agreed_attempt = start - 1 if agent_store else int(env.get("TORCHELASTIC_RESTART_COUNT", "0"))
    dist.init_process_group(backend, store=dist.PrefixStore(f"bessemer/start_{start}", store), rank=launch.rank,
                            world_size=launch.world_size, timeout=timeout)


def build_mesh(dims: ParallelDims, device_type: str):
    """The 4-D DeviceMesh (pp, dp_replicate, dp_shard, tp), and the 1-D data-parallel mesh (dp_replicate and
    dp_shard flattened) that data loading and loss averaging use."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device_type, (dims.pp, dims.dp_replicate, dims.dp_shard, dims.tp),
                            mesh_dim_names=("pp", "dp_replicate", "dp_shard", "tp"))
    return mesh, mesh["dp_replicate", "dp_shard"]._flatten("dp")
