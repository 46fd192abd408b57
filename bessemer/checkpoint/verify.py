"""`bessemer ckpt verify`: is a checkpoint whole, consistent and sane — without a process group.

1. the manifest and every file's size and checksum (manifest.check);
2. every component is there: model and optimizer in the sharded files, the small states in each rank's file;
3. every rank's counters are at the manifest's step;
4. no NaN, inf or absurd magnitude (|x| > 1e10) in weights or optimizer moments — a moment corrupted in
   memory before the save has a perfect checksum and still sends the loss back to its start after a resume.
"""

from pathlib import Path

import torch

from torch.distributed.checkpoint.api import CheckpointException

from bessemer.checkpoint.components import ABSURD, SHARDED, rank_file, reason, tensors
from bessemer.checkpoint.manifest import check, read_manifest

MAX_LINES_PER_KIND = 5


def _bad_values(name: str, state: dict) -> list[str]:
    out = []
    for key, t in tensors(state):
        if not t.is_floating_point() or not t.numel():
            continue
        nan, inf = int(torch.isnan(t).sum()), int(torch.isinf(t).sum())
        big = int((t.abs() > ABSURD).sum()) - inf
        if nan or inf or big:
            what = ", ".join(f"{n} {label}" for n, label in ((nan, "NaN"), (inf, "inf"), (big, f"|x| > {ABSURD:g}"))
                             if n)
            out.append(f"{name} {key}: {what}")
    if len(out) > MAX_LINES_PER_KIND:
        out = out[:MAX_LINES_PER_KIND] + [f"{name}: ... and {len(out) - MAX_LINES_PER_KIND} more tensors"]
    return out


def verify(path: Path) -> list[str]:
    """Every problem found in the checkpoint at `path`, one line each; empty when it is sound."""
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys

    path = Path(path)
    if not path.is_dir():
        return [f"{path}: not a directory"]
    problems = check(path)
    try:
        manifest = read_manifest(path)
    except ValueError:
        return problems
    if problems:  # damaged files: reading them would only add noise
        return problems
    step, components = manifest["step"], manifest.get("components", [])
    for name in SHARDED:
        if name not in components:
            continue
        try:
            state = _load_state_dict_from_keys({name}, checkpoint_id=str(path))
        except (Exception, CheckpointException) as e:  # noqa: BLE001 - anything DCP raises: unreadable
            problems.append(f"{path}: cannot read {name}: {reason(e)}")
            continue
        if not state.get(name):
            problems.append(f"{path}: no {name} in the sharded files")
            continue
        problems += _bad_values(name, state[name])
    small = [c for c in components if c not in SHARDED]
    for rank in range(int(manifest.get("world_size", 1))):
        f = rank_file(path, rank)
        try:
            state = torch.load(f, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001
            problems.append(f"{f}: unreadable ({e})")
            continue
        missing = [c for c in small if c not in state]
        if missing:
            problems.append(f"{f}: lacks {', '.join(missing)}")
        counters = state.get("train_state", {})
        if "step" in counters and int(counters["step"]) != step:
            problems.append(f"{f}: train_state.step {int(counters['step'])}, manifest step {step} (mixed checkpoints)")
    return problems
