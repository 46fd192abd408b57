import base64
import io
import os
import tarfile
import threading

import pytest

from bessemer.checkpoint import cold_store as cold
from bessemer.checkpoint.cold_store import AsyncUploader, ColdStore, load_key, pack, unpack
from bessemer.errors import BessemerError

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))


def make_checkpoint(path, seed=0):
    """A small checkpoint-shaped directory: nested files, an empty file, incompressible bytes."""
    (path / "model").mkdir(parents=True)
    (path / "model" / "__0_0.distcp").write_bytes(os.urandom(300_000))
    (path / "rank00000.pt").write_bytes(f"counters {seed}".encode() * 1000)
    (path / "manifest.json").write_text(f'{{"step": {seed}}}')
    (path / "empty").write_bytes(b"")
    return path


def tree(path):
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def assert_no_leftovers(directory):
    assert sorted(p.name for p in directory.iterdir()) == []


def test_pack_unpack_round_trip_and_header(tmp_path):
    src = make_checkpoint(tmp_path / "step_00000007")
    size = pack(src, tmp_path / "b.bsmr", KEY, step=7, level=1)
    blob = (tmp_path / "b.bsmr").read_bytes()
    assert size == len(blob) and blob.startswith(b"BSMRCOLD")
    assert blob[cold.HEADER.size - 8:cold.HEADER.size] == cold.key_id(KEY)
    assert unpack(tmp_path / "b.bsmr", tmp_path / "out", KEY) == 7
    assert tree(tmp_path / "out") == tree(src)
    # A fresh nonce each time: the same checkpoint never gives the same ciphertext.
    pack(src, tmp_path / "c.bsmr", KEY, step=7, level=1)
    assert (tmp_path / "c.bsmr").read_bytes()[10:22] != blob[10:22]


def test_local_store_upload_list_download_prune(tmp_path):
    store = ColdStore(str(tmp_path / "bucket" / "run1"), KEY)
    assert store.list_steps() == []
    for step in (10, 20, 30):
        make_checkpoint(tmp_path / f"step_{step}", seed=step)
        assert store.upload(tmp_path / f"step_{step}", step).endswith(f"step_{step:08d}.bsmr")
    assert store.list_steps() == [10, 20, 30]
    assert store.prune(2) == [10] and store.list_steps() == [20, 30]
    store.download(30, tmp_path / "restored")
    assert tree(tmp_path / "restored") == tree(tmp_path / "step_30")
    with pytest.raises(BessemerError, match=r"no complete cold backup of step 10 .*have: 20, 30"):
        store.download(10, tmp_path / "again")
    assert not list(tmp_path.glob(".cold-*"))  # the packed temporaries are gone


def test_s3_round_trip(s3_endpoint, tmp_path):
    url, options = s3_endpoint
    store = ColdStore(f"{url}/round-trip", KEY, options)
    for step in (100, 200):
        make_checkpoint(tmp_path / f"step_{step}", seed=step)
        store.upload(tmp_path / f"step_{step}", step)
    assert store.list_steps() == [100, 200]
    newest = max(store.list_steps())
    out = store.download(newest, tmp_path / "fresh" / "step_00000200")
    assert tree(out) == tree(tmp_path / "step_200")
    assert sorted(p.name for p in out.parent.iterdir()) == ["step_00000200"]  # no temporaries left beside it


def s3_object(s3_endpoint, prefix, step):
    import s3fs

    url, options = s3_endpoint
    return s3fs.S3FileSystem(**options), f"{url}/{prefix}/step_{step:08d}.bsmr"


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_s3_modified_or_truncated_backup_is_refused_without_partial_output(s3_endpoint, tmp_path, damage):
    url, options = s3_endpoint
    store = ColdStore(f"{url}/{damage}", KEY, options)
    store.upload(make_checkpoint(tmp_path / "ckpt"), 5)
    fs, path = s3_object(s3_endpoint, damage, 5)
    blob = bytearray(fs.cat_file(path))
    if damage == "flip":
        blob[len(blob) // 2] ^= 0x01
    else:
        blob = blob[:len(blob) // 2]
    fs.pipe_file(path, bytes(blob))  # modified on the server, through the S3 protocol
    restore = tmp_path / "restore"
    restore.mkdir()
    with pytest.raises(BessemerError, match="failed authentication: the backup was modified or truncated"):
        store.download(5, restore / "step_00000005")
    assert_no_leftovers(restore)


def test_s3_wrong_key_is_named_as_such(s3_endpoint, tmp_path):
    url, options = s3_endpoint
    ColdStore(f"{url}/wrong-key", KEY, options).upload(make_checkpoint(tmp_path / "ckpt"), 1)
    restore = tmp_path / "restore"
    restore.mkdir()
    with pytest.raises(BessemerError, match=f"another key \\(key id {cold.key_id(KEY).hex()}, yours "
                                            f"{cold.key_id(OTHER_KEY).hex()}\\)"):
        ColdStore(f"{url}/wrong-key", OTHER_KEY, options).download(1, restore / "out")
    assert_no_leftovers(restore)


def test_s3_half_finished_upload_is_not_listed(s3_endpoint, tmp_path):
    url, options = s3_endpoint
    store = ColdStore(f"{url}/half", KEY, options)
    store.upload(make_checkpoint(tmp_path / "ckpt"), 1)
    fs, path = s3_object(s3_endpoint, "half", 2)
    pack(tmp_path / "ckpt", tmp_path / "two.bsmr", KEY, 2)
    fs.put_file(str(tmp_path / "two.bsmr"), path)  # the object arrived, its .done marker never did
    assert store.list_steps() == [1]
    with pytest.raises(BessemerError, match="no complete cold backup of step 2"):
        store.download(2, tmp_path / "out")
    assert store.prune(1) == [] and fs.exists(path)  # pruning leaves a possibly running upload alone


def test_s3_async_uploader_reports_through_callback(s3_endpoint, tmp_path, caplog):
    import logging
    import shutil

    caplog.set_level(logging.DEBUG, logger="bessemer")
    url, options = s3_endpoint
    store = ColdStore(f"{url}/async", KEY, options)
    done, calls = threading.Event(), []

    def on_done(step, error, seconds):
        calls.append((step, error, seconds))
        done.set()

    uploader = AsyncUploader(store, keep=1, on_done=on_done)
    ckpt = make_checkpoint(tmp_path / "ckpt" / "step_00000004")
    expected = tree(ckpt)
    uploader.submit(ckpt, 4)
    shutil.rmtree(ckpt)  # the trainer may prune its local copy right away: the upload uses hard links
    assert done.wait(30)
    uploader.wait()
    assert [(s, e) for s, e, _ in calls] == [(4, None)] and calls[0][2] >= 0
    assert store.list_steps() == [4]
    assert tree(store.download(4, tmp_path / "restored")) == expected
    assert not list((tmp_path / "ckpt").iterdir())  # staging removed

    # A failure is reported, kept and does not stop the next upload.
    calls.clear()
    uploader.submit(make_checkpoint(tmp_path / "ckpt" / "bad"), 2**64)  # too large for the header
    uploader.wait()
    assert calls[0][0] == 2**64 and isinstance(calls[0][1], BessemerError) and uploader.errors
    uploader.submit(make_checkpoint(tmp_path / "ckpt" / "step_00000008"), 8)
    uploader.wait()
    assert calls[-1][:2] == (8, None) and store.list_steps() == [8]  # keep=1 pruned step 4
    assert "step 8 uploaded to s3://" in caplog.text and "step 18446744073709551616 failed" in caplog.text
    assert KEY.hex() not in caplog.text and base64.b64encode(KEY).decode() not in caplog.text


def test_newer_submission_replaces_the_waiting_one(tmp_path, monkeypatch):
    store = ColdStore(str(tmp_path / "bucket"), KEY)
    release, started, seen = threading.Event(), threading.Event(), []
    real_upload = store.upload

    def slow_upload(ckpt_dir, step, level=3):
        started.set()
        release.wait(10)
        seen.append(step)
        return real_upload(ckpt_dir, step, level)

    monkeypatch.setattr(store, "upload", slow_upload)
    uploader = AsyncUploader(store)
    for step in (1, 2, 3):
        uploader.submit(make_checkpoint(tmp_path / f"step_{step}"), step)
        started.wait(10)  # step 1 is in flight before 2 and 3 arrive
    release.set()
    uploader.wait()
    assert seen == [1, 3] and store.list_steps() == [1, 3]
    assert not list(tmp_path.glob(".cold-staging-*"))  # the skipped step's snapshot is gone too


def write_archive(path, members, step=1):
    """An archive in the backup format whose tar holds whatever the test wants."""
    with cold._sealed_writer(path, KEY, step) as stream, tarfile.open(fileobj=stream, mode="w|") as tar:
        for info in members:
            tar.addfile(info, None if info.isdir() or info.issym() else io.BytesIO(b"x" * info.size))


@pytest.mark.parametrize("name, kind", [("../escaped", tarfile.REGTYPE), ("{tmp}/absolute", tarfile.REGTYPE),
                                        ("ok/../../up", tarfile.REGTYPE), ("link", tarfile.SYMTYPE)])
def test_unsafe_members_are_refused(tmp_path, name, kind):
    # Every target lies under tmp_path, so even a regression writes nowhere else.
    info = tarfile.TarInfo(name.format(tmp=tmp_path))
    info.type, info.size = kind, 0 if kind == tarfile.SYMTYPE else 3
    info.linkname = str(tmp_path / "target")
    good = tarfile.TarInfo("fine.txt")
    good.size = 3
    write_archive(tmp_path / "evil.bsmr", [good, info])
    restore = tmp_path / "restore"
    restore.mkdir()
    with pytest.raises(BessemerError, match="refusing it"):
        unpack(tmp_path / "evil.bsmr", restore / "out", KEY)
    assert_no_leftovers(restore)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil.bsmr", "restore"]


def test_load_key_sources_and_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("BESSEMER_BACKUP_KEY", KEY.hex())
    assert load_key() == KEY
    monkeypatch.setenv("BESSEMER_BACKUP_KEY", base64.b64encode(KEY).decode())
    assert load_key() == KEY
    key_file = tmp_path / "backup.key"
    key_file.write_text(OTHER_KEY.hex() + "\n")
    key_file.chmod(0o600)
    assert load_key(key_file=str(key_file)) == OTHER_KEY  # the file wins over the environment
    key_file.chmod(0o640)
    with pytest.raises(BessemerError, match="read by group or others.*chmod 600"):
        load_key(key_file=str(key_file))
    with pytest.raises(BessemerError, match="cannot read the backup key file"):
        load_key(key_file=str(tmp_path / "missing.key"))
    monkeypatch.delenv("BESSEMER_BACKUP_KEY")
    with pytest.raises(BessemerError, match="set the environment variable BESSEMER_BACKUP_KEY.*key_file"):
        load_key()
    monkeypatch.setenv("MY_KEY", KEY.hex()[:-2])
    with pytest.raises(BessemerError, match="environment variable MY_KEY is not 32 bytes"):
        load_key("MY_KEY")


def test_key_never_appears_in_messages_reprs_or_objects(tmp_path, monkeypatch):
    secret_forms = [KEY.hex(), KEY.hex().upper(), base64.b64encode(KEY).decode()]
    messages = []

    def expect_error(fn, *args, **kwargs):
        with pytest.raises(BessemerError) as info:
            fn(*args, **kwargs)
        messages.append(str(info.value))

    # Almost-right keys: one character short, in the environment and in a file.
    for form in secret_forms:
        monkeypatch.setenv("BESSEMER_BACKUP_KEY", form[:-1])
        expect_error(load_key)
        key_file = tmp_path / "k"
        key_file.write_text(form + "A")
        key_file.chmod(0o600)
        expect_error(load_key, key_file=str(key_file))
    expect_error(ColdStore, str(tmp_path), KEY[:31])
    store = ColdStore(str(tmp_path / "bucket"), KEY)
    store.upload(make_checkpoint(tmp_path / "ckpt"), 3)
    blob = (tmp_path / "bucket" / "step_00000003.bsmr").read_bytes()
    expect_error(ColdStore(str(tmp_path / "bucket"), OTHER_KEY).download, 3, tmp_path / "a")
    (tmp_path / "bucket" / "step_00000003.bsmr").write_bytes(blob[:-1])
    expect_error(store.download, 3, tmp_path / "b")
    messages.append(repr(store))
    for form in secret_forms:
        assert not any(form in m for m in messages), form
        assert form.encode() not in blob
    header = blob[:cold.HEADER.size]
    assert KEY not in blob and KEY[:8] not in header and KEY.hex().encode() not in header


def test_gcm_message_limit_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(cold, "GCM_MAX_BYTES", 1000)  # the real limit is about 64 GiB
    with pytest.raises(BessemerError, match="most AES-GCM may seal under one nonce"):
        pack(make_checkpoint(tmp_path / "ckpt"), tmp_path / "big.bsmr", KEY, 1)
    assert not (tmp_path / "big.bsmr").exists()


def test_snapshot_hard_links_and_falls_back_to_copying(tmp_path, monkeypatch):
    ckpt = make_checkpoint(tmp_path / "step_00000001")
    snap = cold._snapshot(ckpt, 1)
    assert tree(snap) == tree(ckpt) and not snap.parent.name.startswith("step_")
    assert (snap / "manifest.json").stat().st_ino == (ckpt / "manifest.json").stat().st_ino

    def no_links(src, dst):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_links)
    snap = cold._snapshot(ckpt, 2)
    assert tree(snap) == tree(ckpt)
    assert (snap / "manifest.json").stat().st_ino != (ckpt / "manifest.json").stat().st_ino
