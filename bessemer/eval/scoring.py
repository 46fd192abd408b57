"""Log-likelihoods of continuations, computed the way lm-eval-harness 0.4's `hf` model computes them.

- Tokens of a continuation: trailing whitespace of the context moves to the continuation; the continuation's
  tokens are those of `encode(context + continuation)` past the first `len(encode(context))`, so a token that
  straddles the boundary counts as the continuation's. An empty context is replaced by the prefix token
  (BOS, else EOS) — unless the continuation already starts with it.
- The model reads `(context + continuation)[-(max_len + 1):][:-1]`: a long context is cut from the left.
- A continuation's score is the sum of the float32 log-softmax at its tokens; each position's log-softmax
  depends on that position's logits only, so batching and padding on the right change nothing.
- Multiple choice: `acc` picks the highest sum, `acc_norm` the highest sum divided by the choice's length in
  characters (Python `len` of the choice text, the delimiter not counted), ties going to the first choice
  (numpy's argmax).
"""

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from bessemer.errors import BessemerError

Encode = Callable[[str], list[int]]


def encode_pair(encode: Encode, context: str, continuation: str, prefix_id: int) -> tuple[list[int], list[int]]:
    """(context tokens, continuation tokens) as lm-eval's `loglikelihood` splits them."""
    if context == "":
        cont = encode(continuation)
        return ([prefix_id], cont) if not cont or cont[0] != prefix_id else (cont[:1], cont[1:])
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        context, continuation = context[:-n_spaces], context[-n_spaces:] + continuation
    whole, ctx = encode(context + continuation), encode(context)
    return ctx, whole[len(ctx):]


def window(context: list[int], continuation: list[int], max_len: int) -> tuple[list[int], list[int]]:
    """The model's input and the tokens scored at its last positions: (inputs, targets)."""
    if not continuation:
        raise BessemerError("a continuation encodes to no tokens; there is nothing to score")
    if len(continuation) > max_len:
        raise BessemerError(f"a continuation of {len(continuation)} tokens does not fit the model's "
                            f"{max_len}-token window")
    return (context + continuation)[-(max_len + 1):][:-1], continuation


def rolling_windows(tokens: Sequence[int], prefix_id: int, max_len: int) -> list[tuple[list[int], list[int]]]:
    """Every token of `tokens` scored once, `prefix_id` before the first: chunks of up to `max_len` predicted
    tokens, each read with as much preceding context as the window holds."""
    full = [prefix_id, *tokens]
    out = []
    for start in range(1, len(full), max_len):
        end = min(start + max_len, len(full))
        out.append((full[max(0, end - 1 - max_len):end - 1], full[start:end]))
    return out


def choose(lls: Sequence[float], choices: Sequence[str]) -> tuple[int, int]:
    """(pred, pred_norm): the index of the highest log-likelihood, and of the highest per character."""
    import numpy as np

    lls = np.asarray(lls, dtype=np.float64)
    lengths = np.array([float(len(c)) for c in choices])
    return int(np.argmax(lls)), int(np.argmax(lls / lengths))


@torch.no_grad()
def score(model: torch.nn.Module, requests: Sequence[tuple[list[int], list[int]]], batch_size: int = 8,
          device: torch.device | str = "cpu", on_batch: Callable[[int], None] | None = None) -> list[float]:
    """Sum of log-probabilities of each request's targets, the targets being predicted by the last
    `len(targets)` positions of its inputs. Identical requests are computed once; batches are formed
    longest first and padded on the right."""
    unique = sorted({(tuple(i), tuple(t)) for i, t in requests}, key=lambda r: (-len(r[0]), r))
    result = {}
    for b in range(0, len(unique), batch_size):
        batch = unique[b:b + batch_size]
        width = len(batch[0][0])
        tokens = torch.zeros(len(batch), width, dtype=torch.long)
        for row, (inp, _) in enumerate(batch):
            tokens[row, :len(inp)] = torch.tensor(inp)
        logits = model(tokens.to(device)).float()  # (B, T, vocab)
        for row, (inp, targets) in enumerate(batch):
            n, c = len(inp), len(targets)
            logp = F.log_softmax(logits[row, n - c:n], dim=-1)  # (c, vocab)
            picked = logp.gather(1, torch.tensor(targets, device=logp.device).unsqueeze(1))
            result[(inp, targets)] = float(picked.sum())
        if on_batch is not None:
            on_batch(len(batch))
    return [result[(tuple(i), tuple(t))] for i, t in requests]
