"""The domain-mixture loader: every global batch holds each domain's share of sequences within a tolerance.

Streams. Domain d's documents, from every shard of every dataset (data.path, then data.paths, in order),
form its own stream doc EOS doc EOS ..., cut into n_d = stream_len // (seq_len+1) sequences (at least one;
a stream shorter than a sequence is read with wrap-around). The domain draws its sequences epoch by epoch,
each epoch in its own seeded permutation (order.py, keyed by run.seed, the epoch and the domain's name): a
domain the mixture asks for more often than its size allows starts another epoch (is upsampled); its epoch
counter says how many times.

Batches. Global batch k holds n_d sequences of domain d (composition.py: floor or ceiling of G w_d, with the
rounding error carried so the long-run share is exactly w_d), so a sequence is domain-pure and token shares
equal sequence shares. Their order interleaves the domains (seeded by run.seed and k). Every rank computes
the same composition; data-parallel rank r of W takes sequences [r G/W, (r+1) G/W) of it, in micro-batches
— like TokenLoader.

State (Stateful): the step, the micro-batch within it, each domain's (epoch, position in the epoch), the
carried rounding error and the current weights (after the schedule and reweighting). A batch is a function
of the state at the start of its step, so a resumed run — also mid-step under the same layout — gives the
same batches.
"""

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from bessemer.config import DataConfig
from bessemer.config.mixture import normalized, parse_schedule
from bessemer.tokens.composition import compose, interleave, reweight
from bessemer.tokens.loader import TokenLoader
from bessemer.tokens.order import permute, stream_tag
from bessemer.tokens.shards import TokenDataset
from bessemer.errors import BessemerError


class DomainStream:
    """One domain's documents across datasets and shards, as doc EOS doc EOS ... with wrap-around."""

    def __init__(self, name: str, datasets: list[TokenDataset]):
        self.name = name
        self.sources, shard_of, starts, lengths = [], [], [], []
        for ds in datasets:
            if name not in ds.domains:
                continue
            label = ds.domains.index(name)
            for shard in ds.shards:
                docs = np.flatnonzero(shard.domains == label)
                if docs.size:
                    shard_of.append(np.full(docs.size, len(self.sources), dtype=np.int64))
                    starts.append(shard.offsets[docs])
                    lengths.append(shard.offsets[docs + 1] - shard.offsets[docs])
                    self.sources.append(shard.tokens)
        if not self.sources:
            raise BessemerError(f"domain {name!r} has no documents in {', '.join(str(d.path) for d in datasets)}")
        self.eos_id = datasets[0].eos_id
        self.shard_of, self.starts, self.lengths = (np.concatenate(a) for a in (shard_of, starts, lengths))
        # Stream position where each document begins; document k is followed by its EOS.
        self.doc_pos = np.concatenate([[0], np.cumsum(self.lengths + 1)])

    @property
    def num_docs(self) -> int:
        return int(self.lengths.size)

    @property
    def stream_len(self) -> int:
        return int(self.doc_pos[-1])

    def read(self, start: int, length: int) -> np.ndarray:
        """`length` tokens of this domain's stream from `start`, wrapping around at its end."""
        out = np.empty(length, dtype=np.int64)
        filled = 0
        while filled < length:
            pos = (start + filled) % self.stream_len
            k = int(np.searchsorted(self.doc_pos, pos, side="right")) - 1
            within, size = pos - int(self.doc_pos[k]), int(self.lengths[k])
            if within == size:  # the document's EOS
                out[filled] = self.eos_id
                filled += 1
                continue
            n = min(length - filled, size - within)
            a = int(self.starts[k]) + within
            out[filled:filled + n] = self.sources[self.shard_of[k]][a:a + n]
            filled += n
        return out


@dataclass
class _Plan:
    """One global batch: sequences per domain, each position's domain and stream offset, the lag after it."""
    counts: list[int]
    order: np.ndarray  # (G,) domain index per position
    starts: np.ndarray  # (G,) offset in that domain's stream
    lag: list[float]
    weights: list[float]


class MixtureLoader:
    """TokenLoader's interface (next_batch, accum_steps, epoch, state_dict) over a domain mixture; see above."""

    def __init__(self, datasets: list[TokenDataset], cfg: DataConfig, seq_len: int, global_batch: int,
                 micro_batch: int, dp_rank: int = 0, dp_world: int = 1, seed: int = 0):
        per_rank = micro_batch * dp_world
        assert global_batch % per_rank == 0, f"global batch {global_batch} not a multiple of {per_rank}"
        assert 0 <= dp_rank < dp_world, f"dp_rank {dp_rank} outside [0, {dp_world})"
        self.domains = list(cfg.domains)
        assert self.domains, "MixtureLoader needs data.domains"
        _check_datasets(datasets, self.domains)
        self.datasets, self.cfg, self.seed = datasets, cfg, seed
        self.seq_len, self.global_batch, self.micro_batch = seq_len, global_batch, micro_batch
        self.dp_rank, self.dp_world = dp_rank, dp_world
        self.accum_steps = global_batch // per_rank
        self.streams = [DomainStream(name, datasets) for name in self.domains]
        self.base = normalized(list(cfg.domains.values()))
        self.schedule = {step: normalized(list(w.values())) for step, w in parse_schedule(cfg.weight_schedule,
                                                                                           self.domains)}
        self.step = 0  # global batches completed
        self.micro = 0  # micro-batches of the current step already handed out on this rank
        self.num_sequences = [max(1, st.stream_len // self.sample_len) for st in self.streams]  # per epoch
        self.drawn = [0] * len(self.domains)  # sequences each domain has given so far, over all epochs
        self.lag = [0.0] * len(self.domains)
        self.weights = list(self.base)
        self.last_domains = torch.zeros(0, dtype=torch.int64)  # domain index per sample of the last micro-batch
        self.last_step: dict[str, dict[str, float]] = {}  # metrics of the last completed step
        self._plan: _Plan | None = None

    @property
    def sample_len(self) -> int:
        return self.seq_len + 1

    def plan(self) -> _Plan:
        """The composition of the current step: a function of the state at the step's start."""
        if self._plan is None:
            weights = self.schedule.get(self.step, self.weights)
            counts, lag = compose(weights, self.global_batch, self.lag)
            order = interleave(counts, self.seed, self.step)
            starts = np.empty(self.global_batch, dtype=np.int64)
            for d, n in enumerate(counts):
                epochs, positions = np.divmod(self.drawn[d] + np.arange(n), self.num_sequences[d])
                seqs = np.empty(n, dtype=np.int64)
                for e in np.unique(epochs):
                    sel = epochs == e
                    seqs[sel] = permute(positions[sel], self.num_sequences[d], self.seed, int(e),
                                        stream_tag(self.domains[d]))
                starts[order == d] = seqs * self.sample_len
            self._plan = _Plan(counts, order, starts, lag, list(weights))
        return self._plan

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next micro-batch: inputs and targets, both (micro_batch, seq_len) int64; `last_domains` says
        each sample's domain."""
        plan = self.plan()
        first = self.dp_rank * (self.global_batch // self.dp_world) + self.micro * self.micro_batch
        rows = range(first, first + self.micro_batch)
        buf = np.stack([self.streams[plan.order[i]].read(int(plan.starts[i]), self.sample_len) for i in rows])
        buf = torch.from_numpy(buf)  # (mb, T+1)
        self.last_domains = torch.from_numpy(plan.order[first:first + self.micro_batch].copy())
        self.micro += 1
        if self.micro == self.accum_steps:
            self._finish_step(plan)
        return buf[:, :-1].contiguous(), buf[:, 1:].contiguous()

    def _finish_step(self, plan: _Plan) -> None:
        for d, n in enumerate(plan.counts):
            self.drawn[d] += n
        self.lag, self.weights = plan.lag, plan.weights
        self.last_step = {
            "domain_tokens_share": {name: round(n / self.global_batch, 6) for name, n in zip(self.domains,
                                                                                             plan.counts)},
            "domain_weights": {name: round(w, 6) for name, w in zip(self.domains, plan.weights)},
            "domain_epochs": self.domain_epochs()}
        self.step += 1
        self.micro = 0
        self._plan = None

    def update_losses(self, losses: dict[str, float]) -> None:
        """Per-domain mean loss of the step just done (the same on every rank): with data.reweight = loss the
        next step's weights move toward the domains with the higher loss."""
        if self.cfg.reweight != "loss":
            return
        assert self.micro == 0, "update_losses between steps only"
        index = {name: d for d, name in enumerate(self.domains)}
        self.weights = reweight(self.weights, {index[k]: v for k, v in losses.items()}, self.cfg.reweight_eta,
                                self.cfg.reweight_min)

    def step_metrics(self) -> dict[str, dict[str, float]]:
        """The last completed step's token share, weights and epochs per domain (for metrics.jsonl)."""
        return self.last_step

    def domain_epochs(self) -> dict[str, float]:
        """Passes over each domain's stream so far; above 1, the domain has been upsampled (repeated)."""
        return {name: round(k / n, 4) for name, k, n in zip(self.domains, self.drawn, self.num_sequences)}

    @property
    def epoch(self) -> float:
        return sum(self.drawn) / sum(self.num_sequences)

    def state_dict(self) -> dict:
        names = self.domains
        epochs = [divmod(k, n) for k, n in zip(self.drawn, self.num_sequences)]
        return {"step": self.step, "micro": self.micro, "epochs": {n: e for n, (e, _) in zip(names, epochs)},
                "positions": {n: p for n, (_, p) in zip(names, epochs)}, "sample_len": self.sample_len,
                "lag": dict(zip(names, self.lag)), "weights": dict(zip(names, self.weights)),
                "stream_lens": {s.name: s.stream_len for s in self.streams},
                "configured": {"domains": dict(zip(names, self.base)), "schedule": list(self.cfg.weight_schedule)}}

    def load_state_dict(self, state: dict) -> None:
        if "positions" not in state and "offsets" not in state:
            raise BessemerError("the checkpoint's data position is a single stream's (no data.domains when it was "
                                "saved); a domain mixture cannot continue from it")
        saved = list(state.get("positions", state.get("offsets")))
        if saved != self.domains:
            raise BessemerError(f"the checkpoint's mixture has domains {', '.join(saved)}; data.domains "
                                f"now has {', '.join(self.domains)}")
        lens = {s.name: s.stream_len for s in self.streams}
        if state["stream_lens"] != lens:
            raise BessemerError(f"the checkpoint's domain streams hold {state['stream_lens']} tokens, the data now "
                                f"{lens}: not the same data")
        assert state["micro"] < self.accum_steps, f"micro {state['micro']} >= accumulation steps {self.accum_steps}"
        self.step, self.micro = int(state["step"]), int(state["micro"])
        if "positions" in state:
            # Another seq_len continues after as many tokens of each domain.
            old_len = int(state["sample_len"])
            self.drawn = [(int(state["epochs"][n]) * max(1, st.stream_len // old_len) + int(state["positions"][n]))
                          * old_len // self.sample_len for n, st in zip(self.domains, self.streams)]
        else:  # saved by the sequential mixture of earlier versions: token offsets into each domain's stream
            self.drawn = [int(state["offsets"][n]) // self.sample_len for n in self.domains]
        configured = {"domains": dict(zip(self.domains, self.base)), "schedule": list(self.cfg.weight_schedule)}
        if state["configured"] == configured:
            self.lag = [float(state["lag"][n]) for n in self.domains]
            self.weights = [float(state["weights"][n]) for n in self.domains]
        else:  # the user changed the mixture: its weights at this step take over, with a fresh rounding error
            self.lag = [0.0] * len(self.domains)
            self.weights = next((w for s, w in sorted(self.schedule.items(), reverse=True) if s <= self.step),
                                self.base)
        self._plan = None


def _check_datasets(datasets: list[TokenDataset], names: list[str]) -> None:
    first = datasets[0]
    for ds in datasets[1:]:
        if (ds.vocab_size, ds.eos_id) != (first.vocab_size, first.eos_id):
            raise BessemerError(f"{ds.path} (vocabulary {ds.vocab_size}, EOS {ds.eos_id}) does not match {first.path} "
                                f"(vocabulary {first.vocab_size}, EOS {first.eos_id}): one tokenizer for all "
                                f"data.paths")
    known = list(dict.fromkeys(d for ds in datasets for d in ds.domains))
    unknown = [n for n in names if n not in known]
    if unknown:
        where = ", ".join(str(ds.path) for ds in datasets)
        raise BessemerError(f"data.domains: unknown domain(s) {', '.join(map(repr, unknown))}; the data at {where} "
                            f"has {', '.join(known)}")


def build_loader(cfg: DataConfig, dataset: TokenDataset, seq_len: int, global_batch: int, micro_batch: int,
                 dp_rank: int = 0, dp_world: int = 1, seed: int = 0) -> TokenLoader | MixtureLoader:
    """The mixture loader when data.domains is set, otherwise the plain stream of `dataset`."""
    if not cfg.domains:
        return TokenLoader(dataset, seq_len, global_batch, micro_batch, dp_rank=dp_rank, dp_world=dp_world)
    datasets = [dataset, *(TokenDataset(p) for p in cfg.paths)]
    return MixtureLoader(datasets, cfg, seq_len, global_batch, micro_batch, dp_rank, dp_world, seed)


class DomainLosses:
    """A step's per-domain loss: per-sample mean losses summed by domain over the micro-batches, then over
    the data-parallel ranks in one all_reduce of a (2, domains) tensor [sums; counts]."""

    def __init__(self, domains: list[str], device: torch.device):
        self.domains = domains
        self.totals = torch.zeros(2, len(domains), dtype=torch.float64, device=device)

    def add(self, sample_losses: torch.Tensor, domains: torch.Tensor) -> None:
        domains = domains.to(self.totals.device)
        self.totals[0].index_add_(0, domains, sample_losses.detach().to(torch.float64))
        self.totals[1].index_add_(0, domains, torch.ones_like(domains, dtype=torch.float64))

    def reduce(self, holds: bool, distributed: bool) -> dict[str, float]:
        """{domain: mean loss} over the global batch, for the domains it held. One rank per data-parallel
        group contributes (`holds`: tensor-parallel rank 0), the others zeros; every rank gets the result."""
        totals = self.totals if holds else torch.zeros_like(self.totals)
        if distributed:
            dist.all_reduce(totals, op=dist.ReduceOp.SUM)
        sums, counts = totals.tolist()
        return {name: round(s / n, 6) for name, s, n in zip(self.domains, sums, counts) if n > 0 and math.isfinite(s)}
