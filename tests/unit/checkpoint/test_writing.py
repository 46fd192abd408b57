"""Fast saves: checksums computed while the files are written (never read back), each file fsynced once after
its last byte, the commit on the housekeeping thread and one commit pending at a time, async staging into host
buffers kept from one save to the next while the next step computes."""

import os
import stat
import threading
from pathlib import Path

import pytest
import torch

from bessemer.checkpoint import commit, manifest, store
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


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names open files through /proc")
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_every_file_is_fsynced_once_after_its_last_byte(tmp_path, monkeypatch, mode):
    """Committed means durable: each file of the checkpoint (DCP's `.metadata` included, whose own fsync DCP
    issues before the pickle has left Python's buffer) is fsynced exactly once, when it has its final size."""
    ckpt, model, opt, counters, _ = make(tmp_path, f"--checkpoint.async_save={mode == 'async'}")
    synced, real = [], os.fsync

    def fsync(fd):
        if stat.S_ISREG(os.fstat(fd).st_mode):
            synced.append((Path(os.readlink(f"/proc/self/fd/{fd}")).name.removesuffix(".tmp"), os.fstat(fd).st_size))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    train_step(model, opt, counters)
    path = ckpt.save(1, "micro")
    ckpt.finish()
    monkeypatch.undo()
    on_disk = sorted((f.name, f.stat().st_size) for f in path.iterdir())
    assert sorted(synced) == on_disk and len(on_disk) >= 4  # shards, .metadata, rank file, manifest


def test_hashing_file_counts_bytes_of_typed_buffers(tmp_path):
    with open(tmp_path / "f", "wb") as f:
        out = HashingFile(f, "sha256")
        out.write(memoryview(torch.arange(3, dtype=torch.int64).numpy()))  # 3 elements, 24 bytes
        out.write(b"abc")
    assert out.entry("sha256") == describe_files(tmp_path, "sha256")["f"] and out.size == 27


def test_the_commit_runs_off_the_training_thread_and_is_reported_after(tmp_path, monkeypatch):
    ckpt, model, opt, counters, events = make(tmp_path)
    threads, release = [], threading.Event()
    real = commit.write_manifest

    def slow_manifest(*a, **k):
        threads.append(threading.current_thread().name)
        release.wait(5)
        return real(*a, **k)

    monkeypatch.setattr(commit, "write_manifest", slow_manifest)
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

    monkeypatch.setattr(commit, "write_manifest", no_space)
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


def spy_on_staging(ckpt) -> list:
    """The staged copies of each save (the stager answers with a future of it)."""
    staged, stage = [], ckpt.stager.stage
    ckpt.stager.stage = lambda state, **kw: staged.append(stage(state, **kw)) or staged[-1]
    return staged


def test_async_saves_stage_into_the_same_host_buffers_each_time(tmp_path):
    ckpt, model, opt, counters, _ = make(tmp_path, "--checkpoint.async_save=true")
    if ckpt.stager is None:
        pytest.skip("this torch has no reusable stager")
    staged = spy_on_staging(ckpt)
    weights = []
    for step in (1, 2):
        train_step(model, opt, counters)
        ckpt.save(step, "micro")
        weights.append(model.weight.detach().clone())
    ckpt.finish()
    first, second = (s.result() for s in staged)
    assert first["model"]["weight"].data_ptr() == second["model"]["weight"].data_ptr() != model.weight.data_ptr()
    moment = "state.weight.exp_avg"
    assert first["optimizer"][moment].data_ptr() == second["optimizer"][moment].data_ptr()
    fresh, model2, _, _, _ = make(tmp_path)
    assert fresh.recover(tmp_path)[0] == 2 and torch.equal(model2.weight, weights[1])


def test_the_next_optimizer_step_waits_for_the_staging_copy(tmp_path):
    """The copy to host memory runs beside the next step's forward and backward; the optimizer step, the first
    thing to change weights and moments, waits for it — so the checkpoint holds the state of the save's step."""
    ckpt, model, opt, counters, _ = make(tmp_path, "--checkpoint.async_save=true")
    if ckpt.stager is None:
        pytest.skip("this torch has no reusable stager")
    go, stage = threading.Event(), ckpt.stager._stage
    ckpt.stager._stage = lambda state, **kw: go.wait() and stage(state, **kw)
    train_step(model, opt, counters)
    try:
        ckpt.save(1, "micro")  # returns while the copy has not even started
        saved = {k: v.detach().clone() for k, v in {**model.state_dict(), **opt.state_dict()}.items()
                 if isinstance(v, torch.Tensor)}
        threading.Timer(0.2, go.set).start()
        train_step(model, opt, counters)  # its optimizer step waits for the copy
    finally:
        go.set()
    assert not torch.equal(model.weight, saved["weight"])
    ckpt.finish()
    fresh, model2, opt2, _, _ = make(tmp_path)
    assert fresh.recover(tmp_path)[0] == 1
    restored = {**model2.state_dict(), **opt2.state_dict()}
    assert all(torch.equal(restored[k], v) for k, v in saved.items())


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_save_writes_nothing_while_the_previous_commit_is_pending(tmp_path, monkeypatch, mode):
    """A save waits for the commit before it: written beside an uncommitted checkpoint, its files could fill the
    disk under that checkpoint's manifest."""
    ckpt, model, opt, counters, events = make(tmp_path, f"--checkpoint.async_save={mode == 'async'}")
    release, seen, real = threading.Event(), [], commit.write_manifest

    def held_manifest(directory, step, *a, **k):
        if step == 1:
            release.wait(10)
            seen.extend(p.name for p in ckpt.tiers["micro"].glob("step_00000002.tmp/*"))
        return real(directory, step, *a, **k)

    monkeypatch.setattr(commit, "write_manifest", held_manifest)
    train_step(model, opt, counters)
    ckpt.save(1, "micro")
    second = threading.Thread(target=ckpt.save, args=(2, "micro"))
    second.start()
    second.join(0.5)  # held before it writes anything
    release.set()
    second.join()
    ckpt.finish()
    assert seen == [] and [e[0] for e in events] == ["checkpoint_saved"] * 2
    assert all(check(ckpt.tiers["micro"] / f"step_0000000{s}") == [] for s in (1, 2))


def test_checkpoint_files_are_written_without_the_zip_crc_and_load(tmp_path):
    """torch.save's own CRC-32 costs as much as the disk and nothing checks it: the manifest's checksum covers
    the files. The switch is back as it was once the save is written."""
    import zipfile

    ckpt, model, opt, counters, _ = make(tmp_path)
    train_step(model, opt, counters)
    ckpt.save(1, "micro")
    ckpt.finish()
    assert torch.serialization.get_crc32_options()
    rank = ckpt.tiers["micro"] / "step_00000001" / "rank00000.pt"
    assert all(info.CRC == 0 for info in zipfile.ZipFile(rank).infolist())
    assert torch.load(rank, weights_only=True)["train_state"]["step"] == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned staging needs CUDA")
def test_on_cuda_async_saves_stage_into_pinned_buffers_reused_across_saves(tmp_path):
    model = torch.nn.Linear(8, 8).cuda()
    opt = Optimizers([model], TrainConfig(lr=0.1))
    ckpt = store.Checkpointer(load_config(None, ["--checkpoint.async_save=true"]).checkpoint, tmp_path,
                              {"model": store.ModelParts([model]), "optimizer": opt})
    staged = spy_on_staging(ckpt)
    for step in (1, 2):
        opt.zero_grad()
        model(torch.ones(2, 8, device="cuda")).square().sum().backward()
        opt.step()
        ckpt.save(step, "micro")
    ckpt.finish()
    first, second = (s.result()["model"]["weight"] for s in staged)
    assert first.is_pinned() and first.device.type == "cpu" and first.data_ptr() == second.data_ptr()
    assert torch.equal(second, model.weight.detach().cpu())
