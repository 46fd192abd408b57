"""Fast saves: checksums computed while the files are written (never read back), the commit on the
housekeeping thread, async staging into host buffers kept from one save to the next."""

import threading

import pytest
import torch

from bessemer.checkpoint import manifest, store
from bessemer.checkpoint.manifest import HashingFile, check, describe_files, read_manifest
from bessemer.config import TrainConfig, load_config
from bessemer.errors import BessemerError
from bessemer.train.optim import Optimizers
from tests.unit.checkpoint.test_store import make, train_step


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_manifest_entries_are_computed_while_writing_and_match_the_disk(tmp_path, monkeypatch, mode):
    ckpt, model, opt, counters, events = make(tmp_path, f"--checkpoint.async_save={mode == 'async'}")
    monkeypatch.setattr(manifest, "checksum", lambda *a: pytest.fail("a file read back to checksum it"))
    for step in (1, 2):
        train_step(model, opt, counters)
        ckpt.save(step, "micro")
    ckpt.finish()
    monkeypatch.undo()
    path = ckpt.tiers["micro"] / "step_00000002"
    files = read_manifest(path)["files"]
    assert {".metadata", "rank00000.pt"} < set(files) and any(f.endswith(".distcp") for f in files)
    assert files == describe_files(path, "xxh3")  # what was hashed on the way is what is on disk
    assert check(path) == [] and [e[0] for e in events] == ["checkpoint_saved"] * 2


def test_hashing_file_counts_bytes_of_typed_buffers(tmp_path):
    with open(tmp_path / "f", "wb") as f:
        out = HashingFile(f, "sha256")
        out.write(memoryview(torch.arange(3, dtype=torch.int64).numpy()))  # 3 elements, 24 bytes
        out.write(b"abc")
    assert out.entry("sha256") == describe_files(tmp_path, "sha256")["f"] and out.size == 27


def test_the_commit_runs_off_the_training_thread_and_is_reported_after(tmp_path, monkeypatch):
    ckpt, model, opt, counters, events = make(tmp_path)
    threads, release = [], threading.Event()
    real = store.write_manifest

    def slow_manifest(*a, **k):
        threads.append(threading.current_thread().name)
        release.wait(5)
        return real(*a, **k)

    monkeypatch.setattr(store, "write_manifest", slow_manifest)
    train_step(model, opt, counters)
    path = ckpt.save(1, "micro")  # returns while the manifest waits: training never waited for the commit
    assert not (path / "manifest.json").exists() and not events
    release.set()
    ckpt.finish()
    assert threads == ["checkpoint-housekeeping"] and check(path) == []
    (name, step, fields), = events
    assert name == "checkpoint_saved" and step == 1 and fields["seconds"] > 0


@pytest.mark.parametrize("on_error", ["continue", "stop"])
def test_a_commit_failing_in_the_background_is_an_alert_and_leaves_nothing_loadable(tmp_path, monkeypatch,
                                                                                    on_error):
    ckpt, model, opt, counters, events = make(tmp_path, f"--checkpoint.on_error={on_error}")
    train_step(model, opt, counters)
    ckpt.save(1, "micro")
    ckpt.finish()

    def no_space(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store, "write_manifest", no_space)
    ckpt.save(2, "micro")
    if on_error == "stop":
        with pytest.raises(BessemerError, match="No space left"):
            ckpt.finish()
    else:
        ckpt.finish()
    alerts = [f for name, _, f in events if name == "alert"]
    assert alerts[0]["kind"] == "checkpoint_failed" and "No space left" in alerts[0]["message"]
    ckpt.housekeeper.wait()
    micro = ckpt.tiers["micro"]
    assert sorted(p.name for p in micro.iterdir() if p.name.startswith("step_")) == ["step_00000001"]


def test_async_saves_stage_into_the_same_host_buffers_each_time(tmp_path):
    ckpt, model, opt, counters, _ = make(tmp_path, "--checkpoint.async_save=true")
    if ckpt.stager is None:
        pytest.skip("this torch has no reusable stager")
    staged, stage = [], ckpt.stager.stage
    ckpt.stager.stage = lambda state: staged.append(stage(state)) or staged[-1]
    weights = []
    for step in (1, 2):
        train_step(model, opt, counters)
        ckpt.save(step, "micro")
        weights.append(model.weight.detach().clone())
    ckpt.finish()
    first, second = (s["model"]["weight"] for s in staged)
    assert first.data_ptr() == second.data_ptr() != model.weight.data_ptr()  # reused, and a copy
    assert staged[0]["optimizer"]["state.weight.exp_avg"].data_ptr() == \
        staged[1]["optimizer"]["state.weight.exp_avg"].data_ptr()
    fresh, model2, _, _, _ = make(tmp_path)
    assert fresh.recover(tmp_path)[0] == 2 and torch.equal(model2.weight, weights[1])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned staging needs CUDA")
def test_on_cuda_async_saves_stage_into_pinned_buffers_reused_across_saves(tmp_path):
    model = torch.nn.Linear(8, 8).cuda()
    opt = Optimizers([model], TrainConfig(lr=0.1))
    ckpt = store.Checkpointer(load_config(None, ["--checkpoint.async_save=true"]).checkpoint, tmp_path,
                              {"model": store.ModelParts([model]), "optimizer": opt})
    staged, stage = [], ckpt.stager.stage
    ckpt.stager.stage = lambda state: staged.append(stage(state)) or staged[-1]
    for step in (1, 2):
        opt.zero_grad()
        model(torch.ones(2, 8, device="cuda")).square().sum().backward()
        opt.step()
        ckpt.save(step, "micro")
    ckpt.finish()
    first, second = (s["model"]["weight"] for s in staged)
    assert first.is_pinned() and first.device.type == "cpu" and first.data_ptr() == second.data_ptr()
    assert torch.equal(second, model.weight.detach().cpu())
