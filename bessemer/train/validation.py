"""Validation during training ([eval]): every eval.interval steps and at the last step, the loss on the held-out
shards per domain and the benchmark tasks, computed in the training layout (the model parts as they are: one
process, FSDP, TP, the pipeline schedule) and written as one `validation` event.

The held-out loss of a domain is exactly what `bessemer eval` reports for a perplexity task over the same
shards with that `domain` and `max_tokens` (eval/results.py stream_requests: every token of the first
eval.max_tokens scored once, with up to train.seq_len tokens of context), so the curve logged here and a
checkpoint scored later agree. Evaluation reads nothing from the device until it is done, changes no state
(no RNG draw, no data position), and leaves every part in training mode."""

import math
import time
from pathlib import Path

import torch

from bessemer.config import DataConfig, EvalConfig
from bessemer.dtensor import full
from bessemer.errors import BessemerError
from bessemer.eval.layout import Forward, LayoutScorer, masked_nll
from bessemer.eval.loading import Evaluable, tokenizer_encoder
from bessemer.eval.results import evaluate, perplexity_of, stream_requests
from bessemer.benchmarks.tasks import expand
from bessemer.tokens.mixture import DomainStream
from bessemer.tokens.shards import TokenDataset
from bessemer.train.step import TrainStep


def heldout_dirs(cfg: EvalConfig, data: DataConfig) -> list[Path]:
    """eval.paths, else the heldout/ directory beside each training shard directory that has one."""
    if cfg.paths:
        return [Path(p) for p in cfg.paths]
    return [d for d in (Path(p) / "heldout" for p in [data.path, *data.paths]) if (d / "index.json").is_file()]


def layout_forward(step: TrainStep) -> Forward:
    """Forward only, in the step's layout and precision: each row's summed negative log-likelihood, on the
    ranks that hold the loss. Under pipeline parallelism the schedule runs forward only, its loss swapped for
    the per-row sums for the call (the training loss scales by the loss scale and the micro-batch count)."""
    build = step.build

    def forward(inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor | None:
        with torch.no_grad(), step.loss_context(), step.compute():
            if build.pp_schedule is None:
                return full(masked_nll(build.parts[0](inputs), targets))
            schedule, losses = build.pp_schedule, []
            train_loss, schedule._loss_fn = schedule._loss_fn, masked_nll
            try:
                schedule.eval(*((inputs,) if build.has_first else ()), target=targets if build.has_last else None,
                              losses=losses)
            finally:
                schedule._loss_fn = train_loss
            return torch.cat([full(loss).reshape(-1) for loss in losses]) if build.has_last else None

    return forward


class Validator:
    """What [eval] asks for, prepared once (held-out requests per domain, task files read, the tokenizer loaded)
    and run by `__call__(step)` on every rank alike."""

    def __init__(self, cfg: EvalConfig, data: DataConfig, seq_len: int, micro_batch: int, train_step: TrainStep,
                 vocab_size: int, holds: bool, distributed: bool, device: torch.device):
        self.cfg, self.train_step = cfg, train_step
        dirs = heldout_dirs(cfg, data)
        self.tasks = expand(cfg.tasks) if cfg.tasks else []
        if not dirs and not self.tasks:
            raise BessemerError(f"eval.interval = {cfg.interval} but there is nothing to evaluate: no held-out shards "
                                f"at {Path(data.path) / 'heldout'} (write them with `bessemer tokenizer encode "
                                f"--heldout FRACTION`, or set eval.paths) and no eval.tasks")
        datasets = [TokenDataset(d) for d in dirs]
        for ds in datasets:
            if ds.vocab_size != vocab_size:
                raise BessemerError(f"held-out shards {ds.path} have a vocabulary of {ds.vocab_size}, the model "
                                    f"{vocab_size}: encode them with the training data's tokenizer")
        domains = list(dict.fromkeys(d for ds in datasets for d in ds.domains))
        self.requests = {name: stream_requests(DomainStream(name, datasets), cfg.max_tokens, seq_len)
                         for name in domains}
        self.scorer = LayoutScorer(layout_forward(train_step), seq_len, micro_batch, train_step.build.dp_rank,
                                   train_step.dims.dp, holds, distributed, device)
        self.evaluable = None
        if self.tasks:
            encode, prefix = tokenizer_encoder(Path(data.path))
            self.evaluable = Evaluable(None, encode, prefix, seq_len, device, "training",
                                       scorer=self.scorer)

    def due(self, step: int, last: int) -> bool:
        return self.cfg.interval > 0 and (step % self.cfg.interval == 0 or step == last)

    def __call__(self) -> dict:
        """The validation event's fields: val_loss, val_perplexity and val_tokens per domain; the tasks' scores."""
        t0 = time.perf_counter()
        parts = self.train_step.build.parts
        for part in parts:
            part.eval()
        try:
            names = list(self.requests)
            flat = [r for name in names for r in self.requests[name]]
            lls = self.scorer(flat)
            out: dict = {"val_loss": {}, "val_perplexity": {}, "val_tokens": {}}
            at = 0
            for name in names:
                reqs = self.requests[name]
                nll, tokens = perplexity_of(lls[at:at + len(reqs)], reqs)
                at += len(reqs)
                out["val_loss"][name] = nll
                out["val_perplexity"][name] = math.exp(nll)
                out["val_tokens"][name] = tokens
            if self.tasks:
                results = evaluate(self.evaluable, self.tasks, self.scorer.micro_batch)
                out["tasks"] = {t["name"]: ({"acc": t["acc"], "acc_norm": t["acc_norm"], "n": t["n"]}
                                            if t["kind"] == "multiple_choice" else
                                            {"perplexity": t["perplexity"], "tokens": t["tokens"]})
                                for t in results["tasks"]}
        finally:
            for part in parts:
                part.train()
        out["seconds"] = round(time.perf_counter() - t0, 3)
        return out


def describe(record: dict) -> str:
    """One console line for a validation event."""
    parts = [f"{name} {loss:.4f} (ppl {record['val_perplexity'][name]:.2f})" for name, loss in record["val_loss"].items()]
    for name, t in record.get("tasks", {}).items():
        parts.append(f"{name} acc {t['acc']:.3f}" if "acc" in t else f"{name} ppl {t['perplexity']:.2f}")
    return "held-out loss " + ", ".join(parts) + f" ({record['seconds']:.1f} s)"
