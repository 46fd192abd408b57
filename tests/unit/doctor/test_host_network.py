"""nccl.env, rdma.links and rdma.pfc on the node snapshots in tests/unit/doctor/net_* (read with --root), and the
doctor's command-line contract: --strict, --expect-link-rate, --config, schema_version, one JSON document."""

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bessemer.cli import main
from bessemer.doctor.check import SCHEMA_VERSION, Check
from bessemer.doctor.host import run_checks
from bessemer.doctor.host_nccl import NCCL_VARIABLES
from bessemer.doctor.host_rdma import roce_mtu

HERE = Path(__file__).parent
ROCE, HDR, DUAL, BAD_ENV = (HERE / name for name in ("net_roce_no_pfc", "net_hdr_links", "net_dual_port",
                                                       "net_bad_env"))


def one(root, check_id, **kwargs):
    (check,) = run_checks(root=root, only=[check_id], **kwargs)
    return check


def copy(fixture: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(fixture, tmp_path / fixture.name))


def test_roce_without_pfc_fails_and_passes_once_configured(snap, tmp_path):
    check = one(ROCE, "rdma.pfc")
    assert check.status == "fail", check.evidence
    assert "mlx5_0/1 (ens1f0np0): PFC off on every priority" in check.evidence
    assert "MTU 1500 gives RoCE messages of 1024 bytes" in check.evidence
    assert "trust pcp, not dscp" in check.evidence
    assert "--pfc 0,0,0,1,0,0,0,0" in check.fix and "--trust dscp" in check.fix and "mtu 9000" in check.fix
    assert "ecn/roce_np" not in check.fix  # ECN is on (priority 3): no fix for it
    assert check.details["ports"]["mlx5_0/1"]["pfc_priorities"] == []
    root = copy(ROCE, tmp_path)
    qos = (root / "mlnx_qos_ens1f0np0.txt").read_text()
    qos = qos.replace("trust state: pcp", "trust state: dscp").replace(
        "enabled     0   0   0   0", "enabled     0   0   0   1")
    snap.write(root, "/mlnx_qos_ens1f0np0.txt", qos)
    snap.write(root, "/sys/class/net/ens1f0np0/mtu", "9000")
    check = one(root, "rdma.pfc")
    assert check.status == "pass", check.evidence
    assert "PFC prio 3" in check.evidence and "trust dscp" in check.evidence and "MTU 9000 (RoCE 4096)" in check.evidence


def test_roce_mtu_follows_the_kernel():
    assert [roce_mtu(m) for m in (1500, 4096, 4191, 4192, 9000, 300)] == [1024, 2048, 2048, 4096, 4096, None]


def test_expected_link_rate(capsys):
    assert one(HDR, "rdma.links").status == "pass"  # one rate everywhere: nothing to compare without an expectation
    slow = one(HDR, "rdma.links", expect_link_rate_gbps=400)
    assert slow.status == "fail"
    assert "mlx5_3/1 at 200 Gb/sec (4X HDR), expected 400 Gb/s" in slow.evidence
    assert "mlxlink" in slow.fix and slow.details["expect_link_rate_gbps"] == 400
    assert one(HDR, "rdma.links", expect_link_rate_gbps=200).status == "pass"
    assert main(["doctor", "--root", str(HDR), "--only", "rdma.links", "--expect-link-rate", "400"]) == 1
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(["doctor", "--expect-link-rate", "0"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--expect-link-rate" in err and "> 0" in err


def test_dual_port_hca_with_unused_port_down_passes():
    check = one(DUAL, "rdma.links")
    assert check.status == "pass", check.evidence
    assert "mlx5_0/2 is DOWN (Polling), unused" in check.evidence
    assert "mlx5_1/2 is DOWN (Disabled), unused" in check.evidence
    assert one(DUAL, "rdma.links", environ={"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1"}).status == "pass"
    for hca in ("mlx5_0", "^mlx5_1", "mlx5_0:2"):  # the job uses mlx5_0's second port: its being down is a loss
        used = one(DUAL, "rdma.links", environ={"NCCL_IB_HCA": hca})
        assert used.status == "fail", hca
        assert "mlx5_0/2 is DOWN (Polling)" in used.evidence and "unused" not in used.evidence.split(";")[0]


def test_port_down_without_an_active_sibling_fails(snap, tmp_path):
    root = copy(DUAL, tmp_path)
    snap.ib_port(root, "mlx5_1", 1, state="1: DOWN", phys="2: Polling")
    check = one(root, "rdma.links")
    assert check.status == "fail" and "mlx5_1/1 is DOWN (Polling)" in check.evidence
    assert "ibstat" in check.fix


def test_harmful_and_unknown_nccl_variables():
    check = one(BAD_ENV, "nccl.env")
    assert check.status == "fail"
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING=0: a failed or timed-out collective is never aborted" in check.evidence
    assert "NCCL_P2P_DISABLE=1: NVLink/PCIe peer-to-peer off" in check.evidence
    assert "NCCL_TIMEOUT is not an NCCL variable" in check.evidence
    assert "NCCL_SOCKET_NTHREAD is not a variable NCCL reads (did you mean NCCL_SOCKET_NTHREADS?)" in check.evidence
    assert "NCCL_DEBUG" not in check.evidence.split("[")[0]  # a real variable is listed, not flagged
    assert "parallel.timeout_s" in check.fix and "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC" in check.fix
    assert "rename NCCL_SOCKET_NTHREAD to NCCL_SOCKET_NTHREADS" in check.fix
    assert one(BAD_ENV, "nccl.env", environ={"NCCL_P2P_DISABLE": "1"}).status == "warn"
    assert one(BAD_ENV, "nccl.env", environ={"TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}).status == "pass"
    plugin = {"NCCL_FASTRAK_IFNAME": "eth1", "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME": "eth2"}
    assert one(BAD_ENV, "nccl.env", environ=plugin).status == "pass"


def test_the_table_knows_the_usual_nccl_variables():
    usual = ["DEBUG", "SOCKET_IFNAME", "IB_HCA", "IB_GID_INDEX", "IB_TC", "IB_SL", "NET_GDR_LEVEL", "P2P_LEVEL",
             "ALGO", "PROTO", "BUFFSIZE", "NTHREADS", "MIN_NCHANNELS", "MAX_NCHANNELS", "CROSS_NIC",
             "COLLNET_ENABLE", "NVLS_ENABLE", "IB_TIMEOUT", "IB_RETRY_CNT", "DEBUG_SUBSYS", "TOPO_FILE",
             "IGNORE_CPU_AFFINITY", "SHM_DISABLE", "NET", "IB_DISABLE", "P2P_DISABLE", "LAUNCH_MODE", "CUMEM_ENABLE"]
    assert not [n for n in usual if n not in NCCL_VARIABLES]
    assert "TIMEOUT" not in NCCL_VARIABLES
    env = {f"NCCL_{n}": "1" for n in usual if n not in ("IB_DISABLE", "P2P_DISABLE", "SOCKET_IFNAME", "IB_HCA")}
    assert one(BAD_ENV, "nccl.env", environ=env).status == "pass"


def test_strict_turns_a_warning_into_exit_1(tmp_path, capsys):
    root = copy(DUAL, tmp_path)
    (root / "environ").write_text("NCCL_P2P_DISABLE=1\n")
    assert main(["doctor", "--root", str(root), "--only", "nccl.env,rdma.links"]) == 0
    assert main(["doctor", "--root", str(root), "--only", "nccl.env,rdma.links", "--strict"]) == 1
    assert main(["doctor", "--root", str(root), "--only", "rdma.links", "--strict"]) == 0  # a pass stays 0


def test_host_json_has_schema_version(capsys):
    assert main(["doctor", "--root", str(DUAL), "--json", "--only", "rdma.links"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == SCHEMA_VERSION == 1
    assert doc["host"] == "ib-dual-011" and [c["id"] for c in doc["checks"]] == ["rdma.links"]


def test_runtime_json_is_one_document(monkeypatch, capsys):
    from bessemer.doctor import runtime

    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)  # rank 0, the node's first rank
    # The checks themselves run in test_runtime.py (a single-process run); here only what rank 0 prints.
    passed = Check("runtime.rng", "RNG state", "pass", "all 1 ranks must share one RNG state: they do")
    monkeypatch.setattr(runtime, "run_runtime_checks", lambda *args, **kwargs: [passed])
    assert main(["doctor", "--root", str(DUAL), "--only", "rdma.links", "--runtime", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)  # a second document would raise "Extra data"
    assert doc["schema_version"] == 1 and set(doc) == {"schema_version", "host", "runtime"}
    assert doc["host"]["host"] == "ib-dual-011" and [c["id"] for c in doc["host"]["checks"]] == ["rdma.links"]
    assert doc["runtime"] == {"checks": [passed.as_dict()]}


def test_runtime_alone_json_and_strict(monkeypatch, capsys):
    from bessemer.doctor import runtime

    monkeypatch.delenv("RANK", raising=False)
    warned = Check("runtime.clock", "clock skew", "warn", "rank 1 is 0.2 s behind rank 0")
    monkeypatch.setattr(runtime, "run_runtime_checks", lambda *args, **kwargs: [warned])
    assert runtime.run_runtime(argparse.Namespace(json=True)) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == {"schema_version": 1, "checks": [warned.as_dict()]}
    assert runtime.run_runtime(argparse.Namespace(json=False, strict=True)) == 1


def _run_config(tmp_path: Path, timeout_s: float, model: str = "llama3-8b", extra: str = "") -> Path:
    path = tmp_path / "run.toml"
    path.write_text(f'[run]\ndir = "{tmp_path / "run"}"\n[model]\nname = "{model}"\n'
                    f"[parallel]\ntimeout_s = {timeout_s}\n{extra}")
    return path


def test_config_timeout_shorter_than_the_planned_save_fails(healthy, tmp_path, capsys):
    def nccl(timeout_s, *flags):
        cfg = _run_config(tmp_path, timeout_s)
        code = main(["doctor", "--root", str(healthy), "--only", "nccl.env", "--json", "--config", str(cfg), *flags])
        return code, json.loads(capsys.readouterr().out)["checks"][0]

    # llama3-8b: 8.03e9 parameters x 12 bytes = 96.4 GB; at 1 GB/s one save takes 96 s.
    code, check = nccl(60, "--storage-write-gbs", "1")
    assert code == 1 and check["status"] == "fail"
    assert "collective timeout 60 s (parallel.timeout_s) < one checkpoint save 96 s" in check["evidence"]
    assert "planned: 96.4 GB checkpoint of llama3-8b at 1 GB/s" in check["evidence"]
    assert "raise parallel.timeout_s to >= 193 s" in check["fix"]
    assert nccl(150, "--storage-write-gbs", "1")[1]["status"] == "warn"
    assert nccl(200, "--storage-write-gbs", "1")[1]["status"] == "pass"
    code, check = nccl(60)  # under --root no bandwidth can be measured: said, not guessed
    assert check["status"] == "pass" and "not compared" in check["evidence"] and "--storage-write-gbs" in check["evidence"]
    cfg = _run_config(tmp_path, 60, extra="[checkpoint]\nasync_save = true\n")
    assert main(["doctor", "--root", str(healthy), "--only", "nccl.env", "--config", str(cfg),
                 "--storage-write-gbs", "1"]) == 0


def test_config_save_time_measured_on_its_checkpoint_dir(tmp_path, capsys):
    cfg = _run_config(tmp_path, 600, model="debug")
    assert main(["doctor", "--only", "nccl.env", "--json", "--config", str(cfg)]) in (0, 1)
    check = json.loads(capsys.readouterr().out)["checks"][0]
    assert 0 < check["details"]["checkpoint_save_s"] < 60 and check["details"]["timeout_s"] == 600
    assert f"MB/s, write+fsync into {tmp_path / 'run' / 'checkpoints' / 'macro'}" in check["evidence"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".bessemer-doctor-")]  # the probe cleaned up


def test_config_and_flag_errors_are_one_line(tmp_path, capsys):
    assert main(["doctor", "--storage-write-gbs", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--storage-write-gbs needs --config" in err
    cfg = _run_config(tmp_path, -5)
    assert main(["doctor", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "parallel.timeout_s must be > 0" in err


def test_help_lists_flags_with_defaults(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["doctor", "--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for flag in ("--json", "--strict", "--root", "--only", "--expect-link-rate", "--config", "--storage-write-gbs",
                 "--ckpt-dir", "--runtime"):
        assert flag in text
    assert text.count("(default") >= 10 and "examples:" in text and "exit codes:" in text


def test_config_path_does_not_import_torch(tmp_path):
    cfg = _run_config(tmp_path, 60)
    code = ("import sys, io, contextlib\n"
            "from bessemer.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    rc = main(['doctor', '--json', '--only', 'nccl.env', '--config', {str(cfg)!r}])\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n"
            "print(rc)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() in ("0", "1")
