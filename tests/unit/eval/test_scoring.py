import math

import pytest
import torch
import torch.nn.functional as F

from bessemer.errors import BessemerError
from bessemer.eval.scoring import choose, encode_pair, rolling_windows, score, window
from bessemer.model.llama import build_model
from bessemer.model.registry import get_model_args

# A toy tokenizer: " b" is one token, every other character is its own token (ids: code points + 1000).
MERGED = 1


def encode(text: str) -> list[int]:
    out, i = [], 0
    while i < len(text):
        if text.startswith(" b", i):
            out.append(MERGED)
            i += 2
        else:
            out.append(1000 + ord(text[i]))
            i += 1
    return out


def test_trailing_space_moves_to_the_continuation():
    """A context ending in a space: the space is scored with the continuation, as one token with it."""
    ctx, cont = encode_pair(encode, "a ", "b", prefix_id=7)
    assert (ctx, cont) == ([1000 + ord("a")], [MERGED])
    ctx, cont = encode_pair(encode, "a", " b c", prefix_id=7)
    assert (ctx, cont) == ([1000 + ord("a")], [MERGED, 1000 + ord(" "), 1000 + ord("c")])


def test_continuation_tokens_are_the_whole_minus_the_context():
    """A token spanning the boundary belongs to the continuation: whole[len(context tokens):]."""
    ctx, cont = encode_pair(encode, "x ", "bb", prefix_id=7)
    assert ctx == [1000 + ord("x")] and cont == [MERGED, 1000 + ord("b")]


def test_empty_context_is_the_prefix_token():
    assert encode_pair(encode, "", "ab", prefix_id=7) == ([7], [1000 + ord("a"), 1000 + ord("b")])
    assert encode_pair(lambda s: [7, 8], "", "x", prefix_id=7) == ([7], [8])  # already starts with it


def test_window_cuts_the_context_from_the_left():
    assert window([1, 2, 3, 4], [5, 6], max_len=4) == ([2, 3, 4, 5], [5, 6])
    assert window([1], [5, 6], max_len=4) == ([1, 5], [5, 6])
    with pytest.raises(BessemerError, match="does not fit"):
        window([1], [5, 6, 7], max_len=2)
    with pytest.raises(BessemerError, match="no tokens"):
        window([1], [], max_len=2)


@pytest.mark.parametrize("n, max_len", [(1, 4), (4, 4), (5, 4), (11, 3)])
def test_rolling_windows_score_every_token_once_with_context(n, max_len):
    tokens = list(range(100, 100 + n))
    windows = rolling_windows(tokens, prefix_id=7, max_len=max_len)
    assert [t for _, targets in windows for t in targets] == tokens
    full = [7, *tokens]
    for inp, targets in windows:
        assert len(inp) <= max_len and len(targets) <= len(inp)
        # The input is the tokens right before each target, ending one before the last target.
        end = full.index(targets[-1])
        assert inp == full[end - len(inp):end]


def test_acc_norm_divides_by_characters_not_bytes():
    """lm-eval's acc_norm: log-likelihood / len(choice) in characters; a Chinese character counts once."""
    lls = [-6.0, -10.0]
    choices = ["好的", "abcdefgh"]  # 2 characters (6 bytes) vs 8 characters (8 bytes)
    assert choose(lls, choices) == (0, 1)  # per character -3.0 vs -1.25; per byte it would be -1.0 vs -1.25
    assert choose([-1.0, -1.0], ["a", "b"]) == (0, 0)  # ties: the first


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model(get_model_args("debug", 64), 16, seed=1).eval()


def test_score_equals_log_softmax_of_one_sequence_whatever_the_batching(model):
    g = torch.Generator().manual_seed(0)
    requests = []
    for n in (3, 9, 16, 5, 12, 9):
        inp = torch.randint(0, 64, (n,), generator=g).tolist()
        c = 1 + n // 4
        requests.append((inp, inp[n - c + 1:] + [int(torch.randint(0, 64, (), generator=g))]))
    requests.append(requests[1])  # a repeat is computed once and gets the same value
    with torch.no_grad():
        expected = []
        for inp, targets in requests:
            logp = F.log_softmax(model(torch.tensor([inp])).float()[0], dim=-1)
            expected.append(sum(logp[len(inp) - len(targets) + k, t].item() for k, t in enumerate(targets)))
    for batch_size in (1, 3, 8):
        got = score(model, requests, batch_size)
        assert got[1] == got[-1]
        assert max(abs(a - b) for a, b in zip(got, expected)) < 1e-4
        assert all(math.isfinite(x) and x < 0 for x in got)
