"""The node-local format (a micro tier whose directory contains `{node}`): each rank saves its own shards of
the model and optimizer — DTensor.to_local(), no planning, nothing deduplicated across ranks — with its small
state in one file, so a node's directory holds everything its ranks need and a load reads nothing from
another node. The price: it loads only into the layout that saved it (world size, layout and every tensor's
global and local shape are checked); the macro tier, in DCP's format, reshards.

    <micro dir of node g>/step_00000050/
      rank00002.pt       {"sharded": {component: {key: local tensor or value}}, "shapes": ..., "small": ...}
      rank00003.pt
      manifest.json      step, "storage": "local", node, ranks, world size, layout, every file's size + checksum
"""

from pathlib import Path

import torch

from bessemer.checkpoint.writer import write_state
from bessemer.dtensor import local, shard_shape
from bessemer.errors import BessemerError

STORAGE = "local"


def save_rank(path: Path, sharded: dict, small: dict, algo: str) -> dict:
    """Write this rank's file (fsynced) and return its manifest entry {"size", algo}."""
    payload = {"sharded": {}, "shapes": {}, "small": small}
    for name, component in sharded.items():
        state = component.state_dict()
        payload["sharded"][name] = {k: local(v) if isinstance(v, torch.Tensor) else v for k, v in state.items()}
        payload["shapes"][name] = {k: shard_shape(v) for k, v in state.items() if isinstance(v, torch.Tensor)}
    return write_state(path, payload, algo)


def load_sharded(payload: dict, sharded: dict, path: Path) -> None:
    """Copy this rank's saved shards into the components' tensors, in place (as DCP does), then hand each
    component its state."""
    for name, component in sharded.items():
        saved, shapes = payload["sharded"].get(name), payload["shapes"].get(name, {})
        if saved is None:
            raise BessemerError(f"checkpoint {path} lacks {name}: refusing a partial restore")
        state = component.state_dict()
        missing = sorted(set(state) - set(saved))
        if missing:
            raise BessemerError(f"cannot restore {name} from {path}: it lacks {', '.join(missing[:5])}"
                                f"{' ...' if len(missing) > 5 else ''} — was it written for another model or config?")
        with torch.no_grad():
            for key, value in state.items():
                if not isinstance(value, torch.Tensor):
                    state[key] = saved[key]
                    continue
                if shapes.get(key) != shard_shape(value):
                    raise BessemerError(f"cannot restore {name} {key} from {path}: saved with shape "
                                        f"{shapes.get(key)}, this run has {shard_shape(value)} (global, local, "
                                        f"placements) — a node-local checkpoint loads only into its own layout")
                local(value).copy_(saved[key])
        component.load_state_dict(state)
