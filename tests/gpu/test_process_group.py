"""The process group the trainer joins on GPUs, on one rank: NCCL carries CUDA tensors, gloo CPU ones, in one
group — the checkpointer's object exchanges and bessemer's device mesh included."""

import torch
import torch.distributed as dist


def test_one_group_reduces_cuda_tensors_over_nccl_and_cpu_tensors_over_gloo(process_group):
    config = dist.get_backend_config(process_group)
    assert "cuda:nccl" in config and "cpu:gloo" in config, config
    on_gpu, on_cpu = torch.full((4,), 3.0, device="cuda"), torch.full((4,), 5.0)
    dist.all_reduce(on_gpu)  # the first CUDA collective creates the NCCL communicator
    dist.all_reduce(on_cpu)
    torch.cuda.synchronize()
    assert on_gpu.tolist() == [3.0] * 4 and on_cpu.tolist() == [5.0] * 4
    objects = [None]
    dist.all_gather_object(objects, {"step": 7, "files": ["rank00000.pt"]})
    assert objects == [{"step": 7, "files": ["rank00000.pt"]}]


def test_the_mesh_lives_on_cuda_with_bessemers_dimension_names(mesh):
    assert mesh.device_type == "cuda"
    assert mesh.mesh_dim_names == ("pp", "dp_replicate", "dp_shard", "tp")
    assert mesh["dp_shard"].size() == 1
