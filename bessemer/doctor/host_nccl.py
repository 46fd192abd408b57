"""Host check of the NCCL / torch.distributed environment (nccl.env): variables that are deprecated, misspelt,
harmful (errors that hang, peer-to-peer off) or that name absent devices, and the run's collective timeout against
one checkpoint save. Reads the environment and sysfs. No torch. The fabric's checks are in host_rdma.py."""

import difflib
from dataclasses import dataclass, field

from bessemer.doctor.check import Check
from bessemer.doctor.host_context import CheckInfo, HostContext

NCCL_ENV = CheckInfo("nccl.env", "NCCL / torch.distributed environment variables: harmful, deprecated, unknown or "
                                 "naming absent devices; collective timeout vs checkpoint save")

# torch reads these under a TORCH_ prefix; the old names still work, with a deprecation warning.
DEPRECATED_ENV = {
    "NCCL_ASYNC_ERROR_HANDLING": "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_BLOCKING_WAIT": "TORCH_NCCL_BLOCKING_WAIT",
    "NCCL_DESYNC_DEBUG": "TORCH_NCCL_DESYNC_DEBUG",
}
# Every variable NCCL reads, without the NCCL_ prefix: the NCCL_PARAM and getenv names of NVIDIA/nccl's src/
# (release 2.30), plus names of older releases still found in job scripts. NCCL ignores any other NCCL_* name.
NCCL_VARIABLES = frozenset((  # noqa: SIM905 (a word list of 254 names reads better than a list literal)
    'ALGO ALLGATHERV_ENABLE ALLOC_P2P_NET_LL_BUFFERS BUFFSIZE CGA_CLUSTER_SIZE CHECKS_DISABLE CHECK_MODE '
    'CHECK_POINTERS CHUNK_SIZE COLLNET_ENABLE COLLNET_NODE_THRESHOLD COMM_BLOCKING COMM_ID '
    'COMM_SHRINK_SHARE_RESOURCES COMM_SPLIT_SHARE_RESOURCES CONF_FILE CONNECT_ROUND_MAX_PEERS CROSS_NIC '
    'CTA_POLICY CUMEM_ENABLE CUMEM_HOST_ENABLE DEBUG DEBUG_FILE DEBUG_SUBSYS DEBUG_TIMESTAMP_FORMAT '
    'DEBUG_TIMESTAMP_LEVELS DEV_API_JIT DISABLE_MEM_MANAGER DMABUF_ENABLE ELASTIC_BUFFER_REGISTER '
    'ENABLE_VERSION_CHECK ENV_PLUGIN GDAKI_USE_RELIABLE_DB GDRCOPY_ENABLE GDRCOPY_FIFO_ENABLE '
    'GDRCOPY_FLUSH_ENABLE GDRCOPY_SYNC_ENABLE GDR_FLUSH_DISABLE GIN_ENABLE GIN_ERROR_QUERY_SEC '
    'GIN_GDAKI_MAX_DEST_RD_ATOMIC GIN_GDAKI_MAX_QP_RD_ATOMIC GIN_GDAKI_NIC_HANDLER GIN_GDAKI_QP_DEPTH GIN_IB_TC '
    'GIN_NCONNECTIONS GIN_PLUGIN GIN_PLUGIN_REF_COUNT GIN_PROXY_QUEUE_SIZE GIN_TYPE GRAPH_DUMP_FILE '
    'GRAPH_DUMP_FILE_RANK GRAPH_FILE GRAPH_HELPER_DISABLE GRAPH_MIXING_SUPPORT GRAPH_REGISTER '
    'GRAPH_STREAM_ORDERING GROUP_CUDA_STREAM HOSTID IBVERBS_LIB IB_ADAPTIVE_ROUTING IB_ADDR_FAMILY IB_ADDR_RANGE '
    'IB_AR_THRESHOLD IB_CUDA_SUPPORT IB_DATA_DIRECT IB_DEVICE_PCI_ORDER IB_DISABLE IB_ECE_ENABLE IB_FIFO_TC '
    'IB_GID_INDEX IB_HCA IB_MERGE_NICS IB_MERGE_VFS IB_MQP_RETRY_ALL IB_MQP_RETRY_CNT IB_MQP_RETRY_SLEEP_MSEC '
    'IB_OOO_RQ IB_PCI_RELAXED_ORDERING IB_PKEY IB_PREPOST_RECEIVE_WORK_REQUESTS IB_QPS_PER_CONNECTION '
    'IB_QUERY_PORT_SPEED IB_RECEIVER_SIDE_MATCHING_SCHEME IB_RESILIENCY_PORT_FAILOVER '
    'IB_RESILIENCY_PORT_FAILOVER_MAX_ATTEMPTS IB_RESILIENCY_PORT_FAILOVER_PROBE_DELAY '
    'IB_RESILIENCY_PORT_RECOVERY IB_RESILIENCY_PORT_RECOVERY_ACK_TIMEOUT '
    'IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_INTERVAL IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_SIZE '
    'IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_SEQUENCE_SIZE IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_TIMEOUT '
    'IB_RESILIENCY_PORT_RECOVERY_ATTEMPTS_MAX IB_RESILIENCY_PORT_RECOVERY_START_DELAY IB_RETRY_CNT '
    'IB_RETURN_ASYNC_EVENTS IB_ROCE_VERSION_NUM IB_ROUTABLE_FLID_GID_INDEX IB_SL IB_SPLIT_DATA_ON_QPS '
    'IB_SUBNET_AWARE_ROUTING IB_SUBNET_PREFIX_LEN IB_TC IB_TIMEOUT IB_USE_INLINE IB_WARN_RAIL_LOCAL '
    'IGNORE_COLLNET_MISMATCH IGNORE_CPU_AFFINITY IGNORE_DISABLED_P2P IGNORE_NET_MISMATCH IPC_USE_ABSTRACT_SOCKET '
    'L1_SHARED_MEMORY_CARVEOUT LAUNCH_MODE LAUNCH_ORDER_IMPLICIT LAUNCH_RACE_FATAL LEGACY_CUDA_REGISTER '
    'LL128_BUFFSIZE LL128_C2C LL128_NTHREADS LL_BUFFSIZE LL_THRESHOLD LOCAL_REGISTER LSA_TEAM_SIZE MAX_CTAS '
    'MAX_NCHANNELS MAX_NRINGS MAX_P2P_NCHANNELS MAX_RINGS MEM_SYNC_DOMAIN MIN_CTAS MIN_NCHANNELS MIN_NRINGS '
    'MIN_P2P_NCHANNELS MIN_RINGS MLOPART_RDMA_ENABLE MNNVL_CLIQUE_ID MNNVL_CROSS_CLIQUE MNNVL_ENABLE '
    'MNNVL_RAIL_PER_HOST MNNVL_SCATTER_NETS_ENABLE MNNVL_UUID MULTI_RANK_GPU_ENABLE MULTI_SEGMENT_REGISTER '
    'NCHANNELS_PER_NET_PEER NET NETDEVS_POLICY NET_DISABLE_INTRA NET_FORCE_FLUSH NET_FORCE_MERGE NET_GDR_C2C '
    'NET_GDR_LEVEL NET_GDR_MLOPART NET_GDR_READ NET_MERGE_LEVEL NET_MERGE_POLICY NET_OPTIONAL_RECV_COMPLETION '
    'NET_OVERHEAD NET_PLUGIN NET_PLUGIN_REF_COUNT NET_SHARED_BUFFERS NET_SHARED_COMMS NSOCKS_PERTHREAD NTHREADS '
    'NUM_RMA_CTX NVB_DISABLE NVB_PRECONNECT NVLINK_UTIL_CENTRIC_SCHED_ENABLE NVLSTREE_MAX_CHUNKSIZE '
    'NVLS_CHUNKSIZE NVLS_ENABLE NVLS_NCHANNELS NVTX_DISABLE OOB_NET_ENABLE OOB_NET_IFNAME P2P_DIRECT_DISABLE '
    'P2P_DISABLE P2P_EPOCH_ENABLE P2P_LEVEL P2P_LL_THRESHOLD P2P_MAX_PEERS P2P_NET_CHUNKSIZE P2P_NVL_CHUNKSIZE '
    'P2P_PCI_CHUNKSIZE P2P_PER_CHANNEL_NET_BW P2P_PXN_LEVEL P2P_READ_ENABLE P2P_SCHEDULE_GROUP_SIZE '
    'P2P_USE_CUDA_MEMCPY PARAM_DUMP_ALL PAT_ENABLE PLUGIN_P2P PROFILER_PLUGIN PROGRESS_APPENDOP_FREQ PROTO '
    'PROXY_APPEND_BATCH_SIZE PROXY_CPUSET PROXY_DUMP_SIGNAL PXN_C2C PXN_DISABLE RAS_ADDR RAS_ENABLE '
    'RAS_TIMEOUT_FACTOR REPORT_CONNECT_PROGRESS RMA_DISABLE RMA_PLUGIN RMA_PLUGIN_REF_COUNT '
    'RMA_PROXY_DUMP_SIGNAL RMA_PROXY_QUEUE_SIZE RUNTIME_CONNECT SET_CPU_STACK_SIZE SET_STACK_SIZE '
    'SET_THREAD_NAME SHADOW_MEMPOOL_MAX_SIZE SHM_DISABLE SHM_LOCALITY SHM_MEMCPY_MODE SHM_USE_CUDA_MEMCPY '
    'SINGLE_PROC_MEM_REG_ENABLE SINGLE_RING_THRESHOLD SOCKET_FAMILY SOCKET_IFNAME SOCKET_INLINE SOCKET_MAGIC '
    'SOCKET_MIN_TASKSIZE SOCKET_NTHREADS SOCKET_POLL_TIMEOUT_MSEC SOCKET_RCVBUF SOCKET_RETRY_CNT '
    'SOCKET_RETRY_SLEEP_MSEC SOCKET_SNDBUF SYM_CE_THRESHOLD SYM_CTAS SYM_GIN_KERNELS_ENABLE SYM_KERNEL '
    'SYM_NOWIN_ENABLE SYM_REUSE_SYSMEM_HANDLES SYM_RS_GIN_CHUNK_SIZE SYM_TMA_ENABLE THREAD_THRESHOLDS '
    'TOPO_DUMP_FILE TOPO_DUMP_FILE_RANK TOPO_FILE TOPO_SPLIT_MLOPART TREE_THRESHOLD TUNER_PLUGIN '
    'UID_STAGGER_RATE UID_STAGGER_THRESHOLD UNPACK_DOUBLE_NCHANNELS WIN_ENABLE WIN_STRIDE WORK_ARGS_BYTES '
    'WORK_FIFO_BYTES WORK_FIFO_DEPTH '
).split())
# Network and tuner plugins read variables of their own under these prefixes (Google's FasTrak and TCPX, the UCX
# and SHARP plugins): not NCCL's, not typos.
PLUGIN_PREFIXES = ("NCCL_FASTRAK_", "NCCL_GPUDIRECTTCPX_", "NCCL_UCX_", "NCCL_SHARP_")
# Names often advised that NCCL never reads, and what does what the advice intends.
NOT_NCCL = {
    "NCCL_TIMEOUT": "NCCL has no timeout variable: the collective timeout is the process group's, parallel.timeout_s "
                    "in the run config; TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC bounds how long torch's watchdog may be "
                    "stuck before it kills the process",
}
SECRET_MARKERS = ("KEY", "SECRET", "TOKEN", "PASSWORD")
DEFAULT_TIMEOUT_S = 600.0  # parallel.timeout_s's default (and torch's): the timeout of a run not given by --config


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


@dataclass
class Findings:
    """What nccl.env found, by severity, with one fix per failure or warning (notes need none)."""

    fails: list[str] = field(default_factory=list)
    warns: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)

    def add(self, severity: str, finding: str, fix: str) -> None:
        getattr(self, severity + "s").append(finding)
        self.fixes.append(fix)


def _names(env: dict, found: Findings) -> None:
    """Deprecated names, names NCCL does not read (a typo is silently ignored), and the few that are advised
    but do nothing."""
    for old, new in DEPRECATED_ENV.items():
        if old in env:
            found.add("warn", f"{old} is deprecated (torch reads it, with a warning, as {new})",
                      f"rename {old} to {new}")
    for name in sorted(env):
        if (not name.startswith("NCCL_") or name in DEPRECATED_ENV or name.removeprefix("NCCL_") in NCCL_VARIABLES
                or name.startswith(PLUGIN_PREFIXES)):
            continue
        if name in NOT_NCCL:
            found.add("warn", f"{name} is not an NCCL variable and does nothing", f"unset {name}: {NOT_NCCL[name]}")
            continue
        close = difflib.get_close_matches(name.removeprefix("NCCL_"), NCCL_VARIABLES, n=1, cutoff=0.75)
        hint = f" (did you mean NCCL_{close[0]}?)" if close else ""
        found.add("warn", f"{name} is not a variable NCCL reads{hint}: NCCL ignores it",
                  f"rename {name} to NCCL_{close[0]}" if close else
                  f"check {name} against https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html")


def _harmful(env: dict, found: Findings) -> None:
    """Settings that turn errors into hangs or switch off the fast intra-node path."""
    for name in ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING"):
        if env.get(name, "").strip() == "0":
            found.add("fail", f"{name}=0: a failed or timed-out collective is never aborted, so an error on one rank "
                              f"becomes a hang of every rank (no restart, no message)",
                      f"unset {name} (torch's default 3 tears the process down after a timeout)")
    if env.get("NCCL_P2P_DISABLE", "").strip() == "1" or env.get("NCCL_P2P_LEVEL", "").strip() in ("LOC", "0"):
        which = "NCCL_P2P_DISABLE=1" if env.get("NCCL_P2P_DISABLE", "").strip() == "1" else \
            f"NCCL_P2P_LEVEL={env['NCCL_P2P_LEVEL']}"
        # A warning, not a failure: it is the usual workaround while IOMMU/ACS settings make peer-to-peer hang.
        found.add("warn", f"{which}: NVLink/PCIe peer-to-peer off, GPUs of a node exchange data through host "
                          f"memory at a fraction of NVLink's bandwidth",
                  "unset NCCL_P2P_DISABLE / NCCL_P2P_LEVEL; if it was set because peer-to-peer hangs, fix the cause "
                  "(ACS enabled on PCIe switches, IOMMU not in passthrough) and check with nccl-tests")


def _devices(ctx: HostContext, env: dict, found: Findings) -> None:
    """Variables that name interfaces or HCAs this node lacks, or switch the RDMA fabric off."""
    ib_devices = ctx.listdir("/sys/class/infiniband")
    if env.get("NCCL_IB_DISABLE", "0").strip() == "1" and ib_devices:
        found.add("fail", f"NCCL_IB_DISABLE=1 on a node with RDMA devices ({', '.join(ib_devices)}): traffic falls "
                          f"back to TCP sockets", "unset NCCL_IB_DISABLE")
    if env.get("NCCL_SOCKET_IFNAME"):
        interfaces = ctx.listdir("/sys/class/net")
        missing = _unmatched(env["NCCL_SOCKET_IFNAME"], interfaces)
        if missing:
            found.add("fail", f"NCCL_SOCKET_IFNAME names {', '.join(missing)}, not an interface here "
                              f"({', '.join(interfaces) or 'none'})",
                      "set NCCL_SOCKET_IFNAME to an interface from `ip -br link` (prefix match, `=` for exact)")
    if env.get("NCCL_IB_HCA") and ib_devices:
        missing = _unmatched(env["NCCL_IB_HCA"], ib_devices)
        if missing:
            found.add("fail", f"NCCL_IB_HCA names {', '.join(missing)}, not an RDMA device here "
                              f"({', '.join(ib_devices)})", "set NCCL_IB_HCA to devices from `ibv_devices`")


def _timeout(ctx: HostContext, found: Findings) -> float:
    """The run's collective timeout against one checkpoint save: ranks that wait in a collective while another
    rank still writes are killed once the timeout passes. Returns the timeout used."""
    timeout_s = ctx.timeout_s if ctx.timeout_s is not None else DEFAULT_TIMEOUT_S
    source = "parallel.timeout_s" if ctx.timeout_s is not None else "parallel.timeout_s default"
    save_s = ctx.checkpoint_save_s
    basis = f" ({ctx.save_basis})" if ctx.save_basis else ""
    if save_s is None:
        if ctx.save_basis:
            found.notes.append(f"timeout vs checkpoint save not compared: {ctx.save_basis}")
        return timeout_s
    fix = (f"raise parallel.timeout_s to >= {2 * save_s:.0f} s, or shorten the blocking part of a save "
           f"(checkpoint.async_save = true, faster storage for the tier)")
    compared = f"collective timeout {timeout_s:g} s ({source})"
    if timeout_s < save_s:
        found.add("fail", f"{compared} < one checkpoint save {save_s:.0f} s{basis}: ranks waiting on a rank that "
                          f"still saves are killed", fix)
    elif timeout_s < 2 * save_s:
        found.add("warn", f"{compared} < 2 x checkpoint save {save_s:.0f} s{basis}: a save slower than usual kills "
                          f"the ranks waiting on it", fix)
    else:
        found.notes.append(f"{compared} >= 2 x checkpoint save {save_s:.0f} s{basis}")
    return timeout_s


def check_nccl_env(ctx: HostContext) -> Check:
    env = dict(ctx.environ)
    measured = "os.environ" if ctx.live else str(ctx.path("/environ"))
    relevant = sorted(k for k in env if k.startswith(("NCCL_", "TORCH_NCCL_")))
    listed = ", ".join(_shown(k, env[k]) for k in relevant) or "no NCCL_*/TORCH_NCCL_* variables set"
    found = Findings()
    _harmful(env, found)
    _devices(ctx, env, found)
    _names(env, found)
    timeout_s = _timeout(ctx, found)
    details = {"variables": {k: _shown(k, env[k]).partition("=")[2] for k in relevant}, "timeout_s": timeout_s,
               "checkpoint_save_s": ctx.checkpoint_save_s, "save_basis": ctx.save_basis}
    evidence = "; ".join(found.fails + found.warns + found.notes + [f"[{listed}]"])
    status = "fail" if found.fails else "warn" if found.warns else "pass"
    return NCCL_ENV.result(status, evidence, fix="; ".join(found.fixes), measured=measured, **details)
