"""How the ranks agree on a save's outcome or a load's problems: small object collectives, and a wait on work
that only rank 0 does without any rank sitting in one collective for as long as that work takes.

On CPU tensors, gloo carries them (also next to NCCL: the process groups are `cuda:nccl,cpu:gloo`).
"""

import threading
from collections.abc import Callable

import torch
import torch.distributed as dist

from bessemer.checkpoint.components import reason
from bessemer.errors import BessemerError

POLL_S = 1.0  # while rank 0 restores from the cold tier, the others ask every POLL_S whether it is done


class Ranks:
    """This rank's place (`rank` of `world_size`); every method is a collective when the job is distributed
    and a plain answer in one process."""

    def __init__(self, rank: int = 0, world_size: int = 1):
        self.rank, self.world_size = rank, world_size
        self.distributed = world_size > 1 and dist.is_initialized()

    def any(self, flag: bool) -> bool:
        """Whether any rank raised `flag`."""
        if not self.distributed:
            return flag
        t = torch.tensor([int(flag)])
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def everyone(self, obj, group=None) -> list:
        """Every rank's `obj`, in rank order, on every rank."""
        if not self.distributed:
            return [obj]
        out = [None] * self.world_size
        dist.all_gather_object(out, obj, group=group)
        return out

    def from_rank0(self, obj):
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def on_rank0(self, work: Callable[[], object]) -> tuple[object, str | None]:
        """Run `work` on a thread of rank 0; the other ranks ask every POLL_S whether it is done, so none of
        them sits in one collective for as long as the work takes (a cold restore can take an hour). Returns
        (result, error message) on every rank."""
        box, done = [None, None], threading.Event()

        def run() -> None:
            try:
                box[0] = work()
            except Exception as e:  # noqa: BLE001 - a tampered object, a wrong key, storage errors: all ranks hear
                box[1] = str(e) if isinstance(e, BessemerError) else reason(e)
            finally:
                done.set()

        if self.rank == 0:
            threading.Thread(target=run, name="cold-restore", daemon=True).start()
        if self.distributed:
            flag = torch.zeros(1)
            while not flag.item():
                if self.rank == 0:
                    flag[0] = float(done.wait(POLL_S))
                dist.broadcast(flag, src=0)
        else:
            done.wait()
        result, error = self.from_rank0((box[0], box[1]) if self.rank == 0 else None)
        return result, error
