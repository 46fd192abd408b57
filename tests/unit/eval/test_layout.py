"""Requests scored as rows of the training shape (eval/layout.py) give what scoring.score gives, whatever the
micro-batch, and a data-parallel rank scores only its own rows."""

import pytest
import torch

from bessemer.errors import BessemerError
from bessemer.eval.layout import IGNORE, LayoutScorer, masked_nll, request_rows
from bessemer.eval.scoring import rolling_windows, score
from bessemer.model.llama import build_model
from bessemer.model.registry import get_model_args

SEQ = 16


@pytest.fixture(scope="module")
def model():
    return build_model(get_model_args("debug", 64), SEQ, seed=1).eval()


def _requests():
    g = torch.Generator().manual_seed(0)
    stream = torch.randint(0, 64, (41,), generator=g).tolist()
    requests = rolling_windows(stream[1:], stream[0], SEQ)  # full windows and a short last one
    requests.append((stream[:5], stream[3:6]))  # multiple choice: a short context and a 3-token continuation
    return requests


def _forward(model):
    def forward(inputs, targets):
        with torch.no_grad():
            return masked_nll(model(inputs), targets)
    return forward


@pytest.mark.parametrize("micro_batch", [1, 2, 4])
def test_rows_score_as_scoring_does(model, micro_batch):
    requests = _requests()
    expected = score(model, requests, batch_size=3)
    got = LayoutScorer(_forward(model), SEQ, micro_batch, 0, 1, True, False, torch.device("cpu"))(requests)
    assert max(abs(a - b) / abs(b) for a, b in zip(got, expected)) < 1e-5


def test_a_data_parallel_rank_scores_only_its_rows(model):
    requests = _requests()
    seen = []

    def forward(inputs, targets):
        seen.append((targets != IGNORE).any(dim=1).tolist())
        return _forward(model)(inputs, targets)

    got = LayoutScorer(forward, SEQ, 2, 1, 2, True, False, torch.device("cpu"))(requests)
    n = len(requests)  # 4 rows per pass, this rank's are the 3rd and 4th of each
    assert len(seen) == -(-n // 4)
    assert [r for p, rows in enumerate(seen) for r in rows] == [4 * p + 2 + k < n for p in range(len(seen))
                                                                for k in range(2)]
    mine = [i for i in range(n) if i % 4 >= 2]
    assert all(got[i] != 0 for i in mine) and all(got[i] == 0 for i in range(n) if i not in mine)


def test_a_request_longer_than_a_row_is_an_error():
    with pytest.raises(BessemerError, match="do not fit rows of 4 tokens"):
        request_rows([([1, 2, 3, 4, 5], [5])], 4)
