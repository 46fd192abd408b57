import json
import subprocess
import sys
import time

import pytest

from bessemer.cli import main
from bessemer.doctor.host import CHECK_IDS, run_checks
from bessemer.doctor.host_context import HostContext
from bessemer.doctor.host_clock import check_clock_sync


def by_id(checks):
    return {c.id: c for c in checks}


def test_healthy_snapshot_passes(healthy, capsys):
    checks = by_id(run_checks(root=healthy))
    for cid in ("vm.max_map_count", "rdma.links", "numa.affinity", "nccl.env", "clock.sync", "limits", "shm.size"):
        assert checks[cid].status == "pass", (cid, checks[cid].evidence)
    assert "1048576" in checks["vm.max_map_count"].evidence
    assert checks["shm.size"].details["size_bytes"] == 64 * 1024**3
    for cid in ("gpu.health", "storage.checkpoint"):
        assert checks[cid].status == "skip" and "not available under --root" in checks[cid].evidence
    assert main(["doctor", "--root", str(healthy)]) == 0
    assert "gpu-017" in capsys.readouterr().out


def test_broken_snapshot_fails(broken, capsys):
    checks = by_id(run_checks(root=broken))
    assert checks["vm.max_map_count"].status == "fail" and "65530" in checks["vm.max_map_count"].evidence
    links = checks["rdma.links"]
    assert links.status == "fail"
    assert "mlx5_1/1 port_rcv_errors=17 symbol_error=3" in links.evidence
    assert "mlx5_1/2 is DOWN (Disabled)" in links.evidence
    assert "ibstat" in links.fix and "perfquery" in links.fix
    numa = checks["numa.affinity"]
    assert numa.status == "fail"
    assert "NIC eth0 (mlx5_0) on node 1" in numa.evidence and "process CPUs 0-15 = node 0" in numa.evidence
    assert "numactl" in numa.fix
    assert main(["doctor", "--root", str(broken)]) == 1


def test_json_schema(broken, capsys):
    assert main(["doctor", "--root", str(broken), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"schema_version", "host", "root", "checks", "summary"} and out["schema_version"] == 1
    assert out["host"] == "gpu-042" and out["root"] == str(broken)
    assert [c["id"] for c in out["checks"]] == list(CHECK_IDS)
    for c in out["checks"]:
        assert set(c) == {"id", "description", "status", "evidence", "fix", "measured", "details"}
        assert c["status"] in ("pass", "warn", "fail", "skip") and c["evidence"]
    assert set(out["summary"]) == {"pass", "warn", "fail", "skip"}
    assert sum(out["summary"].values()) == len(CHECK_IDS) and out["summary"]["fail"] >= 3


def test_only_filters(broken, capsys):
    assert main(["doctor", "--root", str(broken), "--json", "--only", "rdma.links"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert [c["id"] for c in out["checks"]] == ["rdma.links"]
    assert main(["doctor", "--root", str(broken), "--json", "--only", "shm.size,limits"]) == 0
    assert [c["id"] for c in json.loads(capsys.readouterr().out)["checks"]] == ["shm.size", "limits"]


def test_unknown_id_is_one_line_error(healthy, capsys):
    assert main(["doctor", "--root", str(healthy), "--only", "rdma.link"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "rdma.link" in err and "rdma.links" in err and "vm.max_map_count" in err


@pytest.mark.parametrize("offset, direction, leap, status", [
    ("0.000012345", "slow", "Normal", "pass"),
    ("0.500000000", "fast", "Normal", "warn"),
    ("2.000000000", "slow", "Normal", "fail"),
    ("0.000000000", "fast", "Not synchronised", "fail"),
])
def test_clock_from_chronyc_fixture(snap, tmp_path, offset, direction, leap, status):
    snap.write(tmp_path, "/chronyc_tracking.txt", snap.CHRONY.format(offset=offset, direction=direction, leap=leap))
    check = check_clock_sync(HostContext.build(tmp_path))
    assert check.status == status, check.evidence
    assert check.details["leap_status"] == leap
    assert check.details["offset_s"] == pytest.approx(float(offset) * (1 if direction == "fast" else -1))


def test_clock_without_data_skips_under_root(tmp_path):
    check = check_clock_sync(HostContext.build(tmp_path))
    assert check.status == "skip" and "not available under --root" in check.evidence


def test_map_count_thresholds(snap, tmp_path):
    for value, status in ((65530, "fail"), (65531, "warn"), (262143, "warn"), (262144, "pass")):
        snap.write(tmp_path, "/proc/sys/vm/max_map_count", str(value))
        (check,) = run_checks(root=tmp_path, only=["vm.max_map_count"])
        assert (check.status, check.details["value"]) == (status, value)


def test_nccl_env(healthy):
    def nccl(**env):
        (check,) = run_checks(root=healthy, only=["nccl.env"], environ=env, checkpoint_save_s=env.pop("save", None),
                              timeout_s=env.pop("timeout", None))
        return check

    assert nccl(NCCL_ASYNC_ERROR_HANDLING="1").status == "warn"
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING" in nccl(NCCL_ASYNC_ERROR_HANDLING="1").fix
    assert nccl(NCCL_IB_DISABLE="1").status == "fail"
    assert nccl(NCCL_SOCKET_IFNAME="ens").status == "fail"
    assert nccl(NCCL_SOCKET_IFNAME="=eth0").status == "pass"
    assert nccl(NCCL_SOCKET_IFNAME="^docker,lo").status == "pass"
    assert nccl(NCCL_IB_HCA="mlx5_7:1").status == "fail"
    secret = nccl(NCCL_IB_DISABLE="0", NCCL_ACCESS_TOKEN="hunter2")
    assert "hunter2" not in secret.evidence and "NCCL_ACCESS_TOKEN=***" in secret.evidence
    assert "hunter2" not in json.dumps(secret.as_dict())
    assert nccl(save=400.0).status == "warn"  # torch's 600 s default < 2 x 400 s
    assert nccl(save=400.0, timeout=1800.0).status == "pass"  # the run's parallel.timeout_s
    assert nccl(save=400.0, timeout=300.0).status == "fail"


def test_rdma_mixed_rates_and_soft_counters_warn(snap, tmp_path):
    snap.ib_port(tmp_path, "mlx5_0", 1)
    snap.ib_port(tmp_path, "mlx5_1", 1, rate="100 Gb/sec (4X EDR)", port_xmit_discards=5)
    (check,) = run_checks(root=tmp_path, only=["rdma.links"])
    assert check.status == "warn"
    assert "mixed rates" in check.evidence and "port_xmit_discards=5" in check.evidence


def test_rdma_pfc_roce(snap, tmp_path):
    snap.ib_port(tmp_path, "mlx5_0", 1, link_layer="Ethernet")
    (tmp_path / "sys/class/infiniband/mlx5_0/device/net/ens1f0").mkdir(parents=True)
    for prio in range(8):
        snap.write(tmp_path, f"/sys/class/net/ens1f0/ecn/roce_np/enable/{prio}", "0")
        snap.write(tmp_path, f"/sys/class/net/ens1f0/ecn/roce_rp/enable/{prio}", "0")
    snap.write(tmp_path, "/ethtool_ens1f0.txt", "NIC statistics:\n     rx_pause_ctrl_phy: 12\n"
               "     tx_pause_ctrl_phy: 3\n     tx_pause_storm_warning_events: 0")
    snap.write(tmp_path, "/mlnx_qos_ens1f0.txt", "PFC configuration:\n\tpriority    0   1   2   3   4   5   6   7\n"
               "\tenabled     0   0   0   1   0   0   0   0\n")
    (check,) = run_checks(root=tmp_path, only=["rdma.pfc"])
    assert check.status == "warn" and "ECN disabled on every priority" in check.evidence
    assert "PFC prio 3" in check.evidence and "pause rx 12 tx 3" in check.evidence
    snap.write(tmp_path, "/sys/class/net/ens1f0/ecn/roce_np/enable/3", "1")
    snap.write(tmp_path, "/sys/class/net/ens1f0/ecn/roce_rp/enable/3", "1")
    (check,) = run_checks(root=tmp_path, only=["rdma.pfc"])
    assert check.status == "pass", check.evidence


def test_numa_unbound_warns_and_single_node_skips(snap, healthy, tmp_path):
    snap.write(healthy, "/proc/self/status", "Cpus_allowed_list:\t0-31")
    (check,) = run_checks(root=healthy, only=["numa.affinity"])
    assert check.status == "warn" and "not bound" in check.evidence
    snap.write(tmp_path, "/sys/devices/system/node/node0/cpulist", "0-7")
    (check,) = run_checks(root=tmp_path, only=["numa.affinity"])
    assert (check.status, check.evidence) == ("skip", "1 NUMA node: nothing to bind")


def test_limits_from_proc(snap, tmp_path):
    snap.write(tmp_path, "/proc/self/limits", snap.LIMITS.format(nofile=1024, memlock=65536))
    (tmp_path / "sys/class/infiniband/mlx5_0").mkdir(parents=True)
    (check,) = run_checks(root=tmp_path, only=["limits"])
    assert check.status == "fail"  # RDMA cannot pin buffers; too few open files alone only warns
    assert "ulimit -n 1048576" in check.fix and "ulimit -l unlimited" in check.fix


def test_shm_docker_default_fails(snap, tmp_path):
    snap.write(tmp_path, "/proc/mounts", "shm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=65536k 0 0")
    (check,) = run_checks(root=tmp_path, only=["shm.size"])
    assert check.status == "fail" and "--shm-size" in check.fix


def test_crashing_check_becomes_skip(monkeypatch, tmp_path):
    from bessemer.doctor import host

    def boom(ctx):
        raise RuntimeError("sysfs went away")

    info, _ = host.HOST_CHECKS[0]
    monkeypatch.setattr(host, "HOST_CHECKS", [(info, boom)] + host.HOST_CHECKS[1:])
    (check,) = run_checks(root=tmp_path, only=[info.id])
    assert check.status == "skip" and check.evidence == "check crashed: RuntimeError: sysfs went away"


def test_this_machine(tmp_path):
    start = time.perf_counter()
    checks = run_checks(ckpt_dirs=[tmp_path])
    assert time.perf_counter() - start < 5.0
    assert [c.id for c in checks] == list(CHECK_IDS)
    for c in checks:
        assert "check crashed" not in c.evidence, (c.id, c.evidence)
        assert c.evidence, c.id
    found = by_id(checks)
    with open("/proc/sys/vm/max_map_count") as f:
        assert found["vm.max_map_count"].details["value"] == int(f.read())
    assert found["storage.checkpoint"].details["locations"][0]["write_mb_s"] > 0
    assert found["versions"].details["python"] == ".".join(map(str, sys.version_info[:3]))
    assert not list(tmp_path.iterdir())  # the write probe cleaned up


def test_doctor_does_not_import_torch():
    code = ("import sys, io, contextlib\n"
            "from bessemer.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            "    rc = main(['doctor', '--json'])\n"
            "import json; json.loads(out.getvalue())\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n"
            "print(rc)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() in ("0", "1")


def test_runtime_flag_runs_host_then_runtime(healthy, monkeypatch, capsys):
    from bessemer.doctor import runtime

    calls = []
    monkeypatch.setattr(runtime, "run_runtime", lambda args, host=None: calls.append(args.tp) or 1)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert main(["doctor", "--root", str(healthy), "--only", "vm.max_map_count", "--runtime", "--tp", "2"]) == 1
    assert calls == [2] and "vm.max_map_count" in capsys.readouterr().out
    monkeypatch.setenv("LOCAL_RANK", "3")  # not the node's first rank: runtime checks only
    assert main(["doctor", "--root", str(healthy), "--runtime"]) == 1
    assert calls == [2, 1] and "vm.max_map_count" not in capsys.readouterr().out
