"""Staging for async saves: the model and optimizer copied to host memory, into buffers that live as long as the
run, while the next step computes.

`make_stager` builds what does the copy. DCP's default allocates fresh host buffers on every save (a page fault on
every page, unpinned on CUDA); this one keeps them from one save to the next (torch's DefaultStager caches a host
copy per storage), pinned on CUDA. The copy runs on a thread of its own (on CUDA: on a stream of its own, after
the work already queued on the training stream); `StagingWait` makes the next optimizer step — the first thing
that changes weights or moments — wait for the copy to finish, as torchtitan waits for staging before its
optimizer step. torch versions without DefaultStager (before 2.9) or without `async_stager` fall back to DCP's
default staging, synchronous.
"""

import inspect
import threading
import time
from concurrent.futures import Future, wait

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from bessemer.checkpoint.writer import HashingWriter


def make_stager(cuda: bool):
    """A stager whose host buffers are reused across saves (pinned, with non-blocking copies on a stream of its
    own, on CUDA) and whose copy runs on a thread of its own, or None where this torch lacks one (DCP then stages
    as it always did, synchronously)."""
    import torch.distributed.checkpoint as dcp

    try:
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
    except ImportError:
        return None
    if "async_stager" not in inspect.signature(dcp.async_save).parameters:
        return None

    class OrderedStager(DefaultStager):
        """DefaultStager whose copy begins once the training thread is done with the save (`begin`: until then
        the staging thread would only compete with it for the interpreter) and, on an accelerator, after the work
        queued on the training stream when the save began (the optimizer step that produced the weights: the
        training loop does not synchronize)."""

        def __init__(self, options: StagingOptions):
            super().__init__(options)
            self._begin = threading.Event()

        def stage(self, state_dict, **kwargs):
            kwargs["begin"] = self._begin = threading.Event()
            if self._staging_stream is not None:
                ready = torch.Event()
                ready.record(torch.accelerator.current_stream())
                kwargs["ready"] = (ready, torch.accelerator.current_device_index())
            return super().stage(state_dict, **kwargs)

        def begin(self) -> None:
            self._begin.set()

        def _stage(self, state_dict, begin=None, ready=None, **kwargs):
            if begin is not None:
                begin.wait()
            if ready is not None:  # on the staging thread: the training thread's device, after its queued work
                torch.accelerator.set_device_index(ready[1])
                self._staging_stream.wait_event(ready[0])
            return super()._stage(state_dict, **kwargs)

    return OrderedStager(StagingOptions(use_pinned_memory=cuda, use_shared_memory=False, use_async_staging=True,
                                        use_non_blocking_copy=cuda))


def async_save(state: dict, writer: HashingWriter, group, stager) -> tuple[Future | None, Future]:
    """Start DCP's async save of `state` (staged by `stager` where given); returns the future of the staging
    copy (None when it is already complete) and that of the write."""
    import torch.distributed.checkpoint as dcp

    extra = {"async_stager": stager} if stager is not None else {}
    response = dcp.async_save(state, storage_writer=writer, process_group=group, **extra)
    if hasattr(response, "upload_completion"):  # torch >= 2.9 answers with both futures
        return response.staging_completion, response.upload_completion
    return None, response


class StagingWait:
    """Holds the next optimizer step (any torch optimizer's, through a global step pre-hook) until the staging
    copy of the async save in flight is complete. For the last save: `waited_s`, how long steps waited for its
    copy; `copy_s`, how long after the save began the copy was complete."""

    def __init__(self):
        self._future: Future | None = None
        self._hook = None
        self.waited_s = 0.0
        self.copy_s: float | None = None

    def watch(self, future: Future | None, t0: float) -> None:
        self.waited_s = 0.0
        if future is None or future.done():
            self.copy_s = time.perf_counter() - t0
            return
        self.copy_s = None
        future.add_done_callback(lambda _: setattr(self, "copy_s", time.perf_counter() - t0))
        self._future = future
        if self._hook is None:
            self._hook = register_optimizer_step_pre_hook(lambda *_: self.wait())

    def wait(self) -> None:
        """Until the copy is complete (its failure is the write's to report: it fails the save)."""
        if self._future is None:
            return
        t0 = time.perf_counter()
        wait([self._future])
        self.waited_s += time.perf_counter() - t0
        self._future = None

    def release(self) -> None:
        """Wait, then drop the hook (not from inside it: torch iterates over the hooks while calling them)."""
        self.wait()
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
