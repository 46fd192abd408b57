"""The training data loader: packs the token stream into sequences, draws them in a seeded order, and gives
each data-parallel rank its part.

Packing: the stream (documents with EOS between them, see shards.py) is cut into n = stream_len // (seq_len+1)
sequences of seq_len+1 tokens, back to back; inputs are sequence[:-1] and targets sequence[1:]. A document
longer than a sequence continues in the next one; a sequence may hold the ends and starts of several
documents. The last stream_len mod (seq_len+1) tokens of the stream are not trained on (less than one
sequence); a stream shorter than one sequence is read with wrap-around as the one sequence.

Order: epoch e visits every sequence once, in the permutation order.permute(., n, seed, e) — a different
order each epoch, reproducible from (seed, epoch) alone.

Sharding: an optimizer step consumes `global_batch` consecutive draws. Data-parallel rank r of W takes draws
[r*G/W, (r+1)*G/W) of the step, in micro-batches. The sequences of a step are therefore the same whatever
the number of ranks, and the position — (epoch, draws of the epoch) at the start of the step plus the
micro-batch within it — is exact, O(1) in size, and layout-independent at step boundaries.
"""

import numpy as np
import torch

from bessemer.tokens.order import permute
from bessemer.tokens.shards import TokenDataset
from bessemer.errors import BessemerError


class TokenLoader:
    def __init__(self, dataset: TokenDataset, seq_len: int, global_batch: int, micro_batch: int,
                 dp_rank: int = 0, dp_world: int = 1, seed: int = 0):
        per_rank = micro_batch * dp_world
        # TrainConfig.check_data_parallel gives users this message; here it is an internal invariant.
        assert global_batch % per_rank == 0, f"global batch {global_batch} not a multiple of {per_rank}"
        assert 0 <= dp_rank < dp_world, f"dp_rank {dp_rank} outside [0, {dp_world})"
        self.dataset = dataset
        self.seq_len, self.global_batch, self.micro_batch = seq_len, global_batch, micro_batch
        self.dp_rank, self.dp_world, self.seed = dp_rank, dp_world, seed
        self.accum_steps = global_batch // per_rank
        self.num_sequences = max(1, dataset.stream_len // self.sample_len)  # per epoch
        self.epochs_done = 0  # epoch of the current step's first draw
        self.position = 0  # draws of that epoch made before the current step
        self.micro = 0  # micro-batches of the current step already handed out on this rank

    @property
    def sample_len(self) -> int:
        return self.seq_len + 1

    def sample_range(self) -> tuple[int, int]:
        """Index (within the step) of the first sample of the next micro-batch, and how many."""
        first = self.dp_rank * (self.global_batch // self.dp_world) + self.micro * self.micro_batch
        return first, self.micro_batch

    def sequences(self, first: int, count: int) -> np.ndarray:
        """Indices of the sequences drawn at positions first..first+count-1 of the current step (int64)."""
        draws = self.epochs_done * self.num_sequences + self.position + first + np.arange(count)
        epochs, positions = np.divmod(draws, self.num_sequences)
        out = np.empty(count, dtype=np.int64)
        for e in np.unique(epochs):  # a step may straddle an epoch boundary
            sel = epochs == e
            out[sel] = permute(positions[sel], self.num_sequences, self.seed, int(e))
        return out

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next micro-batch: inputs and targets, both (micro_batch, seq_len) int64."""
        first, n = self.sample_range()
        rows = [self.dataset.read(int(s) * self.sample_len, self.sample_len) for s in self.sequences(first, n)]
        buf = torch.from_numpy(np.stack(rows))  # (mb, T+1)
        self.micro += 1
        if self.micro == self.accum_steps:
            self.epochs_done, self.position = divmod(self.epochs_done * self.num_sequences + self.position
                                                     + self.global_batch, self.num_sequences)
            self.micro = 0
        return buf[:, :-1].contiguous(), buf[:, 1:].contiguous()

    @property
    def epoch(self) -> float:
        """Passes over the data so far (fractional)."""
        return self.epochs_done + self.position / self.num_sequences

    def state_dict(self) -> dict:
        return {"epoch": self.epochs_done, "position": self.position, "micro": self.micro,
                "stream_len": self.dataset.stream_len, "sample_len": self.sample_len, "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        if state["stream_len"] != self.dataset.stream_len:
            raise BessemerError(f"the checkpoint's data position was recorded on a stream of {state['stream_len']} "
                                f"tokens, but {self.dataset.path} holds {self.dataset.stream_len}: not the same data")
        # Checkpoints are taken between steps (micro == 0); a mid-step position only holds under the same layout.
        assert state["micro"] < self.accum_steps, f"micro {state['micro']} >= accumulation steps {self.accum_steps}"
        if "position" in state:
            old_len = int(state["sample_len"])
            draws = int(state["epoch"]) * max(1, self.dataset.stream_len // old_len) + int(state["position"])
            if old_len != self.sample_len:  # another seq_len: continue after as many tokens
                draws = draws * old_len // self.sample_len
        else:  # saved by the sequential loader of earlier versions: continue after as many sequences
            draws = int(state["tokens"]) // self.sample_len
        # Another run.seed continues at the same (epoch, position) of its own order.
        self.epochs_done, self.position = divmod(draws, self.num_sequences)
        self.micro = int(state["micro"])
