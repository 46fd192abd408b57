import copy

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

from bessemer.config import TrainConfig
from bessemer.train.offload import split_offloaded
from bessemer.train.optim import Optimizers


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 4))


def steps(opts: Optimizers, m: nn.Module, n: int) -> None:
    torch.manual_seed(1)
    for _ in range(n):
        opts.zero_grad()
        m(torch.randn(5, 8)).square().mean().backward()
        opts.step()


def test_split_takes_the_first_fraction_of_elements():
    named = list(model().named_parameters())  # 128, 16, 16, 16, 64, 4 elements
    assert split_offloaded(named, 0.5) == {"0.weight"}
    assert split_offloaded(named, 0.55) == {"0.weight", "0.bias"}
    assert split_offloaded(named, 1.0) == {n for n, _ in named}


def test_partial_and_full_offload_step_like_the_device_optimizer_and_share_its_state_format():
    cfg = TrainConfig(lr=1e-2)
    ref_model = model()
    ref = Optimizers([ref_model], cfg)
    steps(ref, ref_model, 4)
    for fraction in (0.5, 1.0):
        m = model()
        opts = Optimizers([m], cfg, offload_fraction=fraction)
        steps(opts, m, 4)
        for (name, a), b in zip(ref_model.named_parameters(), m.parameters()):
            assert torch.equal(a, b), name
        state = opts.state_dict()
        want = get_optimizer_state_dict(ref_model, ref.optimizers[0],
                                        options=StateDictOptions(flatten_optimizer_state_dict=True))
        assert state.keys() == want.keys()
        for k, v in want.items():
            assert torch.equal(state[k], v) if isinstance(v, torch.Tensor) else state[k] == v, k


def test_checkpoints_move_between_offload_on_and_off():
    cfg = TrainConfig(lr=1e-2)
    a_model = model()
    a = Optimizers([a_model], cfg, offload_fraction=0.5)
    steps(a, a_model, 3)
    saved = copy.deepcopy(a.state_dict())  # as a checkpoint would hold it
    b_model = model()
    b_model.load_state_dict(a_model.state_dict())
    b = Optimizers([b_model], cfg)  # no offload
    b.load_state_dict(copy.deepcopy(saved))
    c_model = model()
    c_model.load_state_dict(a_model.state_dict())
    c = Optimizers([c_model], cfg, offload_fraction=1.0)
    c.load_state_dict(copy.deepcopy(saved))
    for opts, m in ((a, a_model), (b, b_model), (c, c_model)):
        steps(opts, m, 2)
    for x, y, z in zip(a_model.parameters(), b_model.parameters(), c_model.parameters()):
        assert torch.equal(x, y) and torch.equal(x, z)
