"""Loading a checkpoint into the components, every file checked against the manifest on the bytes read to load
it (reading.py), the ranks agreeing on what they found: either every rank loaded an intact checkpoint, or every
rank gets the same list of problems (and what was loaded must not be used). A checkpoint that does not fit this
run (another model or config) raises BessemerError on every rank.
"""

import contextlib
from pathlib import Path

from torch.distributed.checkpoint.api import CheckpointException

from bessemer.checkpoint.components import (ABSURD, SHARDED, Stateful, rank_file, read_state, reason, sharded,
                                            small_names, tensors, text)
from bessemer.checkpoint.local import STORAGE, load_sharded
from bessemer.checkpoint.manifest import check, read_manifest, step_problem
from bessemer.checkpoint.ranks import Ranks
from bessemer.checkpoint.reading import Damaged, VerifyingReader, read_verified
from bessemer.errors import BessemerError
from bessemer.dtensor import local


class NotHere(Exception):
    """A node-local checkpoint that cannot be loaded here: a node lacks its part, or another layout saved it."""


def load_dcp(path: Path, states: dict[str, Stateful], ranks: Ranks) -> list[str]:
    """A checkpoint in DCP's format, any layout's: rank 0 reads the manifest, every rank loads its shards with
    each file verified as it is read; files no rank needed are still checked, split over the ranks."""
    import torch.distributed.checkpoint as dcp

    head = None
    if ranks.rank == 0:
        try:
            manifest = read_manifest(path)
            head = (manifest["files"], manifest.get("checksum"), step_problem(path, manifest), None)
        except (ValueError, OSError) as e:
            head = (None, None, None, str(e))
    files, algo, step_wrong, error = ranks.from_rank0(head)
    if error or step_wrong:
        return [error or step_wrong]
    reader = VerifyingReader(path, files, algo)
    state, error, rel = None, None, rank_file(path, 0).name
    try:
        dcp.load(sharded(states), storage_reader=reader)
        # A rank that did not exist when the checkpoint was written (another layout) takes rank 0's small
        # state: the loader position and counters are layout-independent at step boundaries.
        own = rank_file(path, ranks.rank).name
        rel = own if own in files else rel
        state = read_state(reader.verified(rel), path / rel)
    except Damaged:
        pass  # in reader.problems
    except (Exception, CheckpointException) as e:  # noqa: BLE001 - another rank's Damaged, or incompatible
        error = text(e)
    everyone = ranks.everyone((sorted(reader.read), reader.problems, error))
    unread = sorted(set(files) - {rel for read, _, _ in everyone for rel in read})
    found = [p for _, problems, _ in everyone for p in problems]
    if unread:
        mine = check(path, files=unread[ranks.rank::ranks.world_size])
        found += [p for part in ranks.everyone(mine) for p in part]
    if found:
        return sorted(set(found))
    error = next((e for _, _, e in everyone if e), None)
    if error:
        raise BessemerError(f"cannot restore model and optimizer from {path} — was it written for another "
                            f"model or config? {error}")
    load_small(states, state, path / rel)
    return []


def load_local(path: Path, states: dict[str, Stateful], ranks: Ranks, meta: dict, node: int) -> list[str]:
    """A node-local checkpoint: each rank reads only its own file, from its own node's directory. Raises
    NotHere (on every rank) when some node lacks its part or another layout saved it."""
    why, manifest = None, None
    try:
        manifest = read_manifest(path)
        why = step_problem(path, manifest) or mismatch(manifest, meta, ranks.rank)
    except (ValueError, OSError) as e:
        why = f"node {node} lacks its part: {e}"
    reasons = [r for r in ranks.everyone(why) if r]
    if reasons:  # not on every node, or not this layout's: nothing read
        raise NotHere(reasons[0])
    payload, problem = None, None
    try:
        rel = rank_file(path, ranks.rank).name
        payload = read_state(read_verified(path, rel, manifest["files"], manifest["checksum"]), path / rel)
    except Damaged as e:
        problem = str(e)
    found = [p for p in ranks.everyone(problem) if p]
    if found:
        return found
    load_sharded(payload, sharded(states), path)
    load_small(states, payload["small"], path / rel)
    return []


def mismatch(manifest: dict, meta: dict, rank: int) -> str | None:
    """Why this rank cannot load the node-local part `manifest` describes, or None."""
    where = f"node {manifest.get('node')}"
    if manifest.get("storage") != STORAGE:
        return f"{where}: not a node-local checkpoint"
    if manifest.get("world_size") != meta["world_size"] or manifest.get("layout") != meta.get("layout"):
        return (f"saved by {manifest.get('world_size')} ranks as {manifest.get('layout')!r}, this run is "
                f"{meta['world_size']} as {meta.get('layout')!r}: a node-local checkpoint loads only into its layout")
    if rank not in manifest.get("ranks", []):
        return (f"{where}'s part holds ranks {manifest.get('ranks')}, not rank {rank} (node ranks changed since the "
                f"save)")
    return None


def load_small(states: dict[str, Stateful], state: dict, where: Path) -> None:
    names = small_names(states)
    missing = [name for name in names if name not in state]
    if missing:
        raise BessemerError(f"checkpoint {where} lacks {', '.join(missing)}: refusing a partial restore")
    for name in names:
        with restoring(where, name):
            states[name].load_state_dict(state[name])


@contextlib.contextmanager
def restoring(path: Path, what: str):
    """A checkpoint that does not fit this run (another model size or vocabulary) is a user error, not a
    traceback."""
    try:
        yield
    except BessemerError:
        raise
    except (Exception, CheckpointException) as e:
        raise BessemerError(f"cannot restore {what} from {path} — was it written for another model or "
                            f"config? {reason(e)}") from None


def problems(path: Path, ranks: Ranks) -> list[str]:
    """What is wrong with the files of checkpoint `path` (manifest, sizes, checksums), without loading it, the
    reading split over the ranks; every rank gets the same list."""
    head = None
    if ranks.rank == 0:
        try:
            head = (sorted(read_manifest(path)["files"]), None)
        except (ValueError, OSError) as e:
            head = (None, str(e))
    names, error = ranks.from_rank0(head)
    if error:
        return [error]
    try:
        found = check(path, files=names[ranks.rank::ranks.world_size])
    except (ValueError, OSError) as e:  # an unknown checksum algorithm, an unreadable file
        found = [f"{path}: {e}"]
    return sorted({p for part in ranks.everyone(found) for p in part})


def nonfinite(states: dict[str, Stateful], ranks: Ranks) -> str | None:
    """The first weight or optimizer tensor of this rank (after a load) holding NaN, inf or |x| > ABSURD —
    agreed over all ranks."""
    bad = None
    for name in SHARDED:
        if name not in states:
            continue
        for key, value in tensors(states[name].state_dict()):
            t = local(value)
            if t.is_floating_point() and t.numel() and not bool((t.abs() <= ABSURD).all()):  # NaN fails too
                bad = f"{name} {key}"
                break
        if bad:
            break
    return next((b for b in ranks.everyone(bad) if b), None)
