"""The training data loader: packs the token stream into sequences and gives each data-parallel rank its part.

Packing: the stream (documents with EOS between them, see shards.py) is cut into samples of seq_len+1
tokens, back to back; inputs are sample[:-1] and targets sample[1:]. A document longer than a sample
continues in the next one; a sample may hold the ends and starts of several documents.

Sharding: an optimizer step consumes `global_batch` consecutive samples from the stream position `tokens`.
Data-parallel rank r of W takes samples [r*G/W, (r+1)*G/W) of the step, in micro-batches. The samples of a
step are therefore the same whatever the number of ranks, and the position — the stream offset at the
start of the step plus the micro-batch within it — is exact, and layout-independent at step boundaries.
"""

import torch

from bessemer.dataset.shards import TokenDataset
from bessemer.errors import BessemerError


class TokenLoader:
    def __init__(self, dataset: TokenDataset, seq_len: int, global_batch: int, micro_batch: int,
                 dp_rank: int = 0, dp_world: int = 1):
        per_rank = micro_batch * dp_world
        # TrainConfig.check_data_parallel gives users this message; here it is an internal invariant.
        assert global_batch % per_rank == 0, f"global batch {global_batch} not a multiple of {per_rank}"
        assert 0 <= dp_rank < dp_world, f"dp_rank {dp_rank} outside [0, {dp_world})"
        self.dataset = dataset
        self.seq_len, self.global_batch, self.micro_batch = seq_len, global_batch, micro_batch
        self.dp_rank, self.dp_world = dp_rank, dp_world
        self.accum_steps = global_batch // per_rank
        self.tokens = 0  # stream offset where the current step's samples begin
        self.micro = 0  # micro-batches of the current step already handed out on this rank

    @property
    def sample_len(self) -> int:
        return self.seq_len + 1

    def sample_range(self) -> tuple[int, int]:
        """Index (within the step) of the first sample of the next micro-batch, and how many."""
        first = self.dp_rank * (self.global_batch // self.dp_world) + self.micro * self.micro_batch
        return first, self.micro_batch

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next micro-batch: inputs and targets, both (micro_batch, seq_len) int64."""
        first, n = self.sample_range()
        buf = self.dataset.read(self.tokens + first * self.sample_len, n * self.sample_len)
        buf = torch.from_numpy(buf).view(n, self.sample_len)  # (mb, T+1)
        self.micro += 1
        if self.micro == self.accum_steps:
            self.tokens += self.global_batch * self.sample_len
            self.micro = 0
        return buf[:, :-1].contiguous(), buf[:, 1:].contiguous()

    @property
    def epoch(self) -> float:
        return self.tokens / self.dataset.stream_len

    def state_dict(self) -> dict:
        return {"tokens": self.tokens, "micro": self.micro, "stream_len": self.dataset.stream_len}

    def load_state_dict(self, state: dict) -> None:
        if state["stream_len"] != self.dataset.stream_len:
            raise BessemerError(f"the checkpoint's data position was recorded on a stream of {state['stream_len']} "
                                f"tokens, but {self.dataset.path} holds {self.dataset.stream_len}: not the same data")
        # Checkpoints are taken between steps (micro == 0); a mid-step position only holds under the same layout.
        assert state["micro"] < self.accum_steps, f"micro {state['micro']} >= accumulation steps {self.accum_steps}"
        self.tokens, self.micro = int(state["tokens"]), int(state["micro"])
