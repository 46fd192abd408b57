"""The precision policy: which dtype each module keeps its parameters in, computes in and reduces gradients
in, and which FP8 recipe its Linear layers use — resolved per module name from `precision.rules`.

Two mechanisms carry it out, chosen by how the parameters are held:
- sharded by FSDP2: a `MixedPrecisionPolicy` per FSDP unit (each block, the embedding, the head, the root); a
  module computes in its unit's parameter dtype. Only an explicit `param` or `reduce` rule that differs from
  the unit's makes a submodule its own unit (two more collectives per step each). Norms are not split off:
  the default `*norm: compute=fp32` is honoured by RMSNorm itself, which normalises in fp32 whatever its
  input (model/llama.py), while its weight stays in the unit's dtype, as torchtitan does;
- otherwise (one process, TP or PP alone): fp32 parameters under `torch.autocast`, with a module whose
  compute dtype differs running under its own autocast setting.
Parameters and optimizer states stay fp32 in both ("master weights").
"""

import contextlib
import logging
from dataclasses import dataclass

import torch
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy
from torch.utils._python_dispatch import TorchDispatchMode

from bessemer.config import PrecisionConfig
from bessemer.config.precision_rules import ModulePrecision, parse_rules, resolve

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class PrecisionPolicy:
    cfg: PrecisionConfig

    def __post_init__(self):
        self.rules = parse_rules(self.cfg.rules)
        self.dtype = DTYPES[self.cfg.dtype]
        self.base = ModulePrecision(self.cfg.dtype, self.cfg.dtype, self.cfg.reduce_dtype,
                                    self.cfg.fp8.recipe if self.cfg.fp8.enabled else None)

    def of(self, name: str) -> ModulePrecision:
        return resolve(name, self.rules, self.base)

    @property
    def mixed(self) -> bool:
        return self.dtype != torch.float32

    # ------------------------------------------------------------------------------------------- FSDP2

    def mp_policy(self, name: str, output_dtype: torch.dtype | None = None) -> MixedPrecisionPolicy:
        p = self.of(name)
        return MixedPrecisionPolicy(param_dtype=DTYPES[p.param], reduce_dtype=DTYPES[p.reduce],
                                    output_dtype=output_dtype)

    def fsdp_islands(self, unit: nn.Module, unit_name: str,
                     skip: str | None = None) -> list[tuple[nn.Module, MixedPrecisionPolicy]]:
        """Submodules of an FSDP unit whose parameter or reduce dtype a rule sets apart from the unit's: each
        becomes its own FSDP unit, computing in its dtype and handing the unit's dtype on. The `compute` key
        never splits a unit (the default norm rule sets only that). `skip`: a child already sharded as its
        own unit (the root skips `layers`)."""
        outer = self.of(unit_name)
        out = []
        for sub_name, sub in unit.named_modules():
            if not sub_name or not any(True for _ in sub.parameters(recurse=False)):
                continue
            if skip and (sub_name == skip or sub_name.startswith(skip + ".")):
                continue
            name = f"{unit_name}.{sub_name}" if unit_name else sub_name
            inner = self.of(name)
            if (inner.param, inner.reduce) != (outer.param, outer.reduce):
                out.append((sub, self.mp_policy(name, output_dtype=DTYPES[outer.param])))
        return out

    # --------------------------------------------------------------------------------------- autocast

    def autocast(self, device_type: str) -> contextlib.AbstractContextManager:
        if not self.mixed:
            return contextlib.nullcontext()
        return torch.autocast(device_type, dtype=self.dtype)

    def apply_autocast_islands(self, model: nn.Module) -> list[str]:
        """Modules whose compute dtype differs from the run's get their own autocast setting (fp32 = autocast
        off, inputs upcast). Returns their names."""
        names = []
        for name, module in model.named_modules():
            want = self.of(name).compute
            parent = self.of(name.rpartition(".")[0]).compute if name else self.cfg.dtype
            if name and want != parent:
                module.__class__ = _island_class(type(module), DTYPES[want])
                names.append(name)
        return names


_ISLANDS: dict[tuple[type, torch.dtype], type] = {}


def _island_class(cls: type, dtype: torch.dtype) -> type:
    """`cls` with its forward run in `dtype`: one subclass per (module class, dtype), swapped in as the
    module's class (FSDP2 swaps classes the same way; names and state dicts are unchanged). Every block's norm
    then has the same type and the same forward, so a compiled block guards on the type, and one graph serves
    all blocks: a wrapper object per module made each block a recompilation, and 9 blocks or more passed
    dynamo's recompile limit of 8."""
    island = _ISLANDS.get((cls, dtype))
    if island is None:
        def forward(self, *args, **kwargs):
            return _run_in(super(island, self).forward, dtype, *args, **kwargs)

        island = type(f"{cls.__name__}In{str(dtype).removeprefix('torch.').capitalize()}", (cls,),
                      {"forward": forward, "__module__": cls.__module__})
        _ISLANDS[(cls, dtype)] = island
    return island


def _run_in(forward, dtype: torch.dtype, *args, **kwargs):
    device_type = next((a.device.type for a in args if isinstance(a, torch.Tensor)), "cpu")
    if dtype == torch.float32:
        args = tuple(a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)
        with torch.autocast(device_type, enabled=False):
            return forward(*args, **kwargs)
    with torch.autocast(device_type, dtype=dtype):
        return forward(*args, **kwargs)


class Fp16MatmulEmulation(TorchDispatchMode):
    """fp16 matrix products computed as a GPU tensor core does them — fp16 operands, fp32 accumulation, the
    result rounded to fp16 (so overflow to inf and underflow to 0 happen as on the GPU) — but through fp32
    kernels. CPUs have no fast fp16 GEMM (about 50x slower than fp32 here); on CPU, fp16 runs use this."""

    OPS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
           torch.ops.aten.baddbmm.default}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.OPS and any(isinstance(a, torch.Tensor) and a.dtype == torch.float16 for a in args):
            up = [a.float() if isinstance(a, torch.Tensor) and a.dtype == torch.float16 else a for a in args]
            return func(*up, **kwargs).half()
        return func(*args, **kwargs)


def compute_context(policy: PrecisionPolicy, device: torch.device, autocast: bool) -> contextlib.ExitStack:
    """The context forward and backward run in: autocast where parameters are not cast by FSDP2, and fp16
    GEMM emulation on CPU."""
    stack = contextlib.ExitStack()
    if autocast:
        stack.enter_context(policy.autocast(device.type))
    if policy.dtype == torch.float16 and device.type == "cpu":
        stack.enter_context(Fp16MatmulEmulation())
    return stack


def quiet_torchao() -> None:
    """torchao logs at import that its CUDA-only kernels (MX, CUTLASS) failed to load; irrelevant here."""
    logging.getLogger("torchao").setLevel(logging.ERROR)
