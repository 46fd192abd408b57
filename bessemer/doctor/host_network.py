"""Host checks of the interconnect: NCCL environment, InfiniBand/RoCE port state and error counters, RoCE
congestion control (ECN/PFC). Everything comes from sysfs, the environment, or (optionally) mlnx_qos/ethtool
output. No torch."""

import re
from dataclasses import dataclass

from bessemer.doctor.check import Check
from bessemer.doctor.host_context import CheckInfo, HostContext

NCCL_ENV = CheckInfo("nccl.env", "NCCL / torch.distributed environment variables: deprecated, contradictory or "
                                 "naming absent devices")
RDMA_LINKS = CheckInfo("rdma.links", "InfiniBand/RoCE ports active, at one rate, without link or receive errors")
RDMA_PFC = CheckInfo("rdma.pfc", "RoCE congestion control: ECN enabled and PFC pause counters")

DEPRECATED_ENV = {
    "NCCL_ASYNC_ERROR_HANDLING": "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_BLOCKING_WAIT": "TORCH_NCCL_BLOCKING_WAIT",
    "NCCL_DESYNC_DEBUG": "TORCH_NCCL_DESYNC_DEBUG",
}
SECRET_MARKERS = ("KEY", "SECRET", "TOKEN", "PASSWORD")
TORCH_PG_TIMEOUT_S = 600.0  # torch.distributed's default NCCL process-group timeout (10 min)

# Counters that mean bits are lost on the wire or the link flapped: NCCL retries and stalls, then times out.
RDMA_FAIL_COUNTERS = ("port_rcv_errors", "symbol_error", "link_downed")
RDMA_WARN_COUNTERS = ("port_xmit_discards", "port_rcv_remote_physical_errors", "local_link_integrity_errors")


def _shown(name: str, value: str) -> str:
    return f"{name}=***" if any(m in name.upper() for m in SECRET_MARKERS) else f"{name}={value}"


def _name_list(spec: str) -> tuple[list[str], bool, bool]:
    """NCCL's interface/HCA list syntax: `^a,b` excludes, `=a,b` matches exactly, `a,b` matches by prefix;
    HCA entries may carry `:port`. Returns (names, exclude, exact)."""
    exclude = spec.startswith("^")
    spec = spec.removeprefix("^")
    exact = spec.startswith("=")
    names = [n.split(":")[0] for n in spec.removeprefix("=").split(",") if n]
    return names, exclude, exact


def _unmatched(spec: str, present: list[str]) -> list[str]:
    names, exclude, exact = _name_list(spec)
    if exclude:
        return []
    return [n for n in names if not any(p == n if exact else p.startswith(n) for p in present)]


def check_nccl_env(ctx: HostContext) -> Check:
    env = ctx.environ
    measured = "os.environ" if ctx.live else str(ctx.path("/environ"))
    relevant = sorted(k for k in env if k.startswith(("NCCL_", "TORCH_NCCL_", "BESSEMER_PG_")))
    listed = ", ".join(_shown(k, env[k]) for k in relevant) or "no NCCL_*/TORCH_NCCL_* variables set"
    fails, warns, fixes = [], [], []
    for old, new in DEPRECATED_ENV.items():
        if old in env:
            warns.append(f"{old} is deprecated (torch reads {new})")
            fixes.append(f"rename {old} to {new}")
    ib_devices = ctx.listdir("/sys/class/infiniband")
    if env.get("NCCL_IB_DISABLE", "0").strip() == "1" and ib_devices:
        fails.append(f"NCCL_IB_DISABLE=1 on a node with RDMA devices ({', '.join(ib_devices)}): traffic falls back "
                     f"to TCP sockets")
        fixes.append("unset NCCL_IB_DISABLE")
    if env.get("NCCL_SOCKET_IFNAME"):
        missing = _unmatched(env["NCCL_SOCKET_IFNAME"], ctx.listdir("/sys/class/net"))
        if missing:
            fails.append(f"NCCL_SOCKET_IFNAME names {', '.join(missing)}, not an interface here "
                         f"({', '.join(ctx.listdir('/sys/class/net')) or 'none'})")
            fixes.append("set NCCL_SOCKET_IFNAME to an interface from `ip -br link` (prefix match, `=` for exact)")
    if env.get("NCCL_IB_HCA") and ib_devices:
        missing = _unmatched(env["NCCL_IB_HCA"], ib_devices)
        if missing:
            fails.append(f"NCCL_IB_HCA names {', '.join(missing)}, not an RDMA device here ({', '.join(ib_devices)})")
            fixes.append("set NCCL_IB_HCA to devices from `ibv_devices`")
    timeout_s, source = TORCH_PG_TIMEOUT_S, "torch default"
    for name in ("BESSEMER_PG_TIMEOUT_S", "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"):
        try:
            timeout_s, source = float(env[name]), name
            break
        except (KeyError, ValueError):
            continue
    if ctx.checkpoint_save_s is not None and timeout_s < 2 * ctx.checkpoint_save_s:
        warns.append(f"collective timeout {timeout_s:g} s ({source}) < 2 x checkpoint save time "
                     f"{ctx.checkpoint_save_s:g} s: ranks waiting on a slow save are killed")
        fixes.append(f"raise BESSEMER_PG_TIMEOUT_S / TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC to >= "
                     f"{2 * ctx.checkpoint_save_s:.0f}")
    details = {"variables": {k: _shown(k, env[k]).partition("=")[2] for k in relevant}, "timeout_s": timeout_s}
    if fails or warns:
        return NCCL_ENV.result("fail" if fails else "warn", "; ".join(fails + warns) + f" [{listed}]",
                               fix="; ".join(fixes), measured=measured, **details)
    return NCCL_ENV.result("pass", listed, measured=measured, **details)


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


def check_rdma_links(ctx: HostContext) -> Check:
    measured = str(ctx.path("/sys/class/infiniband")) + "/*/ports/*/{state,phys_state,rate,link_layer,counters/}"
    ports = read_rdma_ports(ctx)
    if not ports:
        return RDMA_LINKS.result("skip", "no InfiniBand/RoCE devices", measured=measured)
    down, errors, warns, lines = [], [], [], []
    for p in ports:
        lines.append(f"{p.name} {p.state} {p.phys_state} {p.rate} {p.link_layer}")
        if p.state != "ACTIVE":
            down.append(f"{p.name} is {p.state} ({p.phys_state})")
        bad = {k: v for k, v in p.counters.items() if v > 0}
        hard = [f"{k}={v}" for k, v in bad.items() if k in RDMA_FAIL_COUNTERS]
        soft = [f"{k}={v}" for k, v in bad.items() if k in RDMA_WARN_COUNTERS]
        if hard:
            errors.append(f"{p.name} {' '.join(hard)}")
        if soft:
            warns.append(f"{p.name} {' '.join(soft)}")
    rates = {p.rate for p in ports if p.state == "ACTIVE"}
    if len(rates) > 1:
        warns.append(f"active ports at mixed rates ({', '.join(sorted(rates))}): the slowest sets the collective's "
                     f"speed")
    fixes = []
    if down:
        fixes.append("port down: `ibstat`, `ip link`, check the cable and the switch port, and that a subnet manager "
                     "runs (InfiniBand: `sminfo`)")
    if errors or warns:
        fixes.append("errors: reseat or replace the cable/transceiver, read counters with `perfquery -x`, check the "
                     "switch port; counters are cumulative, so clear (`perfquery -R`) and recheck")
    fails = down + errors
    details = {"ports": [p.__dict__ for p in ports]}
    evidence = "; ".join(fails + warns + lines)
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


def parse_mlnx_qos_pfc(text: str) -> list[int] | None:
    """Priorities with PFC enabled, from `mlnx_qos -i IF` ("PFC configuration:" / "enabled 0 0 0 1 0 0 0 0")."""
    match = re.search(r"PFC configuration:.*?\n\s*priority\s+([\d\s]+)\n\s*enabled\s+([\d\s]+)", text, re.S)
    if not match:
        return None
    prios, enabled = match.group(1).split(), match.group(2).split()
    return [int(p) for p, e in zip(prios, enabled) if e == "1"]


def parse_ethtool_pause(text: str) -> dict[str, int]:
    """Pause-frame and pause-storm counters from `ethtool -S IF` (mlx5 names: rx_pause_ctrl_phy,
    rx_prio3_pause, tx_pause_storm_warning_events, ...)."""
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s*(\w*pause\w*):\s*(\d+)", text, re.M)}


def check_rdma_pfc(ctx: HostContext) -> Check:
    roce = [p for p in read_rdma_ports(ctx) if p.link_layer.lower() == "ethernet"]
    if not roce:
        return RDMA_PFC.result("skip", "no RoCE ports", measured=str(ctx.path("/sys/class/infiniband")))
    lines, warns, details, sources = [], [], {}, set()
    for p in roce:
        netdev = _roce_netdev(ctx, p)
        if netdev is None:
            lines.append(f"{p.name}: netdev unknown")
            continue
        info: dict = {"netdev": netdev}
        parts = []
        ecn = _ecn(ctx, netdev)
        if ecn:
            sources.add(f"{ctx.path('/sys/class/net')}/*/ecn/roce_{{np,rp}}/enable/*")
            info["ecn"] = ecn
            parts.append(" ".join(f"ECN {side[5:]} prio {','.join(map(str, on)) or 'none'}"
                                  for side, on in ecn.items()))
            if not any(ecn.values()):
                warns.append(f"{p.name} ({netdev}): ECN disabled on every priority")
        qos = ctx.tool_output(["mlnx_qos", "-i", netdev], f"mlnx_qos_{netdev}.txt")
        pfc = parse_mlnx_qos_pfc(qos.text) if qos.ok else None
        if pfc is not None:
            sources.add(qos.source)
            info["pfc_priorities"] = pfc
            parts.append(f"PFC prio {','.join(map(str, pfc)) or 'none'}")
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
                warns.append(f"{p.name} ({netdev}): pause storm events {storms}")
        if len(info) > 1:
            details[p.name] = info
            lines.append(f"{p.name} ({netdev}): {'; '.join(parts)}")
    if not details:
        return RDMA_PFC.result("skip", f"RoCE ports {', '.join(p.name for p in roce)} but no ECN (sysfs), "
                                       f"mlnx_qos or ethtool -S data readable",
                               measured=str(ctx.path("/sys/class/net")))
    fix = ("enable ECN on the RoCE traffic class (mlx5: echo 1 > /sys/class/net/IF/ecn/roce_np/enable/N and "
           "roce_rp/enable/N, N the RoCE priority), match PFC with the switch (mlnx_qos -i IF --pfc "
           "0,0,0,1,0,0,0,0); pause storms: find the stuck receiver (the port's peer) and check the switch's PFC "
           "watchdog") if warns else ""
    return RDMA_PFC.result("warn" if warns else "pass", "; ".join(warns + lines), fix=fix,
                           measured="; ".join(sorted(sources)), ports=details)
