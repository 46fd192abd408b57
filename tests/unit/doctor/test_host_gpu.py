"""The GPU-node checks (gpu.*, host.tuning, limits with RDMA, --expect-gpus) on snapshots of an 8-GPU NVSwitch node
with four HCAs, healthy and broken, and on a stand-in NVML for the live paths."""

import json
import re
import sys
import types

import pytest

from bessemer.cli import main
from bessemer.doctor.host import run_checks
from bessemer.doctor.host_gpu_health import parse_nvidia_smi_q

GPUS = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
        "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]
SWITCHES = ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]
GPU_IDS = ["gpu.settings", "gpu.xid", "gpu.pcie", "gpu.nvlink", "gpu.fabric", "gpu.peermem"]

SMI_HEADER = """==============NVSMI LOG==============

Timestamp                                 : Tue Dec  2 10:00:00 2025
Driver Version                            : 550.54.15
CUDA Version                              : 12.4

Attached GPUs                             : {count}"""
SMI_GPU = """GPU 0000{addr}
    Product Name                          : NVIDIA H100 80GB HBM3
    Persistence Mode                      : {persistence}
    MIG Mode
        Current                           : {mig}
        Pending                           : {mig}
    ECC Mode
        Current                           : {ecc}
        Pending                           : {ecc}
    PCI
        Bus Id                            : 0000{addr}
        GPU Link Info
            PCIe Generation
                Max                       : 5
                Current                   : 5"""
KERN_OK = "Dec  2 03:10:00 gpu-042 kernel: [    5.123456] nvidia-nvswitch0: using MSI"
XID_79 = ("Dec  2 03:12:45 gpu-042 kernel: [ 8123.456789] NVRM: Xid (PCI:0000:9a:00): 79, pid='<unknown>', "
          "name=<unknown>, GPU has fallen off the bus.")
XID_13 = ("Dec  2 03:11:00 gpu-042 kernel: [ 8000.1] NVRM: Xid (PCI:0000:18:00): 13, pid=4242, name=python, "
          "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address")
MODULES = "nvidia_uvm 1523712 4 - Live 0x0000000000000000 (POE)\nnvidia 56823808 120 nvidia_uvm, Live 0x0 (POE)"
PEERMEM = "nvidia_peermem 16384 0 - Live 0x0000000000000000 (OE)"
LSPCI = """0000:15:01.0 PCI bridge: Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0) (prog-if 00 [Normal decode])
\tCapabilities: [200 v1] Access Control Services
\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl+ DirectTrans+
\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir{redir} CmpltRedir{redir} UpstreamFwd+ EgressCtrl- DirectTrans-
0000:18:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)
\tSubsystem: NVIDIA Corporation Device 17a6"""


def nvlink_text(bad: bool) -> tuple[str, str]:
    """`nvidia-smi nvlink -s` and `-e` output: 18 links per GPU; when `bad`, GPU 5 has link 7 down and link 3
    retrained 4 times with 120 CRC errors."""
    state, errors = [], []
    for g in range(len(GPUS)):
        header = f"GPU {g}: NVIDIA H100 80GB HBM3 (UUID: GPU-{g:08x}-0000-0000-0000-000000000000)"
        state.append(header)
        errors.append(header)
        for link in range(18):
            state.append(f"\t Link {link}: " + ("<inactive>" if bad and (g, link) == (5, 7) else "26.562 GB/s"))
            faulty = bad and (g, link) == (5, 3)
            errors += [f"\t Link {link}: Replay Errors: 0", f"\t Link {link}: Recovery Errors: {4 if faulty else 0}",
                       f"\t Link {link}: CRC Errors: {120 if faulty else 0}"]
    return "\n".join(state), "\n".join(errors)


def gpu_node(snap, root, bad: bool):
    """The broken node has each failure once: XID 79 on 0000:9a:00, GPU 0000:3a:00.0 at x8, NVLink errors on
    GPU 5, no fabric manager, no nvidia_peermem, persistence off on GPU 1, ECC off on GPU 3, a 64 KiB memlock
    limit, and the tuning a GPU node should not have (THP always, NUMA balancing, powersave, IOMMU DMA, ACS)."""
    for i, addr in enumerate(GPUS):
        base = f"/sys/bus/pci/devices/{addr}"
        for name, text in (("vendor", "0x10de"), ("class", "0x030200"), ("numa_node", str(i // 4)),
                           ("max_link_width", "16"), ("current_link_width", "8" if bad and i == 2 else "16"),
                           ("max_link_speed", "32.0 GT/s PCIe"), ("current_link_speed", "32.0 GT/s PCIe")):
            snap.write(root, f"{base}/{name}", text)
    for addr in SWITCHES:
        snap.write(root, f"/sys/bus/pci/devices/{addr}/vendor", "0x10de")
        snap.write(root, f"/sys/bus/pci/devices/{addr}/class", "0x068000")
    snap.write(root, "/proc/1/comm", "systemd")
    snap.write(root, "/proc/2210/comm", "nvidia-persiste")
    if not bad:
        snap.write(root, "/proc/2231/comm", "nv-fabricmanage")
    for dev in ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"):
        snap.ib_port(root, dev, 1, rate="400 Gb/sec (4X NDR)")
    snap.write(root, "/proc/modules", MODULES if bad else PEERMEM + "\n" + MODULES)
    snap.write(root, "/proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue "
                                                    "Mar  5 22:23:56 UTC 2024")
    snap.write(root, "/proc/sys/kernel/osrelease", "5.15.0-105-generic")
    blocks = [SMI_GPU.format(addr=addr, persistence="Disabled" if bad and i == 1 else "Enabled", mig="Disabled",
                             ecc="Disabled" if bad and i == 3 else "Enabled") for i, addr in enumerate(GPUS)]
    snap.write(root, "/nvidia_smi_q.txt", "\n".join([SMI_HEADER.format(count=len(GPUS))] + blocks))
    state, errors = nvlink_text(bad)
    snap.write(root, "/nvidia_smi_nvlink_s.txt", state)
    snap.write(root, "/nvidia_smi_nvlink_e.txt", errors)
    snap.write(root, "/var/log/kern.log", "\n".join([KERN_OK, XID_79] if bad else [KERN_OK]))
    snap.write(root, "/proc/self/limits", snap.LIMITS.format(nofile=1048576, memlock=65536 if bad else "unlimited"))
    snap.write(root, "/sys/kernel/mm/transparent_hugepage/enabled", "[always] madvise never" if bad
               else "always [madvise] never")
    snap.write(root, "/proc/sys/kernel/numa_balancing", "1" if bad else "0")
    for cpu in range(4):
        snap.write(root, f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor",
                   "powersave" if bad else "performance")
    snap.write(root, "/sys/kernel/iommu_groups/12/type", "DMA-FQ" if bad else "identity")
    (root / "sys/kernel/iommu_groups/12/devices" / GPUS[0]).mkdir(parents=True)
    snap.write(root, "/lspci_vvv.txt", LSPCI.format(redir="+" if bad else "-"))
    return root


@pytest.fixture
def gpu_healthy(snap, tmp_path):
    return gpu_node(snap, tmp_path / "ok", bad=False)


@pytest.fixture
def gpu_broken(snap, tmp_path):
    return gpu_node(snap, tmp_path / "bad", bad=True)


def by_id(checks):
    return {c.id: c for c in checks}


def test_healthy_gpu_node_passes(gpu_healthy, capsys):
    checks = by_id(run_checks(root=gpu_healthy, only=GPU_IDS + ["limits", "host.tuning"]))
    for cid, check in checks.items():
        assert check.status == "pass" and not check.fix, (cid, check.evidence)
    assert "8 GPU(s)" in checks["gpu.settings"].evidence and "4 NVSwitch(es)" in checks["gpu.fabric"].evidence
    assert "GPU5 18/18 links active" in checks["gpu.nvlink"].evidence
    assert "0000:3a:00.0 x16/x16 32/32 GT/s" in checks["gpu.pcie"].evidence
    assert "nvidia_peermem loaded" in checks["gpu.peermem"].evidence
    assert main(["doctor", "--root", str(gpu_healthy), "--json", "--expect-gpus", "8",
                 "--only", ",".join(["gpu.health"] + GPU_IDS)]) == 0
    health = json.loads(capsys.readouterr().out)["checks"][0]
    assert health["status"] == "pass" and "8 GPU(s) listed" in health["evidence"]


@pytest.mark.parametrize("cid, words", [
    ("gpu.xid", ["XID 79 on PCI:0000:9a:00 x1 (GPU has fallen off the bus.)"]),
    ("gpu.pcie", ["0000:3a:00.0: x8 on a x16 GPU"]),
    ("gpu.nvlink", ["GPU5 link(s) 7 inactive", "GPU5 link 3 recovery=4 crc=120"]),
    ("gpu.fabric", ["4 NVSwitch(es) (0000:05:00.0", "no nv-fabricmanager process"]),
    ("gpu.peermem", ["HCAs mlx5_0,mlx5_1,mlx5_2,mlx5_3", "nvidia_peermem not loaded"]),
    ("gpu.settings", ["GPU1 0000:2a:00.0 persistence mode off", "GPU3 0000:5d:00.0 ECC off"]),
    ("limits", ["locked memory is limited on a node with RDMA devices"]),
])
def test_broken_gpu_node_fails(gpu_broken, cid, words):
    (check,) = run_checks(root=gpu_broken, only=[cid])
    assert check.status == "fail", check.evidence
    for w in words:
        assert w in check.evidence, (w, check.evidence)
    assert check.fix and check.measured


def test_broken_fixes_name_the_commands(gpu_broken):
    checks = by_id(run_checks(root=gpu_broken, only=GPU_IDS))
    assert "drain the node" in checks["gpu.xid"].fix
    assert "systemctl enable --now nvidia-fabricmanager" in checks["gpu.fabric"].fix
    assert "modprobe nvidia_peermem" in checks["gpu.peermem"].fix
    assert "nvidia-smi -i 3 -e 1" in checks["gpu.settings"].fix and "nvidia-persistenced" in checks["gpu.settings"].fix


def test_broken_tuning_warns(gpu_broken):
    (check,) = run_checks(root=gpu_broken, only=["host.tuning"])
    assert check.status == "warn"
    for w in ("GPU 0000:18:00.0 in IOMMU group 12 (DMA-FQ)", "ACS redirects peer-to-peer traffic to the root "
              "complex on 0000:15:01.0", "transparent hugepages 'always'", "kernel.numa_balancing on",
              "CPU governor powersave on 4 of 4 CPUs"):
        assert w in check.evidence, w
    for w in ("iommu=pt", "ECAP_ACS+0x6.w=0000", "echo madvise", "kernel.numa_balancing=0", "-g performance"):
        assert w in check.fix, w


def test_only_application_xids_warn(snap, tmp_path):
    snap.write(tmp_path, "/dmesg.txt", "\n".join([KERN_OK, XID_13, XID_13]))
    (check,) = run_checks(root=tmp_path, only=["gpu.xid"])
    assert check.status == "warn" and "XID 13 on PCI:0000:18:00 x2" in check.evidence
    assert check.measured.endswith("dmesg.txt")


def test_pcie_idle_speed_passes_and_slow_slot_warns(snap, gpu_healthy):
    snap.write(gpu_healthy, f"/sys/bus/pci/devices/{GPUS[0]}/current_link_speed", "2.5 GT/s PCIe")
    (check,) = run_checks(root=gpu_healthy, only=["gpu.pcie"])
    assert check.status == "pass"  # an idle GPU drops to Gen1 and retrains under load
    snap.write(gpu_healthy, f"/sys/bus/pci/devices/{GPUS[0]}/current_link_speed", "16.0 GT/s PCIe")
    (check,) = run_checks(root=gpu_healthy, only=["gpu.pcie"])
    assert check.status == "warn" and "0000:18:00.0: 16 GT/s of 32 GT/s" in check.evidence


def test_peermem_missing_with_dmabuf_only_warns(snap, gpu_broken):
    snap.write(gpu_broken, "/proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  "
                                                         "550.54.15  Release Build")
    (check,) = run_checks(root=gpu_broken, only=["gpu.peermem"])
    assert check.status == "warn" and "DMA-BUF" in check.evidence


def test_mig_warns(snap, gpu_healthy):
    text = (gpu_healthy / "nvidia_smi_q.txt").read_text()
    snap.write(gpu_healthy, "/nvidia_smi_q.txt", re.sub(r"(Current\s+: )Disabled", r"\1Enabled", text, count=1))
    (check,) = run_checks(root=gpu_healthy, only=["gpu.settings"])
    assert check.status == "warn" and "GPU0 0000:18:00.0 MIG mode on" in check.evidence
    assert "nvidia-smi -i 0 -mig 0" in check.fix


def test_parse_nvidia_smi_q():
    text = "\n".join([SMI_HEADER.format(count=2), SMI_GPU.format(addr=":18:00.0", persistence="Enabled",
                                                                 mig="N/A", ecc="Disabled")])
    (gpu,) = parse_nvidia_smi_q(text)
    assert gpu == {"bus_id": "0000:18:00.0", "index": 0, "name": "NVIDIA H100 80GB HBM3", "persistence": True,
                   "ecc": False, "ecc_pending": False, "mig": None, "mig_pending": None}


def test_gpu_checks_skip_without_their_data(tmp_path):
    for check in run_checks(root=tmp_path, only=GPU_IDS + ["host.tuning"]):
        assert check.status == "skip" and check.evidence, check.id


def test_expect_gpus_without_nvml_fails(snap, tmp_path, capsys):
    snap.write(tmp_path, f"/sys/bus/pci/devices/{GPUS[0]}/vendor", "0x10de")
    snap.write(tmp_path, f"/sys/bus/pci/devices/{GPUS[0]}/class", "0x030200")
    assert main(["doctor", "--root", str(tmp_path), "--json", "--only", "gpu.health"]) == 0  # unchanged: skip
    assert json.loads(capsys.readouterr().out)["checks"][0]["status"] == "skip"
    assert main(["doctor", "--root", str(tmp_path), "--json", "--only", "gpu.health", "--expect-gpus", "8"]) == 1
    (health,) = json.loads(capsys.readouterr().out)["checks"]
    assert health["status"] == "fail" and "none of 8 expected GPUs answer" in health["evidence"]
    assert "1 NVIDIA GPU(s) on the PCI bus" in health["evidence"] and "nvidia-smi" in health["fix"]


def test_expect_gpus_rejects_zero(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["doctor", "--expect-gpus", "0"])
    assert exc.value.code == 2 and "--expect-gpus: expected a GPU count >= 1, got '0'" in capsys.readouterr().err


class NVMLError(Exception):
    pass


def fake_nvml(gpus: list[dict], init_error: str | None = None) -> types.ModuleType:
    """A pynvml stand-in: a dict per GPU with the values the settings, NVLink and health queries read."""
    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError
    m.NVML_NVLINK_MAX_LINKS = 4

    def init():
        if init_error:
            raise NVMLError(init_error)

    m.nvmlInit, m.nvmlShutdown = init, lambda: None
    m.nvmlSystemGetDriverVersion = lambda: "550.54.15"
    m.nvmlDeviceGetCount = lambda: len(gpus)
    m.nvmlDeviceGetHandleByIndex = lambda i: gpus[i]
    m.nvmlDeviceGetName = lambda h: "NVIDIA H100 80GB HBM3"
    m.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=h["bus"].encode())
    m.nvmlDeviceGetPersistenceMode = lambda h: h.get("persistence", 1)
    m.nvmlDeviceGetEccMode = lambda h: h.get("ecc", (1, 1))

    def mig(h):
        raise NVMLError("Not Supported")

    def link_state(h, link):
        if link >= len(h.get("links", [])):
            raise NVMLError("Not Supported")
        return h["links"][link][0]

    m.nvmlDeviceGetMigMode = mig
    m.nvmlDeviceGetNvLinkState = link_state
    m.nvmlDeviceGetNvLinkErrorCounter = lambda h, link, counter: h["links"][link][1].get(counter, 0)
    return m


def test_live_nvml_settings_and_nvlink(monkeypatch):
    healthy = {"bus": "00000000:18:00.0", "links": [(1, {}), (1, {})]}
    broken = {"bus": "00000000:2A:00.0", "persistence": 0, "links": [(1, {1: 2}), (0, {})]}
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([healthy, broken]))
    checks = by_id(run_checks(only=["gpu.settings", "gpu.nvlink"]))
    settings, nvlink = checks["gpu.settings"], checks["gpu.nvlink"]
    assert settings.status == "fail" and "GPU1 0000:2a:00.0 persistence mode off" in settings.evidence
    assert "MIG 2 n/a" in settings.evidence  # a GPU without MIG is not flagged
    assert nvlink.status == "fail" and "GPU1 link(s) 1 inactive" in nvlink.evidence
    assert "GPU1 link 0 recovery=2" in nvlink.evidence and nvlink.measured == "NVML"


def test_live_expect_gpus(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([], init_error="Driver Not Loaded"))
    (check,) = run_checks(only=["gpu.health"], expect_gpus=8)
    assert check.status == "fail" and "none of 8 expected GPUs answer (NVML not available: Driver Not Loaded)" \
        in check.evidence
    (check,) = run_checks(only=["gpu.health"])
    assert check.status == "skip"


def test_limits_files_alone_warn(snap, tmp_path):
    snap.write(tmp_path, "/proc/self/limits", snap.LIMITS.format(nofile=1024, memlock="unlimited"))
    (tmp_path / "sys/class/infiniband/mlx5_0").mkdir(parents=True)
    (check,) = run_checks(root=tmp_path, only=["limits"])
    assert check.status == "warn" and "ulimit -n 1048576" in check.fix and "ulimit -l" not in check.fix
