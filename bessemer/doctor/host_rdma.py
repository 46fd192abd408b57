"""Host checks of the RDMA fabric: InfiniBand/RoCE port state, rate and error counters (rdma.links), and RoCE's
lossless setup — PFC, ECN, trust mode, MTU and pause counters (rdma.pfc). Everything comes from sysfs or from
mlnx_qos/ethtool output (fixture files under --root). No torch."""

import re
from dataclasses import dataclass

from bessemer.doctor.check import Check
from bessemer.doctor.host_context import CheckInfo, HostContext

RDMA_LINKS = CheckInfo("rdma.links", "InfiniBand/RoCE ports in use active, at the expected rate, without link or "
                                     "receive errors")
RDMA_PFC = CheckInfo("rdma.pfc", "RoCE lossless setup: PFC on a priority, ECN, DSCP trust, MTU, pause counters")

# Counters that mean bits are lost on the wire or the link flapped: NCCL retries and stalls, then times out.
RDMA_FAIL_COUNTERS = ("port_rcv_errors", "symbol_error", "link_downed")
RDMA_WARN_COUNTERS = ("port_xmit_discards", "port_rcv_remote_physical_errors", "local_link_integrity_errors")
# phys_state of a port with no link partner: administratively disabled, or no cable/peer answering. Such a port
# on an HCA whose other port is up is the unused half of a dual-port card, not a broken link.
NO_PARTNER = ("Disabled", "Polling", "Sleep")
# RoCE carries IB transport headers inside the Ethernet frame (GRH 40 + UDP 8 + BTH 12 + XRC 4 + AtomicETH 28
# + ICRC 4 bytes, the kernel's iboe_get_mtu): the RoCE path MTU is the largest IB MTU that fits what is left.
ROCE_HEADER_BYTES = 96
IB_MTUS = (4096, 2048, 1024, 512, 256)


@dataclass
class RdmaPort:
    device: str
    port: str
    state: str  # "ACTIVE", "DOWN", ... (the text after "4: ")
    phys_state: str
    rate: str
    link_layer: str
    counters: dict[str, int]

    @property
    def name(self) -> str:
        return f"{self.device}/{self.port}"

    @property
    def gbps(self) -> float | None:
        """The rate in Gb/s from sysfs's `200 Gb/sec (4X HDR)`, None when unreadable."""
        match = re.match(r"\s*([\d.]+)\s*Gb/sec", self.rate)
        return float(match.group(1)) if match else None


def _after_colon(text: str | None) -> str:
    return (text or "unknown").partition(":")[2].strip() or (text or "unknown")


def read_rdma_ports(ctx: HostContext) -> list[RdmaPort]:
    ports = []
    for dev in ctx.listdir("/sys/class/infiniband"):
        for port in ctx.listdir(f"/sys/class/infiniband/{dev}/ports"):
            base = f"/sys/class/infiniband/{dev}/ports/{port}"
            counters = {}
            for name in RDMA_FAIL_COUNTERS + RDMA_WARN_COUNTERS:
                text = ctx.read(f"{base}/counters/{name}")
                if text is not None and text.isdigit():
                    counters[name] = int(text)
            ports.append(RdmaPort(dev, port, _after_colon(ctx.read(f"{base}/state")),
                                  _after_colon(ctx.read(f"{base}/phys_state")), ctx.read(f"{base}/rate") or "unknown",
                                  ctx.read(f"{base}/link_layer") or "unknown", counters))
    return ports


def hca_selection(spec: str) -> list[tuple[str, str | None, bool]]:
    """NCCL_IB_HCA's entries as (name, port or None, exact), with `^` (exclude) applied by `selects`."""
    body = spec.removeprefix("^")
    exact = body.startswith("=")
    entries = []
    for item in body.removeprefix("=").split(","):
        name, _, port = item.strip().partition(":")
        if name:
            entries.append((name, port or None, exact))
    return entries


def selects(spec: str, port: RdmaPort) -> bool:
    """Whether NCCL_IB_HCA=`spec` makes NCCL use `port` (plain names match by prefix, `=` exactly, `:N` one
    port, a leading `^` excludes the listed ones and keeps the rest)."""
    hit = any((port.device == name if exact else port.device.startswith(name)) and port_no in (None, port.port)
              for name, port_no, exact in hca_selection(spec))
    return not hit if spec.startswith("^") else hit


def _unused(port: RdmaPort, ports: list[RdmaPort], hca_spec: str | None) -> str | None:
    """Why a port that is not ACTIVE is no loss, or None when it is one. NCCL_IB_HCA, when set, says which ports
    the job uses; otherwise NCCL takes every active port, so a port with no link partner on an HCA whose other
    port is up is the spare half of a dual-port card."""
    if hca_spec:
        return None if selects(hca_spec, port) else f"not selected by NCCL_IB_HCA={hca_spec}"
    sibling_up = any(p.device == port.device and p.state == "ACTIVE" for p in ports if p is not port)
    if sibling_up and port.phys_state in NO_PARTNER:
        return f"no link partner ({port.phys_state}) and another port of {port.device} is active"
    return None


def check_rdma_links(ctx: HostContext) -> Check:
    measured = str(ctx.path("/sys/class/infiniband")) + "/*/ports/*/{state,phys_state,rate,link_layer,counters/}"
    ports = read_rdma_ports(ctx)
    if not ports:
        return RDMA_LINKS.result("skip", "no InfiniBand/RoCE devices", measured=measured)
    hca_spec = ctx.environ.get("NCCL_IB_HCA", "").strip() or None
    down, slow, errors, warns, notes, lines = [], [], [], [], [], []
    expect = ctx.expect_link_rate_gbps
    used = {p.name for p in ports if not hca_spec or selects(hca_spec, p)}  # the ports NCCL would take if active
    for p in ports:
        lines.append(f"{p.name} {p.state} {p.phys_state} {p.rate} {p.link_layer}")
        if p.state != "ACTIVE":
            why_unused = _unused(p, ports, hca_spec)
            if why_unused:
                notes.append(f"{p.name} is {p.state} ({p.phys_state}), unused: {why_unused}")
            else:
                down.append(f"{p.name} is {p.state} ({p.phys_state})")
            continue
        if p.name in used and expect is not None and (p.gbps is None or p.gbps < expect):
            slow.append(f"{p.name} at {p.rate}, expected {expect:g} Gb/s")
        bad = {k: v for k, v in p.counters.items() if v > 0}
        hard = [f"{k}={v}" for k, v in bad.items() if k in RDMA_FAIL_COUNTERS]
        soft = [f"{k}={v}" for k, v in bad.items() if k in RDMA_WARN_COUNTERS]
        if hard:
            errors.append(f"{p.name} {' '.join(hard)}")
        if soft:
            warns.append(f"{p.name} {' '.join(soft)}")
    rates = {p.rate for p in ports if p.state == "ACTIVE" and p.name in used}
    if len(rates) > 1:
        warns.append(f"active ports at mixed rates ({', '.join(sorted(rates))}): the slowest sets the collective's "
                     f"speed")
    fixes = []
    if down:
        fixes.append("port down: `ibstat`, `ip link`, check the cable and the switch port, and that a subnet manager "
                     "runs (InfiniBand: `sminfo`); a port the job should not use: leave it out of NCCL_IB_HCA")
    if slow:
        fixes.append("slow link: `ibstat` / `mlxlink -d DEV -p PORT` show the negotiated speed and width; check the "
                     "cable or transceiver generation (an HDR cable caps an NDR port at 200), the switch port's "
                     "configured speed, and that no lanes are down (4X -> 2X)")
    if errors or warns:
        fixes.append("errors: reseat or replace the cable/transceiver, read counters with `perfquery -x`, check the "
                     "switch port; counters are cumulative, so clear (`perfquery -R`) and recheck")
    fails = down + slow + errors
    details = {"ports": [p.__dict__ for p in ports], "expect_link_rate_gbps": expect, "unused": notes}
    evidence = "; ".join(fails + warns + notes + lines)
    status = "fail" if fails else "warn" if warns else "pass"
    return RDMA_LINKS.result(status, evidence, fix=" | ".join(fixes), measured=measured, **details)


def _roce_netdev(ctx: HostContext, port: RdmaPort) -> str | None:
    ndev = ctx.read(f"/sys/class/infiniband/{port.device}/ports/{port.port}/gid_attrs/ndevs/0")
    if ndev:
        return ndev
    nets = ctx.listdir(f"/sys/class/infiniband/{port.device}/device/net")
    return nets[0] if nets else None


def _ecn(ctx: HostContext, netdev: str) -> dict[str, list[int]]:
    """{'roce_np': [priorities with ECN on], 'roce_rp': [...]} from mlx5's sysfs; a side is absent if unreadable."""
    found = {}
    for side in ("roce_np", "roce_rp"):
        base = f"/sys/class/net/{netdev}/ecn/{side}/enable"
        prios = [p for p in ctx.listdir(base) if p.isdigit()]
        if prios:
            found[side] = [int(p) for p in prios if ctx.read(f"{base}/{p}") == "1"]
    return found


def roce_mtu(netdev_mtu: int) -> int | None:
    """The RoCE path MTU an Ethernet MTU allows (1500 -> 1024, 9000 -> 4096), None when below 256 + headers."""
    return next((m for m in IB_MTUS if m <= netdev_mtu - ROCE_HEADER_BYTES), None)


def parse_mlnx_qos_pfc(text: str) -> list[int] | None:
    """Priorities with PFC enabled, from `mlnx_qos -i IF` ("PFC configuration:" / "enabled 0 0 0 1 0 0 0 0")."""
    match = re.search(r"PFC configuration:.*?\n\s*priority\s+([\d\s]+)\n\s*enabled\s+([\d\s]+)", text, re.DOTALL)
    if not match:
        return None
    prios, enabled = match.group(1).split(), match.group(2).split()
    return [int(p) for p, e in zip(prios, enabled) if e == "1"]


def parse_mlnx_qos_trust(text: str) -> str | None:
    """`pcp` or `dscp` from mlnx_qos's "Priority trust state: dscp" (older releases: "trust mode")."""
    match = re.search(r"Priority trust (?:state|mode):\s*(\w+)", text)
    return match.group(1).lower() if match else None


def parse_ethtool_pause(text: str) -> dict[str, int]:
    """Pause-frame and pause-storm counters from `ethtool -S IF` (mlx5 names: rx_pause_ctrl_phy,
    rx_prio3_pause, tx_pause_storm_warning_events, ...)."""
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s*(\w*pause\w*):\s*(\d+)", text, re.MULTILINE)}


def _port_qos(ctx: HostContext, p: RdmaPort, netdev: str, fails: list[str], warns: list[str],
              sources: set[str]) -> tuple[dict, list[str]]:
    """One RoCE port's findings (appended to `fails`/`warns`), its machine-readable values and evidence parts."""
    info: dict = {"netdev": netdev}
    parts = []
    label = f"{p.name} ({netdev})"
    ecn = _ecn(ctx, netdev)
    if ecn:
        sources.add(f"{ctx.path('/sys/class/net')}/*/ecn/roce_{{np,rp}}/enable/*")
        info["ecn"] = ecn
        parts.append(" ".join(f"ECN {side[5:]} prio {','.join(map(str, on)) or 'none'}" for side, on in ecn.items()))
        if not any(ecn.values()):
            warns.append(f"{label}: ECN disabled on every priority")
    mtu_text = ctx.read(f"/sys/class/net/{netdev}/mtu")
    if mtu_text and mtu_text.isdigit():
        sources.add(f"{ctx.path('/sys/class/net')}/*/mtu")
        mtu, path_mtu = int(mtu_text), roce_mtu(int(mtu_text))
        info["mtu"], info["roce_mtu"] = mtu, path_mtu
        parts.append(f"MTU {mtu} (RoCE {path_mtu})")
        if path_mtu is None or path_mtu < IB_MTUS[0]:
            warns.append(f"{label}: MTU {mtu} gives RoCE messages of {path_mtu} bytes, below 4096 (needs MTU >= "
                         f"{IB_MTUS[0] + ROCE_HEADER_BYTES}): more packets and more per-packet work per byte")
    qos = ctx.tool_output(["mlnx_qos", "-i", netdev], f"mlnx_qos_{netdev}.txt")
    if qos.ok:
        pfc, trust = parse_mlnx_qos_pfc(qos.text), parse_mlnx_qos_trust(qos.text)
        if pfc is not None or trust is not None:
            sources.add(qos.source)
        if pfc is not None:
            info["pfc_priorities"] = pfc
            parts.append(f"PFC prio {','.join(map(str, pfc)) or 'none'}")
            if not pfc:
                fails.append(f"{label}: PFC off on every priority: RoCE is not lossless, a congested switch drops "
                             f"packets and the HCA recovers by go-back-N retransmission (collectives stall)")
        if trust is not None:
            info["trust"] = trust
            parts.append(f"trust {trust}")
            if trust != "dscp":
                warns.append(f"{label}: trust {trust}, not dscp: untagged RoCE traffic is classified by VLAN PCP it "
                             f"does not carry and lands in priority 0, outside the PFC/ECN priority")
    stats = ctx.tool_output(["ethtool", "-S", netdev], f"ethtool_{netdev}.txt")
    pause = parse_ethtool_pause(stats.text) if stats.ok else {}
    if pause:
        sources.add(stats.source)
        info["pause"] = pause
        rx = sum(v for k, v in pause.items() if k.startswith("rx_") and "storm" not in k)
        tx = sum(v for k, v in pause.items() if k.startswith("tx_") and "storm" not in k)
        parts.append(f"pause rx {rx} tx {tx}")
        storms = {k: v for k, v in pause.items() if "storm" in k and v > 0}
        if storms:
            warns.append(f"{label}: pause storm events {storms}")
    return info, parts


def check_rdma_pfc(ctx: HostContext) -> Check:
    roce = [p for p in read_rdma_ports(ctx) if p.link_layer.lower() == "ethernet"]
    if not roce:
        return RDMA_PFC.result("skip", "no RoCE ports", measured=str(ctx.path("/sys/class/infiniband")))
    lines, fails, warns, details, sources = [], [], [], {}, set()
    for p in roce:
        netdev = _roce_netdev(ctx, p)
        if netdev is None:
            lines.append(f"{p.name}: netdev unknown")
            continue
        info, parts = _port_qos(ctx, p, netdev, fails, warns, sources)
        if len(info) > 1:
            details[p.name] = info
            lines.append(f"{p.name} ({netdev}): {'; '.join(parts)}")
    if not details:
        return RDMA_PFC.result("skip", f"RoCE ports {', '.join(p.name for p in roce)} but no ECN, MTU (sysfs), "
                                       f"mlnx_qos or ethtool -S data readable",
                               measured=str(ctx.path("/sys/class/net")))
    fixes = []
    if any("PFC off" in f for f in fails):
        fixes.append("enable PFC on the RoCE priority, the same as the switch's (mlnx_qos -i IF --pfc "
                     "0,0,0,1,0,0,0,0 for priority 3)")
    if any("not dscp" in w for w in warns):
        fixes.append("mlnx_qos -i IF --trust dscp")
    if any("MTU" in w for w in warns):
        fixes.append("ip link set IF mtu 9000 (and the switch ports' MTU to match)")
    if any("ECN disabled" in w for w in warns):
        fixes.append("enable ECN on the RoCE priority (mlx5: echo 1 > /sys/class/net/IF/ecn/roce_np/enable/N and "
                     "roce_rp/enable/N)")
    if any("pause storm" in w for w in warns):
        fixes.append("pause storms: find the stuck receiver (the port's peer) and check the switch's PFC watchdog")
    status = "fail" if fails else "warn" if warns else "pass"
    return RDMA_PFC.result(status, "; ".join(fails + warns + lines), fix="; ".join(fixes),
                           measured="; ".join(sorted(sources)), ports=details)
