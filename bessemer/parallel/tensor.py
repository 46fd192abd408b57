"""Tensor (+ sequence) parallel plan for the Llama blocks, applied with DTensor's parallelize_module.

Megatron's split: q/k/v and w1/w3 column-wise (each rank computes some heads / some FFN columns with no
communication), wo and w2 row-wise (partial sums reduced once per sub-layer). The embedding is split over
the vocabulary (row-wise) and the output head over the vocabulary (column-wise). With sequence parallelism
the norms and residual stream are sharded along the sequence between the tensor-parallel regions, which
turns each all-reduce into a reduce-scatter + all-gather pair and divides activation memory by tp.
"""

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                               SequenceParallel, parallelize_module)



def apply_tp(model: nn.Module, tp_mesh: DeviceMesh, sequence_parallel: bool, loss_parallel: bool) -> None:
    """Parallelise `model` (a whole model or a pipeline stage: absent parts are skipped) in place."""
    seq = Shard(1)  # (B, T, dim) activations sharded along T between regions when sequence-parallel
    between = seq if sequence_parallel else Replicate()
    root_plan = {}
    if model.tok_embeddings is not None:
        root_plan["tok_embeddings"] = RowwiseParallel(input_layouts=Replicate(), output_layouts=between)
    if model.norm is not None and sequence_parallel:
        root_plan["norm"] = SequenceParallel()
    if model.output is not None:
        root_plan["output"] = ColwiseParallel(input_layouts=between,
                                              output_layouts=Shard(-1) if loss_parallel else Replicate(),
                                              use_local_output=not loss_parallel)
    if root_plan:
        parallelize_module(model, tp_mesh, root_plan)
    for block in model.layers.values():
        plan = {
            "attention": PrepareModuleInput(input_layouts=(between, None, None),
                                            desired_input_layouts=(Replicate(), None, None)),
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=between),
            "feed_forward": PrepareModuleInput(input_layouts=(between,), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=between),
            "feed_forward.w3": ColwiseParallel(),
        }
        if sequence_parallel:
            plan["attention_norm"] = SequenceParallel()
            plan["ffn_norm"] = SequenceParallel()
        parallelize_module(block, tp_mesh, plan)
