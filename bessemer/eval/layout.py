"""Scoring requests in a training layout: the (inputs, targets) requests of scoring.py laid out as rows of the
training shape (train.micro_batch x train.seq_len), spread over the data-parallel ranks, run through a forward
that the layout provides (one process, FSDP, TP, a pipeline schedule), and summed back per request.

A request's row is its inputs padded on the right to seq_len (the model is causal: padding after a position
cannot change it), its targets at the last len(targets) positions of its inputs and IGNORE elsewhere. A pass
of the data-parallel group is micro_batch rows per rank; the last pass is filled with rows that score nothing,
so every rank runs the same forwards (FSDP and the pipeline need that). The per-request sums stay on the device
until every pass is done: one all-reduce and one host read per call."""

from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F

from bessemer.errors import BessemerError

IGNORE = -100  # cross_entropy's ignore_index: a position that scores nothing

# forward(inputs (B, T), targets (B, T)) -> each row's summed negative log-likelihood (B,), float; None on a
# rank that does not hold the loss (a pipeline stage before the last).
Forward = Callable[[torch.Tensor, torch.Tensor], torch.Tensor | None]
Requests = Sequence[tuple[Sequence[int], Sequence[int]]]


def masked_nll(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Each row's summed cross-entropy over its scored positions, on fp32 logits: (B, T, vocab) -> (B,)."""
    per_token = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(0, 1), reduction="none",
                                ignore_index=IGNORE)  # (B*T,), 0 where ignored
    return per_token.view(targets.shape).sum(dim=1)


def request_rows(requests: Requests, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets), each (N, seq_len) int64, one row per request."""
    inputs = torch.zeros(len(requests), seq_len, dtype=torch.long)
    targets = torch.full((len(requests), seq_len), IGNORE, dtype=torch.long)
    for row, (inp, tgt) in enumerate(requests):
        n, c = len(inp), len(tgt)
        if not 0 < c <= n <= seq_len:
            raise BessemerError(f"request {row}: {n} input and {c} target tokens do not fit rows of {seq_len} "
                                f"tokens (need 0 < targets <= inputs <= {seq_len})")
        inputs[row, :n] = torch.tensor(inp)
        targets[row, n - c:n] = torch.tensor(tgt)
    return inputs, targets


class LayoutScorer:
    """Log-likelihood of each request's targets, computed in the training layout by `forward`.

    `holds`: whether this rank's sums count (one rank per data-parallel group: the last pipeline stage, tensor-
    parallel rank 0); the other ranks add zeros to the all-reduce."""

    def __init__(self, forward: Forward, seq_len: int, micro_batch: int, dp_rank: int, dp: int, holds: bool,
                 distributed: bool, device: torch.device):
        self.forward, self.seq_len, self.micro_batch = forward, seq_len, micro_batch
        self.dp_rank, self.dp, self.holds = dp_rank, dp, holds
        self.distributed, self.device = distributed, device

    def __call__(self, requests: Requests, on_batch: Callable[[int], None] | None = None) -> list[float]:
        if not requests:
            return []
        inputs, targets = request_rows(requests, self.seq_len)
        n, mb = len(requests), self.micro_batch
        per_pass = mb * self.dp
        passes = -(-n // per_pass)
        sums = torch.zeros(passes * per_pass, dtype=torch.float64, device=self.device)
        for p in range(passes):
            lo = p * per_pass + self.dp_rank * mb
            rows_in = torch.zeros(mb, self.seq_len, dtype=torch.long)
            rows_tgt = torch.full((mb, self.seq_len), IGNORE, dtype=torch.long)
            take = max(0, min(mb, n - lo))
            rows_in[:take], rows_tgt[:take] = inputs[lo:lo + take], targets[lo:lo + take]
            nll = self.forward(rows_in.to(self.device), rows_tgt.to(self.device))
            if nll is not None and self.holds:
                sums[lo:lo + mb] = nll.detach().to(torch.float64)
            if on_batch is not None:
                on_batch(min(per_pass, n - p * per_pass))
        if self.distributed:
            dist.all_reduce(sums, op=dist.ReduceOp.SUM)
        return (-sums[:n]).tolist()
