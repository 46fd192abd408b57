import pytest
import torch

from bessemer.checkpoint.store import Checkpointer
from bessemer.config import CheckpointConfig
from bessemer.errors import BessemerError
from bessemer.train.state import TrainState


def make(tmp_path, keep=2):
    model = torch.nn.Linear(3, 3)
    counters = TrainState()
    return Checkpointer(CheckpointConfig(keep=keep), tmp_path, {"model": model, "train_state": counters}), model, counters


def test_save_load_latest_and_retention(tmp_path):
    ckpt, model, counters = make(tmp_path)
    saved = {}
    for step in (1, 2, 3):
        counters.step = step
        with torch.no_grad():
            model.weight.add_(1.0)
        ckpt.save(step)
        saved[step] = model.weight.clone()
    assert ckpt.latest_step() == 3
    assert sorted(p.name for p in ckpt.dir.glob("step_*")) == ["step_00000002", "step_00000003"]  # keep=2
    with torch.no_grad():
        model.weight.zero_()
    counters.step = 0
    assert ckpt.load() == 3
    assert torch.equal(model.weight, saved[3]) and counters.step == 3
    ckpt.load(2)
    assert torch.equal(model.weight, saved[2]) and counters.step == 2


def test_leftover_temporary_is_ignored_and_errors_are_clear(tmp_path):
    ckpt, model, counters = make(tmp_path)
    with pytest.raises(BessemerError, match="no checkpoint to resume from"):
        ckpt.load()
    ckpt.save(1)
    (ckpt.dir / "step_00000002.tmp").mkdir()  # a save that died before its rename
    assert ckpt.latest_step() == 1
    path = ckpt.dir / "step_00000001" / "state.pt"
    path.write_bytes(path.read_bytes()[:100])  # truncated on disk
    with pytest.raises(BessemerError, match="cannot read checkpoint"):
        ckpt.load()


def test_partial_checkpoint_is_refused(tmp_path):
    ckpt, model, counters = make(tmp_path)
    ckpt.save(1)
    ckpt.states["optimizer"] = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(BessemerError, match="lacks optimizer"):
        ckpt.load()


def test_model_parts_round_trip_by_parameter_name_including_tied_weights():
    import dataclasses

    from bessemer.checkpoint.store import ModelParts
    from bessemer.model.llama import build_model
    from bessemer.model.registry import MODEL_SIZES

    args = dataclasses.replace(MODEL_SIZES["debug"], tie_embeddings=True)
    torch.manual_seed(0)
    a = build_model(args, 16)
    torch.manual_seed(1)
    b = build_model(args, 16)
    ModelParts([b]).load_state_dict(ModelParts([a]).state_dict())
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb), ka
    assert b.output.weight is b.tok_embeddings.weight
    with pytest.raises(BessemerError, match="lacks model weights layers.0"):
        ModelParts([b]).load_state_dict({k: v for k, v in a.state_dict().items() if not k.startswith("layers.0.")})
