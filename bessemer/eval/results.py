"""Scoring a list of tasks with a loaded model, the results as JSON, and the console table."""

import math
from collections.abc import Callable

from bessemer.benchmarks.tasks import Task, multiple_choice_items, perplexity_texts
from bessemer.errors import BessemerError
from bessemer.eval.loading import Evaluable
from bessemer.eval.scoring import choose, encode_pair, rolling_windows, window

SCHEMA_VERSION = 1


def evaluate_multiple_choice(ev: Evaluable, task: Task, batch_size: int,
                             progress: Callable[[int], None] | None = None) -> dict:
    items = multiple_choice_items(task)
    requests, spans = [], []
    for item in items:
        first = len(requests)
        for choice in item.choices:
            ctx, cont = encode_pair(ev.encode, item.context, task.target_delimiter + choice, ev.prefix_id)
            try:
                requests.append(window(ctx, cont, ev.max_len))
            except BessemerError as e:
                raise BessemerError(f"{task.name}, item {item.id}: {e}") from None
        spans.append((first, len(requests)))
    lls = ev.score(requests, batch_size, progress)
    rows, acc, acc_norm = [], 0, 0
    for item, (a, b) in zip(items, spans):
        pred, pred_norm = choose(lls[a:b], item.choices)
        acc += pred == item.gold
        acc_norm += pred_norm == item.gold
        rows.append({"id": item.id, "gold": item.gold, "pred": pred, "pred_norm": pred_norm,
                     "loglikelihoods": lls[a:b]})
    n = len(items)
    return {"name": task.name, "kind": task.kind, "file": str(task.path), "num_fewshot": task.num_fewshot,
            "n": n, "acc": acc / n if n else None, "acc_norm": acc_norm / n if n else None, "items": rows}


def evaluate_perplexity(ev: Evaluable, task: Task, batch_size: int,
                        progress: Callable[[int], None] | None = None) -> dict:
    """Token perplexity and bits per byte of texts (each from the prefix token), or perplexity of a shard
    stream (no bytes known: the text is gone)."""
    requests, n_bytes = [], None
    if task.shards is not None:
        from bessemer.tokens.mixture import DomainStream
        from bessemer.tokens.shards import TokenDataset

        data = TokenDataset(task.shards)
        if task.domain:
            data = DomainStream(task.domain, [data])
        requests = stream_requests(data, task.max_tokens, ev.max_len)
    else:
        texts = perplexity_texts(task)
        n_bytes = sum(len(t.encode("utf-8")) for t in texts)
        for text in texts:
            requests += rolling_windows(ev.encode(text), ev.prefix_id, ev.max_len)
    lls = ev.score(requests, batch_size, progress)
    nll, tokens = perplexity_of(lls, requests)
    return {"name": task.name, "kind": task.kind, "file": str(task.path), "tokens": tokens,
            "loglikelihood": sum(lls), "perplexity": math.exp(nll) if tokens else None,
            "bits_per_byte": nll * tokens / (n_bytes * math.log(2)) if n_bytes else None}


def stream_requests(data, max_tokens: int, max_len: int) -> list[tuple[list[int], list[int]]]:
    """The first `max_tokens` predicted tokens of a token stream (TokenDataset, DomainStream), its first token
    as the prefix: each scored once, with up to `max_len` tokens of context (the held-out loss the trainer logs
    is this, over the same stream)."""
    n = min(max_tokens + 1, data.stream_len)
    stream = data.read(0, n).tolist()
    return rolling_windows(stream[1:], stream[0], max_len)


def perplexity_of(lls: list[float], requests: list[tuple[list[int], list[int]]]) -> tuple[float, int]:
    """(mean negative log-likelihood per token, tokens) of scored requests."""
    tokens = sum(len(t) for _, t in requests)
    return (-sum(lls) / tokens if tokens else math.nan), tokens


def evaluate(ev: Evaluable, tasks: list[Task], batch_size: int = 8,
             progress: Callable[[int], None] | None = None) -> dict:
    run = {"multiple_choice": evaluate_multiple_choice, "perplexity": evaluate_perplexity}
    return {"schema_version": SCHEMA_VERSION, "model": ev.source, "max_len": ev.max_len,
            "tasks": [run[t.kind](ev, t, batch_size, progress) for t in tasks]}


def format_table(results: dict) -> str:
    """One line per task: accuracy for multiple choice, perplexity for the others."""
    def num(x, fmt):
        return "-" if x is None else format(x, fmt)

    rows = [("task", "kind", "n", "acc", "acc_norm", "perplexity", "bits/byte")]
    for t in results["tasks"]:
        if t["kind"] == "multiple_choice":
            rows.append((t["name"], f"mc {t['num_fewshot']}-shot", str(t["n"]), num(t["acc"], ".4f"),
                         num(t["acc_norm"], ".4f"), "-", "-"))
        else:
            rows.append((t["name"], "perplexity", str(t["tokens"]), "-", "-", num(t["perplexity"], ".3f"),
                         num(t["bits_per_byte"], ".4f")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    return "\n".join([f"model: {results['model']}", *lines])
