import random

import numpy as np
import torch

from bessemer.rng import RNGState
from bessemer.train.state import TrainState


def draw():
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def test_rng_state_restores_every_generator(tmp_path):
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    draw()
    path = tmp_path / "rng.pt"
    torch.save(RNGState().state_dict(), path)
    expected = draw()
    draw()
    RNGState().load_state_dict(torch.load(path, weights_only=True))  # loads without unpickling code
    assert draw() == expected


def test_train_state_round_trip():
    s = TrainState(step=7, tokens_seen=700)
    t = TrainState()
    t.load_state_dict(s.state_dict())
    assert t == s
