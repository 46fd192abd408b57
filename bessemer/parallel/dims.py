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
    run_id: str = ""  # torchrun's run id (TORCHELASTIC_RUN_ID): the same for every attempt of one launch

    @staticmethod
    def from_env() -> "Launch":
        env = os.environ
        return Launch(int(env.get("RANK", 0)), int(env.get("LOCAL_RANK", 0)), int(env.get("WORLD_SIZE", 1)),
                      int(env.get("GROUP_RANK", 0)), env.get("TORCHELASTIC_RUN_ID", ""))

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
_timeout_s: float | None = None  # parallel.timeout_s, set by init_distributed: every group's and every wait's bound
FLIGHT_RECORDER_ENTRIES = 1000  # the collectives each rank keeps a record of (torch's flight recorder), for hang dumps


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


def init_distributed(launch: Launch, device_type: str, timeout_s: float = 600.0,
                     flight_recorder: bool = False) -> None:
    """Join the process group (`process_group_backend`) when launched with more than one rank. Every
    collective, and the rendezvous itself, fails after `timeout_s` seconds instead of hanging
    (parallel.timeout_s); the groups created later take the same bound (`new_group`, `build_mesh`). With
    `flight_recorder`, torch's flight recorder keeps this rank's last FLIGHT_RECORDER_ENTRIES collectives (which
    group, which operation, whether it completed), for the hang watchdog (train/watchdog.py); a
    TORCH_FR_BUFFER_SIZE the user set wins."""
    import datetime

    import torch.distributed as dist

    global _agreed_attempt, _timeout_s
    if not launch.distributed or dist.is_initialized():
        return
    if flight_recorder:  # read when the first process group is created
        os.environ.setdefault("TORCH_FR_BUFFER_SIZE", str(FLIGHT_RECORDER_ENTRIES))
    _timeout_s = timeout_s
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


def group_timeout():
    """parallel.timeout_s as a timedelta (its default, 600 s, before init_distributed has run)."""
    import datetime

    return datetime.timedelta(seconds=600.0 if _timeout_s is None else _timeout_s)


def new_group(ranks: list[int] | None = None, backend: str | None = None, desc: str | None = None):
    """A process group whose collectives fail after parallel.timeout_s, like the default group's: torch gives a
    new group its backend's own default (30 minutes for gloo, 10 for NCCL), not the default group's timeout.
    Every rank calls it for every group, as torch.distributed.new_group; `desc` names it in flight records and
    hang dumps."""
    import torch.distributed as dist

    return dist.new_group(ranks, timeout=group_timeout(), backend=backend, group_desc=desc)


def bound_group(group) -> None:
    """Give an existing group parallel.timeout_s: the DeviceMesh creates its dimensions' groups (and a flattened
    mesh's) through new_group without a timeout, so without this they wait torch's default (30 minutes for
    gloo) for a peer that stopped. gloo and NCCL read the timeout per operation."""
    from torch.distributed import distributed_c10d

    distributed_c10d._set_pg_timeout(group_timeout(), group)


def launcher_store(timeout_s: float):
    """A connection of its own to torchrun's store — the agents' rendezvous store, which lives in the launcher,
    not in a rank, so it answers while any rank is stopped — or None outside torchrun (or when the ranks host
    the store themselves: TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1). For the hang watchdog, whose heartbeats must
    not go through the collectives it watches."""
    import datetime

    import torch.distributed as dist

    env = os.environ
    if env.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or "MASTER_ADDR" not in env:
        return None
    return dist.TCPStore(env["MASTER_ADDR"], int(env["MASTER_PORT"]), is_master=False,
                         timeout=datetime.timedelta(seconds=timeout_s), wait_for_workers=False)


def build_mesh(dims: ParallelDims, device_type: str):
    """The 4-D DeviceMesh (pp, dp_replicate, dp_shard, tp), and the 1-D data-parallel mesh (dp_replicate and
    dp_shard flattened) that data loading and loss averaging use; every group of both waits parallel.timeout_s
    at most (`bound_group`)."""
    from torch.distributed.device_mesh import init_device_mesh

    names = ("pp", "dp_replicate", "dp_shard", "tp")
    mesh = init_device_mesh(device_type, (dims.pp, dims.dp_replicate, dims.dp_shard, dims.tp),
                            mesh_dim_names=names)
    dp_mesh = mesh["dp_replicate", "dp_shard"]._flatten("dp")
    for group in {*(mesh.get_group(name) for name in names), dp_mesh.get_group()}:
        bound_group(group)
    return mesh, dp_mesh
