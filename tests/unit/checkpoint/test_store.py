import dataclasses
import json
import os
import subprocess

import pytest
import torch

from bessemer.checkpoint.manifest import check, read_manifest
from bessemer.checkpoint.paths import candidates
from bessemer.checkpoint.store import CheckpointHooks, Checkpointer, ModelParts
from bessemer.config import CheckpointConfig, TrainConfig, load_config
from bessemer.errors import BessemerError
from bessemer.train.optim import Optimizers
from bessemer.train.state import TrainState


def make(tmp_path, *overrides, **kw):
    cfg = load_config(None, list(overrides)).checkpoint
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    opt = Optimizers([model], TrainConfig(lr=0.1))
    counters = TrainState()
    events = []
    ckpt = Checkpointer(cfg, tmp_path, {"model": ModelParts([model]), "optimizer": opt, "train_state": counters},
                        hooks=CheckpointHooks(event=lambda name, step, **f: events.append((name, step, f))), **kw)
    return ckpt, model, opt, counters, events


def train_step(model, opt, counters):
    opt.zero_grad()
    model(torch.ones(2, 8)).square().sum().backward()
    opt.step()
    counters.step += 1


def test_tiers_retention_manifest_and_recovery_of_the_newest(tmp_path):
    ckpt, model, opt, counters, events = make(tmp_path, "--checkpoint.micro.keep=2", "--checkpoint.macro.keep=1")
    saved = {}
    for step in range(1, 6):
        train_step(model, opt, counters)
        ckpt.save(step, "macro" if step in (2, 4) else "micro")
        saved[step] = model.weight.detach().clone()
    ckpt.finish()  # pruning runs in the background
    micro, macro = ckpt.tiers["micro"], ckpt.tiers["macro"]
    assert sorted(p.name for p in micro.glob("step_*")) == ["step_00000003", "step_00000005"]
    assert sorted(p.name for p in macro.glob("step_*")) == ["step_00000004"]
    assert (macro / "latest").read_text().strip() == "step_00000004"
    manifest = read_manifest(macro / "step_00000004")
    assert manifest["step"] == 4 and manifest["tier"] == "macro" and manifest["checksum"] == "xxh3"
    assert {".metadata", "rank00000.pt"} <= set(manifest["files"]) and check(macro / "step_00000004") == []
    assert [(s, t) for s, t, _ in candidates(ckpt.cfg, tmp_path)] == [(5, "micro"), (4, "macro"), (3, "micro")]
    fresh, model2, opt2, counters2, _ = make(tmp_path)
    assert fresh.recover(tmp_path)[:2] == (5, "micro")
    assert torch.equal(model2.weight, saved[5]) and counters2.step == 5
    assert opt2.state_dict().keys() == opt.state_dict().keys()
    for k, v in opt.state_dict().items():  # the moments came back, not just the weights
        assert torch.equal(opt2.state_dict()[k], v) if isinstance(v, torch.Tensor) else opt2.state_dict()[k] == v


@pytest.mark.parametrize("damage, reason", [
    ("flip", "checksum does not match"),
    ("truncate", "truncated or altered"),
    ("delete_shard", "missing"),
    ("delete_manifest", "no manifest"),
    ("edit_manifest", "manifest step"),
])
def test_a_damaged_checkpoint_is_skipped_with_its_reason(tmp_path, damage, reason):
    ckpt, model, opt, counters, _ = make(tmp_path)
    for step in (1, 2):
        train_step(model, opt, counters)
        ckpt.save(step, "micro")
    good = model.weight.detach().clone()
    train_step(model, opt, counters)
    ckpt.save(3, "micro")
    ckpt.finish()  # the commit runs in the background
    path = ckpt.tiers["micro"] / "step_00000003"
    shard = next(path.glob("*.distcp"))
    if damage == "flip":
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0x01
        shard.write_bytes(bytes(data))
    elif damage == "truncate":
        shard.write_bytes(shard.read_bytes()[:-7])
    elif damage == "delete_shard":
        shard.unlink()
    elif damage == "delete_manifest":
        (path / "manifest.json").unlink()
    else:
        manifest = json.loads((path / "manifest.json").read_text())
        manifest["step"] = 30
        (path / "manifest.json").write_text(json.dumps(manifest))
    fresh, model2, _, counters2, events = make(tmp_path)
    found = fresh.recover(tmp_path)
    if damage == "delete_manifest":  # never committed, so not even a candidate
        assert found[0] == 2 and not events
    else:
        assert found[0] == 2
        (name, step, fields), = events
        assert name == "checkpoint_skipped" and step == 3 and reason in fields["reason"]
    assert torch.equal(model2.weight, good) and counters2.step == 2


def test_nonfinite_optimizer_moment_is_skipped(tmp_path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys

    from bessemer.checkpoint.manifest import write_manifest

    ckpt, model, opt, counters, _ = make(tmp_path)
    for step in (1, 2):
        train_step(model, opt, counters)
        ckpt.save(step, "micro")
    ckpt.finish()
    path = ckpt.tiers["micro"] / "step_00000002"
    # NaN in a moment that was already in memory when saved: the checksums are right, the values are not.
    state = _load_state_dict_from_keys({"model", "optimizer"}, checkpoint_id=str(path))
    state["optimizer"]["state.weight.exp_avg_sq"][0, 0] = float("nan")
    for f in path.glob("*.distcp"):
        f.unlink()
    dcp.save(state, checkpoint_id=str(path))
    meta = read_manifest(path)
    write_manifest(path, 2, meta["checksum"], {k: v for k, v in meta.items() if k not in ("files", "step", "checksum")})
    fresh, _, _, counters2, events = make(tmp_path)
    assert fresh.recover(tmp_path)[0] == 1 and counters2.step == 1
    assert "optimizer state.weight.exp_avg_sq" in events[0][2]["reason"]


def test_leftover_temporary_is_never_loaded_and_the_next_save_removes_it(tmp_path):
    ckpt, model, opt, counters, _ = make(tmp_path)
    assert ckpt.recover(tmp_path) is None
    train_step(model, opt, counters)
    ckpt.save(1, "micro")
    ckpt.finish()
    tmp = ckpt.tiers["micro"] / "step_00000002.tmp"
    tmp.mkdir()  # a save that died before its commit
    assert [s for s, _, _ in candidates(ckpt.cfg, tmp_path)] == [1]
    ckpt.save(2, "micro")
    ckpt.finish()
    assert not tmp.exists()


def test_partial_checkpoint_is_refused(tmp_path):
    ckpt, model, opt, counters, _ = make(tmp_path)
    ckpt.save(1, "micro")
    ckpt.finish()
    ckpt.states["scaler"] = TrainState()
    with pytest.raises(BessemerError, match="lacks scaler"):
        ckpt.recover(tmp_path)


def test_async_save_commits_before_the_next_one(tmp_path):
    ckpt, model, opt, counters, events = make(tmp_path, "--checkpoint.async_save=true")
    train_step(model, opt, counters)
    ckpt.save(1, "micro")
    weight = model.weight.detach().clone()
    train_step(model, opt, counters)  # training goes on while the save is written
    ckpt.finish()
    assert check(ckpt.tiers["micro"] / "step_00000001") == []
    assert [e[0] for e in events] == ["checkpoint_saved"] and events[0][2]["background"]
    fresh, model2, _, _, _ = make(tmp_path)
    fresh.recover(tmp_path)
    assert torch.equal(model2.weight, weight)  # the state at save time, not after the next step


@pytest.fixture
def small_disk(tmp_path):
    """A real 256 KiB filesystem (tmpfs), so a save hits a real ENOSPC."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_disk_full_removes_the_partial_save_keeps_older_ones_and_alerts(tmp_path, small_disk):
    def big(tmp_path, *overrides):
        ckpt, model, opt, counters, events = make(tmp_path, f"--checkpoint.micro.dir={small_disk}",
                                                  "--checkpoint.micro.keep=0", *overrides)
        ckpt.states["model"] = ModelParts([torch.nn.Linear(128, 128)])  # 64 KiB of weights per checkpoint
        return ckpt, counters, events

    ckpt, counters, events = big(tmp_path)
    saved = [ckpt.save(step, "micro") for step in range(1, 6)]
    ckpt.finish()
    assert saved[0] is not None and None in saved  # the disk filled up
    failed = saved.index(None) + 1
    alerts = [f for name, step, f in events if name == "alert"]
    assert alerts and alerts[0]["kind"] == "checkpoint_failed" and "No space left" in alerts[0]["message"]
    assert not list(small_disk.glob("*.tmp"))
    for step in range(1, failed):
        assert check(small_disk / f"step_{step:08d}") == []
    stop, _, _ = big(tmp_path, "--checkpoint.on_error=stop")
    with pytest.raises(BessemerError, match="No space left"):
        stop.save(99, "micro")


def test_model_parts_round_trip_by_parameter_name_including_tied_weights():
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


def test_checkpoint_config_defaults():
    cfg = CheckpointConfig()
    assert (cfg.micro.interval, cfg.macro.interval, cfg.cold.interval_hours) == (0, 0, 0.0)


def test_load_reads_each_file_once_and_checks_it_while_reading(tmp_path, monkeypatch):
    """Recovery reads every checkpoint file exactly once; the checksums are computed on those bytes (no separate
    checking pass), and a flipped byte is still caught before anything of that file is used."""
    from bessemer.checkpoint import manifest, reading

    ckpt, model, opt, counters, _ = make(tmp_path)
    train_step(model, opt, counters)
    ckpt.save(1, "micro")
    ckpt.finish()
    path = ckpt.tiers["micro"] / "step_00000001"
    reads = []
    real = reading.read_ranges
    monkeypatch.setattr(reading, "read_ranges", lambda p, *a: reads.append(p.name) or real(p, *a))
    monkeypatch.setattr(manifest, "checksum", lambda *a: pytest.fail("a second read to checksum"))
    fresh, model2, _, _, events = make(tmp_path)
    assert fresh.recover(tmp_path)[:2] == (1, "micro") and not events
    assert sorted(reads) == sorted(read_manifest(path)["files"])  # every file, once
    assert torch.equal(model2.weight, model.weight)


def node_local(tmp_path, *overrides):
    return make(tmp_path, f"--checkpoint.micro.dir={tmp_path}/local/{{node}}", "--checkpoint.micro.keep=2",
                *overrides, meta={"layout": "world 1"})


def test_node_local_micro_tier_commit_record_and_recovery(tmp_path):
    from bessemer.checkpoint.paths import read_commits

    ckpt, model, opt, counters, events = node_local(tmp_path)
    for step in (1, 2, 3):
        train_step(model, opt, counters)
        ckpt.save(step, "micro")
    ckpt.finish()
    part = tmp_path / "local" / "0" / "step_00000003"
    manifest = read_manifest(part)
    assert manifest["storage"] == "local" and manifest["ranks"] == [0] and set(manifest["files"]) == {"rank00000.pt"}
    assert sorted(p.name for p in part.parent.glob("step_*")) == ["step_00000002", "step_00000003"]  # keep = 2
    assert [(e["step"], e["nodes"]) for e in read_commits(ckpt.cfg, tmp_path)] == [(2, {"0": [0]}), (3, {"0": [0]})]
    assert [(s, t) for s, t, _ in candidates(ckpt.cfg, tmp_path)] == [(3, "micro"), (2, "micro")]

    fresh, model2, opt2, counters2, _ = node_local(tmp_path)
    assert fresh.recover(tmp_path)[:2] == (3, "micro") and counters2.step == 3
    assert torch.equal(model2.weight, model.weight)
    for k, v in opt.state_dict().items():
        assert torch.equal(opt2.state_dict()[k], v) if isinstance(v, torch.Tensor) else opt2.state_dict()[k] == v

    # Damaged: skipped and set aside. Another layout's: skipped, not damaged. Not in the record: not offered.
    data = bytearray((part / "rank00000.pt").read_bytes())
    data[len(data) // 2] ^= 0x01
    (part / "rank00000.pt").write_bytes(bytes(data))
    fresh, _, _, counters2, events = node_local(tmp_path)
    assert fresh.recover(tmp_path)[0] == 2 and counters2.step == 2
    assert "checksum does not match" in events[0][2]["reason"] and (part.parent / "step_00000003.damaged").is_dir()
    fresh.finish()
    assert [e["step"] for e in read_commits(ckpt.cfg, tmp_path)] == [2]
    other, _, _, _, events = make(tmp_path, f"--checkpoint.micro.dir={tmp_path}/local/{{node}}",
                                  meta={"layout": "world 1 (another)"})
    assert other.recover(tmp_path) is None and "loads only into its layout" in events[0][2]["reason"]
    assert (part.parent / "step_00000002").is_dir()
    (tmp_path / "checkpoints" / "macro" / "micro_commits.json").unlink()
    assert candidates(ckpt.cfg, tmp_path) == []
