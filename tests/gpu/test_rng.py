"""The CUDA generator through bessemer's RNGState: saved, written as the checkpointer writes rank files
(torch.save, loaded with weights_only=True), restored — and the same draws follow, to the bit."""

import torch

from bessemer.rng import RNGState


def draws() -> list[torch.Tensor]:
    x = torch.ones(4096, device="cuda")
    return [torch.rand(1000, device="cuda"), torch.randn(1000, device="cuda"),
            torch.nn.functional.dropout(x, p=0.5), torch.randint(0, 1 << 30, (1000,), device="cuda")]


def test_cuda_generator_restores_bitwise(tmp_path):
    torch.cuda.manual_seed(1234)
    draws()  # somewhere in the middle of the stream, not at a fresh seed
    state = RNGState().state_dict()
    assert "cuda" in state
    torch.save(state, tmp_path / "rng.pt")
    expected = draws()
    draws()
    RNGState().load_state_dict(torch.load(tmp_path / "rng.pt", weights_only=True))
    again = draws()
    assert all(torch.equal(a, b) for a, b in zip(expected, again))
    assert not torch.equal(expected[0], draws()[0])  # the stream moved on
