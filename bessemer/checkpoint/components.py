"""What a checkpoint holds: the registry of Stateful components the trainer hands over, split into the sharded
ones (model and optimizer, written through torch.distributed.checkpoint so another layout can load them) and
each rank's small state (loss scaler, loader position, RNG, counters, LR schedule: one file per rank)."""

import io
from pathlib import Path
from typing import Protocol

import torch
from torch import nn

from bessemer.errors import BessemerError

SHARDED = ("model", "optimizer")
ABSURD = 1e10  # |x| above this in weights or optimizer moments: a checkpoint not worth resuming from


class Stateful(Protocol):
    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class ModelParts:
    """The model parts of this rank (one, or one per pipeline stage) as one Stateful keyed by parameter name."""

    def __init__(self, parts: list[nn.Module]):
        self.parts = parts

    def state_dict(self) -> dict:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        return {k: v for part in self.parts for k, v in get_model_state_dict(part).items()}

    def load_state_dict(self, state: dict) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        for part in self.parts:
            missing = set_model_state_dict(part, state, options=StateDictOptions(strict=False)).missing_keys
            if missing:
                raise BessemerError(f"checkpoint lacks model weights {', '.join(sorted(missing)[:5])}"
                                    f"{' ...' if len(missing) > 5 else ''}")


def sharded(states: dict[str, Stateful]) -> dict[str, Stateful]:
    return {k: states[k] for k in SHARDED if k in states}


def small_names(states: dict[str, Stateful]) -> list[str]:
    return [k for k in states if k not in SHARDED]


def rank_file(path: Path, rank: int) -> Path:
    return path / f"rank{rank:05d}.pt"


def read_state(data: bytes, path: Path) -> dict:
    """A rank file's verified bytes, unpickled (tensors and plain data only)."""
    try:
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as e:  # verified bytes that still do not unpickle: say which file, not a pickle traceback
        raise BessemerError(f"cannot read checkpoint {path}: {e}") from None


def tensors(state, prefix: str = ""):
    """(dotted key, tensor) for every tensor in a nested state dict."""
    if isinstance(state, torch.Tensor):
        yield prefix, state
    elif isinstance(state, dict):
        for k, v in state.items():
            yield from tensors(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(state, (list, tuple)):
        for i, v in enumerate(state):
            yield from tensors(v, f"{prefix}.{i}")


def reason(error: BaseException) -> str:
    """One line for an alert: DCP's exceptions carry each rank's whole traceback; its last line is the cause."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if len(lines) > 1 else f"{type(error).__name__}: {error}"


def text(error: BaseException | None) -> str | None:
    return None if error is None else reason(error)
