"""Data parallelism with FSDP2 (`fully_shard`): ZeRO-3 over dp_shard, HSDP over dp_replicate x dp_shard,
plain replication over dp_replicate alone (a shard group of one)."""

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

from bessemer.precision.policy import PrecisionPolicy


def apply_fsdp(model: nn.Module, dp_mesh: DeviceMesh, policy: PrecisionPolicy, offload: bool = False,
               reshard_after_forward: bool = True) -> None:
    """Shard each block, then the root (embedding, final norm, head).

    Per-block units let FSDP gather one block's parameters at a time (prefetching the next) and free them
    after use, so peak memory is the sharded model plus about one unsharded block. `dp_mesh` is 1-D (FSDP) or
    2-D (replicate, shard) for HSDP. Each unit casts its parameters as the precision policy says; a submodule
    whose dtype differs (fp32 norms in a bf16 block) becomes its own unit first. `offload` keeps parameters,
    gradients and optimizer states in host memory (CPUOffloadPolicy).
    """
    offload_policy = CPUOffloadPolicy(pin_memory=dp_mesh.device_type == "cuda") if offload else OffloadPolicy()

    def shard(module: nn.Module, name: str, reshard: bool, skip: str | None = None) -> None:
        for sub, mp in policy.fsdp_islands(module, name, skip):
            fully_shard(sub, mesh=dp_mesh, mp_policy=mp, offload_policy=offload_policy, reshard_after_forward=reshard)
        fully_shard(module, mesh=dp_mesh, mp_policy=policy.mp_policy(name), offload_policy=offload_policy,
                    reshard_after_forward=reshard)

    for layer_id, block in model.layers.items():
        shard(block, f"layers.{layer_id}", reshard_after_forward)
    # The root's parameters are needed right at the end of backward: no point resharding them after forward.
    shard(model, "", False, skip="layers")
