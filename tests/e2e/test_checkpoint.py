"""Checkpoints end to end through the `bessemer` command: verify and list, recovery past damaged checkpoints,
cold backups through a real S3 endpoint on loopback, Hugging Face export and import."""

import json
import os
import secrets
import shutil
import subprocess
import sys

import pytest
import torch

from bessemer.report.run_report import read_metrics

BESSEMER = [sys.executable, "-m", "bessemer.cli"]
ENV = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}
QUIET = ["--metrics.tensorboard=false", "--metrics.peak_tflops=1"]


def bessemer(*args, env=None, check=True):
    proc = subprocess.run([*BESSEMER, *args], capture_output=True, text=True, env=env or ENV, timeout=600)
    if check:
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


def losses(run):
    return {r["step"]: r["loss"] for r in read_metrics(run / "metrics.jsonl")[0]}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """20 uninterrupted steps of the debug model with micro checkpoints every 5 steps."""
    run = tmp_path_factory.mktemp("ref") / "R"
    bessemer("train", "configs/debug.toml", "--train.steps=20", f"--run.dir={run}", *QUIET,
             "--checkpoint.micro.interval=5", "--checkpoint.micro.keep=0")
    return run


def damage(path, how):
    shard = next(path.glob("*.distcp"))
    if how == "flip":
        data = bytearray(shard.read_bytes())
        data[len(data) // 3] ^= 0x40
        shard.write_bytes(bytes(data))
    elif how == "truncate":
        shard.write_bytes(shard.read_bytes()[:-100])
    elif how == "missing_shard":
        shard.unlink()
    elif how == "missing_manifest":
        (path / "manifest.json").unlink()
    elif how == "edited_manifest":
        manifest = json.loads((path / "manifest.json").read_text())
        manifest["files"][".metadata"]["xxh3"] = "0" * 32
        (path / "manifest.json").write_text(json.dumps(manifest))
    elif how == "nan_moment":
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys

        from bessemer.checkpoint.manifest import read_manifest, write_manifest

        state = _load_state_dict_from_keys({"model", "optimizer"}, checkpoint_id=str(path))
        key = next(k for k in state["optimizer"] if k.endswith("exp_avg"))
        state["optimizer"][key].view(-1)[0] = float("nan")
        for f in path.glob("*.distcp"):
            f.unlink()
        dcp.save(state, checkpoint_id=str(path))
        meta = read_manifest(path)  # a NaN already in memory when saved: the checksums are right
        write_manifest(path, meta["step"], meta["checksum"],
                       {k: v for k, v in meta.items() if k not in ("files", "step", "checksum")})
        return key


@pytest.mark.parametrize("how, words", [
    ("flip", "checksum does not match the manifest"),
    ("truncate", "truncated or altered"),
    ("missing_shard", "missing"),
    ("missing_manifest", "no manifest"),
    ("edited_manifest", "checksum does not match"),
    ("nan_moment", "1 NaN"),
])
def test_verify_finds_the_damage_and_resume_takes_the_newest_valid_checkpoint(reference, tmp_path, how, words):
    run = tmp_path / "R"
    shutil.copytree(reference, run)
    newest = run / "checkpoints" / "macro" / "step_00000020"  # the end-of-training save
    assert bessemer("ckpt", "verify", str(newest)).stdout.startswith("ok ")
    damage(newest, how)
    proc = bessemer("ckpt", "verify", str(newest), check=False)
    assert proc.returncode == 1 and words in proc.stdout, proc.stdout
    listing = bessemer("ckpt", "list", str(run), check=False)
    assert "step_00000015" in listing.stdout
    if how != "nan_moment":  # list checks files; only verify reads the values
        assert listing.returncode == 1 and "NO" in listing.stdout
    # Resume with more steps: the damaged step 20 is skipped, step 15 loads, steps 16-20 repeat exactly.
    bessemer("train", "configs/debug.toml", "--train.steps=20", f"--run.dir={run}", *QUIET, "--resume",
             "--checkpoint.micro.interval=5", "--checkpoint.micro.keep=0", "--checkpoint.at_end=false")
    records, events = read_metrics(run / "metrics.jsonl")
    loaded = [e for e in events if e["event"] == "checkpoint_loaded"][-1]
    assert loaded["step"] == 15
    if how != "missing_manifest":  # without a manifest it was never a candidate
        skipped = [e for e in events if e["event"] == "checkpoint_skipped"]
        assert skipped and skipped[-1]["step"] == 20
    assert losses(run) == losses(reference)


def test_cold_backup_round_trip_through_s3_and_a_tampered_backup_is_refused(s3_endpoint, tmp_path, reference):
    url, options = s3_endpoint
    key = secrets.token_hex(32)
    env = {**ENV, "BESSEMER_BACKUP_KEY": key, "AWS_ACCESS_KEY_ID": options["key"],
           "AWS_SECRET_ACCESS_KEY": options["secret"], "AWS_DEFAULT_REGION": "eu-west-1"}
    prefix = f"{url}/run-{secrets.token_hex(4)}"
    cold = [f"--checkpoint.cold.url={prefix}", f"--checkpoint.cold.endpoint_url={options['endpoint_url']}",
            "--checkpoint.cold.interval_hours=0.000001", "--checkpoint.macro.interval=10"]
    run = tmp_path / "R"
    out = bessemer("train", "configs/debug.toml", "--train.steps=20", f"--run.dir={run}", *QUIET, *cold, env=env)
    assert key not in out.stdout + out.stderr + (run / "metrics.jsonl").read_text() + (run / "config.toml").read_text()
    _, events = read_metrics(run / "metrics.jsonl")
    assert sorted(e["step"] for e in events if e["event"] == "cold_backup_saved") == [10, 20]
    # Lose every local checkpoint, then resume: the newest backup (step 20) comes back from object storage.
    shutil.rmtree(run / "checkpoints")
    bessemer("train", "configs/debug.toml", "--train.steps=25", f"--run.dir={run}", *QUIET, *cold, "--resume",
             "--train.override_schedule=true", env=env)
    _, events = read_metrics(run / "metrics.jsonl")
    loaded = [e for e in events if e["event"] == "checkpoint_loaded"][-1]
    assert loaded["step"] == 20 and loaded["tier"] == "cold"
    assert {s: v for s, v in losses(run).items() if s <= 20} == losses(reference)
    # A backup altered in the bucket is refused; with nothing else to resume from, the run says why.
    import s3fs

    fs = s3fs.S3FileSystem(**options)
    newest = sorted(p for p in fs.ls(prefix.removeprefix("s3://")) if p.endswith(".bsmr"))[-1]
    data = bytearray(fs.cat(newest))
    data[len(data) // 2] ^= 0x01
    fs.pipe(newest, bytes(data))
    shutil.rmtree(run / "checkpoints")
    proc = bessemer("train", "configs/debug.toml", "--train.steps=30", f"--run.dir={run}", *QUIET, *cold, "--resume",
                    env=env, check=False)
    assert proc.returncode == 2 and "no intact checkpoint" in proc.stderr and "failed authentication" in proc.stderr
    assert "Traceback" not in proc.stderr and key not in proc.stderr
    wrong = {**env, "BESSEMER_BACKUP_KEY": secrets.token_hex(32)}
    proc = bessemer("ckpt", "restore", str(run), env=wrong, check=False)
    assert proc.returncode == 2 and "another key" in proc.stderr and key not in proc.stderr


def test_export_to_hugging_face_and_start_a_run_from_it(reference, tmp_path):
    transformers = pytest.importorskip("transformers")
    ckpt = reference / "checkpoints" / "macro" / "step_00000020"
    out = tmp_path / "hf"
    bessemer("ckpt", "export-hf", str(ckpt), str(out))
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    hf = transformers.LlamaForCausalLM.from_pretrained(out, dtype=torch.float32, local_files_only=True).eval()
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys

    from bessemer.model.llama import build_model
    from bessemer.model.registry import get_model_args

    ours = build_model(get_model_args("debug", 1024), 128)
    ours.load_state_dict(_load_state_dict_from_keys({"model"}, checkpoint_id=str(ckpt))["model"])
    tokens = torch.randint(0, 1024, (2, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        diff = (hf(tokens).logits - ours(tokens)).abs().max().item()
    print(f"\nexport-hf: max |logits difference| vs transformers {diff:.1e}")
    assert diff < 1e-4
    # A new run starting from the export computes its first loss with the exported weights.
    run = tmp_path / "R"
    bessemer("train", "configs/debug.toml", "--train.steps=1", f"--run.dir={run}", *QUIET,
             f"--checkpoint.initial_load_hf={out}", "--checkpoint.at_end=false")
    first = losses(run)[1]
    assert first < losses(reference)[1] - 1.0  # trained weights, not a fresh initialisation
    assert any(e["event"] == "initial_load_hf" for e in read_metrics(run / "metrics.jsonl")[1])


def test_auto_micro_interval_follows_young_daly(tmp_path):
    """With an MTBF of 0.36 s, Young/Daly asks for a micro checkpoint every few steps whatever this machine's
    speed; the trainer measures its own save and step times and applies the optimum after every save."""
    run = tmp_path / "R"
    bessemer("train", "configs/debug.toml", "--train.steps=30", f"--run.dir={run}", *QUIET,
             "--checkpoint.micro.interval=auto", "--checkpoint.mtbf_hours=0.0001", "--checkpoint.micro.keep=0")
    _, events = read_metrics(run / "metrics.jsonl")
    advice = [e for e in events if e["event"] == "checkpoint_interval"]
    saves = [e["step"] for e in events if e["event"] == "checkpoint_saved" and e["tier"] == "micro"]
    assert advice and saves[0] == 1 and len(saves) >= 3  # the first save measures the cost
    for a in advice:
        assert a["mtbf_s"] == pytest.approx(0.36)
        assert a["micro_interval"] == a["optimum_steps"] == max(1, round(a["optimum_s"] / a["step_s"]))
    gaps = [b - a for a, b in zip(saves, saves[1:])]
    assert all(g == e["micro_interval"] for g, e in zip(gaps, advice))
