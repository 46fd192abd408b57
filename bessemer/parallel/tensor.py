"""Tensor (+ sequence) parallel plan for the Llama blocks, applied with DTensor's parallelize_module.

Megatron's split: q/k/v and w1/w3 column-wise (each rank computes some heads / some FFN columns with no
communication), wo and w2 row-wise (partial sums reduced once per sub-layer). The embedding is split over
the vocabulary (row-wise) and the output head over the vocabulary (column-wise). With sequence parallelism
the norms and residual stream are sharded along the sequence between the tensor-parallel regions, which
turns each all-reduce into a reduce-scatter + all-gather pair and divides activation memory by tp.

FP8 layers (converted before TP, precision/fp8.py) with tensorwise scaling take torchao's Float8 styles: the
activation is cast to FP8 before it is gathered (so a sequence-parallel all-gather moves FP8) and the output
gradient is cast in backward, each with one scale over the whole, unsharded tensor — the numerics of one
process. Rowwise FP8 layers keep the plain styles (torchao's Float8 styles assume one scale per tensor): their
activations are gathered in high precision and cast per row inside the layer. So do FP8 layers under sequence
parallelism on a CPU mesh: gloo has no float8 dtype to all-gather (the casts then happen inside each layer,
with the same scales).
"""

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                               SequenceParallel, parallelize_module)


def tensorwise_fp8(module: nn.Module) -> bool:
    """Whether `module` is a Float8Linear with one dynamic scale per tensor for its input and output gradient.
    Float8Linear exists only where FP8 was enabled, so torchao is asked only then."""
    if type(module).__name__ != "Float8Linear":
        return False
    from torchao.float8.config import ScalingGranularity

    config = module.config
    return all(c.scaling_granularity == ScalingGranularity.TENSORWISE
               for c in (config.cast_config_input, config.cast_config_grad_output))


def block_styles(block: nn.Module, fp8_gather: bool = True) -> tuple[type, type, type]:
    """(colwise, rowwise, prepare-input) styles for a block: torchao's Float8 ones when all its Linear layers are
    tensorwise FP8 (one FP8 cast of the shared input serves q, k and v, or w1 and w3) and the collectives can
    carry FP8 (`fp8_gather`), the plain ones otherwise."""
    linears = [m for m in block.modules() if isinstance(m, nn.Linear)]
    if not (fp8_gather and linears and all(tensorwise_fp8(m) for m in linears)):
        return ColwiseParallel, RowwiseParallel, PrepareModuleInput
    from torchao.float8.float8_tensor_parallel import (Float8ColwiseParallel, Float8RowwiseParallel,
                                                       PrepareFloat8ModuleInput)

    return Float8ColwiseParallel, Float8RowwiseParallel, PrepareFloat8ModuleInput


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
    fp8_gather = tp_mesh.device_type != "cpu" or not sequence_parallel  # gloo cannot all-gather float8
    for block in model.layers.values():
        colwise, rowwise, prepare = block_styles(block, fp8_gather)
        plan = {
            "attention": prepare(input_layouts=(between, None, None), desired_input_layouts=(Replicate(), None, None)),
            "attention.wq": colwise(),
            "attention.wk": colwise(),
            "attention.wv": colwise(),
            "attention.wo": rowwise(output_layouts=between),
            "feed_forward": prepare(input_layouts=(between,), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": colwise(),
            "feed_forward.w2": rowwise(output_layouts=between),
            "feed_forward.w3": colwise(),
        }
        if sequence_parallel:
            plan["attention_norm"] = SequenceParallel()
            plan["ffn_norm"] = SequenceParallel()
        parallelize_module(block, tp_mesh, plan)
