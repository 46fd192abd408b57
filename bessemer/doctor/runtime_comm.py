"""Runtime checks that time the process group: collective bandwidth per mesh dimension and clock skew.

Both need every rank of the job running (`bessemer doctor --runtime` under torchrun); `runtime.py` calls them
with the mesh it built. Units: sizes in MiB (2^20 bytes), bandwidths in GB/s (10^9 bytes/s), as nccl-tests.
The bandwidth a group reaches is compared with what the planner assumes for it (plan/catalog.py and
plan/throughput.py, torch-free), so a fabric slower than the plan shows before the run does.
"""

import time
from collections import Counter
from collections.abc import Callable

import torch
import torch.distributed as dist

from bessemer.doctor.check import Check

MIB = 1 << 20
GB = 1e9
WARMUP = 2  # untimed iterations first: connection setup and allocator growth stay out of the numbers
SLOW_GROUP_RATIO = 2.0  # warn when one group of a dimension is this many times slower than its best group
SKEW_WARN_S = 0.1  # 100 ms: log lines and traces of different ranks stop lining up
SKEW_FAIL_S = 1.0  # 1 s: timeouts and time-based schedules disagree between ranks
CLOCK_ROUNDS = 8  # ping-pongs per rank; the one with the shortest round trip gives the estimate
BELOW_EXPECTED = 0.7  # warn when a dimension's peak busbw is below this share of the planner's figure
# Largest default message: bus bandwidth climbs with the size until latency stops mattering and levels off in
# the hundreds of MiB on NVLink and InfiniBand (nccl-tests sweeps to GiBs). gloo on CPU copies through host
# memory at a few GB/s, so 256 MiB would cost seconds per call for a figure nothing is compared with.
DEFAULT_MAX_MIB = {"cuda": 256.0, "cpu": 16.0}

# ranks of one group -> (the planner's all_reduce busbw for it in GB/s, or None; where it came from, or why none)
Expectation = Callable[[list[int]], tuple[float | None, str]]


# torch 2.13 renamed all_gather_into_tensor (the old name warns); older releases have only the old one.
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_op(op, group, iters: int, device: torch.device) -> float:
    """Seconds per call of `op`, the slowest rank of `group` (a collective ends when its last rank does)."""
    for _ in range(WARMUP):
        op()
    flag = torch.zeros(1, device=device)
    dist.all_reduce(flag, group=group)  # start together
    _sync(device)
    t = time.perf_counter()
    for _ in range(iters):
        op()
    _sync(device)
    elapsed = torch.tensor([(time.perf_counter() - t) / iters], dtype=torch.float64, device=device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=group)
    return float(elapsed.item())


def _time_group(group, n: int, sizes_mb: tuple[float, ...], iters: int, device: torch.device) -> list[dict]:
    rows = []
    for mb in sizes_mb:
        numel = max(n, int(mb * MIB) // 4 // n * n)  # float32, divisible by the group size
        nbytes = numel * 4
        buf = torch.zeros(numel, device=device)
        shard = torch.zeros(numel // n, device=device)
        gathered = torch.empty(numel, device=device)
        t_ar = _time_op(lambda b=buf: dist.all_reduce(b, group=group), group, iters, device)
        t_ag = _time_op(lambda o=gathered, i=shard: _all_gather(o, i, group=group), group, iters, device)
        # nccl-tests (doc/PERFORMANCE.md): algbw = S / t with S the full buffer (all_gather: the output);
        # busbw scales it to the traffic of one link of a ring: 2(n-1)/n for all_reduce, (n-1)/n for all_gather.
        ar_alg, ag_alg = nbytes / t_ar / GB, nbytes / t_ag / GB
        rows.append({"size_mib": mb, "bytes": nbytes,
                     "all_reduce": {"time_us": t_ar * 1e6, "algbw": ar_alg, "busbw": ar_alg * 2 * (n - 1) / n},
                     "all_gather": {"time_us": t_ag * 1e6, "algbw": ag_alg, "busbw": ag_alg * (n - 1) / n}})
    return rows


def measure_busbw(mesh, dims: dict[str, int], sizes_mb: tuple[float, ...], iters: int,
                  device: torch.device) -> dict[str, tuple[list[int], list[dict]]]:
    """This rank's group and its timings for every dimension in `dims` (name -> size, each > 1; "world" is the
    whole job). Every group of a dimension runs at once, as in training, so links they share are shared here."""
    out = {}
    for name, n in dims.items():
        if name == "world":
            group, ranks = dist.group.WORLD, list(range(n))
        else:
            group, ranks = mesh.get_group(name), mesh[name].mesh.flatten().tolist()
        out[name] = (ranks, _time_group(group, n, sizes_mb, iters, device))
    return out


def size_ladder(max_mib: float) -> tuple[float, ...]:
    """1, 4, 16, 64, 256 ... MiB up to `max_mib`, which ends the ladder when it is not on it."""
    sizes, size = [], 1.0
    while size <= max_mib:
        sizes.append(size)
        size *= 4
    if not sizes or sizes[-1] < max_mib:
        sizes.append(max_mib)
    return tuple(sizes)


def planner_expectation(gpu_name: str | None, nodes: list[int], network: str | None = None,
                        nics_per_node: int = 0) -> Expectation:
    """The planner's busbw for a group of ranks: `nodes[r]` is rank r's node, `gpu_name` the driver's name of the
    GPUs (None on CPU), `network` a catalog network (`bessemer plan --network`). A group inside one node runs at
    the GPU's intra-node link, one across nodes at the NICs its ranks share (plan/throughput.py group_bandwidth),
    both times the planner's link efficiency. No figure on CPU, for a GPU the catalog lacks, or across nodes
    without `network`: the reason is returned instead."""
    from bessemer.plan.catalog import get_network, match_gpu
    from bessemer.plan.throughput import LINK_EFFICIENCY, Cluster, group_bandwidth

    gpu = match_gpu(gpu_name) if gpu_name else None
    net = get_network(network) if network else None
    per_node = max(Counter(nodes).values())

    def expect(ranks: list[int]) -> tuple[float | None, str]:
        if gpu_name is None:
            return None, "CPU (gloo): the planner has no figure for host-memory collectives, none compared"
        if gpu is None:
            return None, f"{gpu_name!r} is not in the planner's catalog (plan/catalog.py), no figure compared"
        spans = len({nodes[r] for r in ranks}) > 1
        if spans and net is None:
            return None, "the group spans nodes and no --network names the fabric, no figure compared"
        cluster = Cluster(gpu, len(nodes), per_node, network=net, nics_per_node=nics_per_node)
        stride = ranks[1] - ranks[0] if len(ranks) > 1 else 1
        bw, crosses = group_bandwidth(cluster, stride, len(ranks))
        link = f"{gpu.name} {gpu.link} {cluster.intra_gbs:g} GB/s per direction"
        if crosses and net is not None:
            share = max(1, min(len(ranks), per_node // stride))
            link = (f"{net.name} {cluster.nic_gbs_per_gpu:g} GB/s of NIC per GPU x {share} of the group's ranks "
                    f"per node, at most {link}")
        return bw / GB, f"planner: {link}, x link efficiency {LINK_EFFICIENCY:g} (plan/catalog.py, plan/throughput.py)"

    return expect


def _fmt_sizes(rows: list[dict], op: str) -> str:
    return ", ".join(f"{r['size_mib']:g} MiB {r[op]['busbw']:.3g}" for r in rows)


def _peak(rows: list[dict]) -> dict:
    """The size at which all_reduce busbw is highest."""
    return max(rows, key=lambda r: r["all_reduce"]["busbw"])


def busbw_checks(per_rank: list[dict[str, tuple[list[int], list[dict]]]], iters: int,
                 expect: Expectation | None = None) -> list[Check]:
    """One check per dimension from every rank's `measure_busbw` result (in rank order). With `expect`, each
    group's peak all_reduce busbw is compared with the planner's figure for it."""
    checks = []
    for name in per_rank[0]:
        groups = {tuple(r[name][0]): r[name][1] for r in per_rank}  # the ranks of one group report the same
        n = len(next(iter(groups)))
        # The slowest group's numbers, per size: the job runs at the pace of its slowest link.
        worst = [min((rows[i] for rows in groups.values()), key=lambda r: r["all_reduce"]["busbw"])
                 for i in range(len(next(iter(groups.values()))))]
        evidence = (f"{len(groups)} group(s) of {n} ranks; busbw GB/s, slowest group: all_reduce "
                    f"{_fmt_sizes(worst, 'all_reduce')}; all_gather {_fmt_sizes(worst, 'all_gather')}")
        status, fixes = "pass", []
        largest = {g: rows[-1]["all_reduce"]["busbw"] for g, rows in groups.items()}
        best, slow = max(largest, key=largest.get), min(largest, key=largest.get)
        if len(groups) > 1 and largest[best] > SLOW_GROUP_RATIO * largest[slow]:
            status = "warn"
            evidence += (f"; group {list(slow)} reaches {largest[slow]:.2f} GB/s all_reduce busbw at "
                         f"{worst[-1]['size_mib']:g} MiB, group {list(best)} {largest[best]:.2f} "
                         f"(> {SLOW_GROUP_RATIO:g}x apart)")
            fixes.append(f"inspect the links of ranks {list(slow)}: NCCL_DEBUG=INFO shows the transport each ring "
                         "uses (NVLink, PCIe/SHM, NET); `nvidia-smi topo -m` and `ibstat` show degraded or missing "
                         "links")
        peaks = {g: _peak(rows) for g, rows in groups.items()}
        low = min(peaks, key=lambda g: peaks[g]["all_reduce"]["busbw"])
        peak = peaks[low]["all_reduce"]["busbw"]
        evidence += f"; peak all_reduce busbw {peak:.3g} GB/s at {peaks[low]['size_mib']:g} MiB"
        expected = {"gbs": None, "source": "not compared"}
        if expect is not None:
            gbs, source = expect(list(low))
            expected = {"gbs": gbs, "source": source}
            if gbs is None:
                evidence += f" ({source})"
            else:
                evidence += f", {peak / gbs:.0%} of the expected {gbs:.3g} GB/s ({source})"
                if peak < BELOW_EXPECTED * gbs:
                    status = "warn"
                    evidence += f": below {BELOW_EXPECTED:.0%} of it"
                    fixes.append("bandwidth below the plan: NCCL_DEBUG=INFO shows whether the rings run over NVLink "
                                 "and the InfiniBand/RoCE NICs or fall back to PCIe/sockets; check `nvidia-smi topo "
                                 "-m`, `ibstat` (link rate) and NCCL_IB_HCA/NCCL_SOCKET_IFNAME; if the busbw still "
                                 "climbs at the largest size, measure larger ones (--busbw-max-mib)")
        what = "the whole job" if name == "world" else f"the {name} mesh dimension"
        checks.append(Check(
            id=f"runtime.busbw.{name}", status=status, evidence=evidence, fix="; ".join(fixes),
            description=f"all_reduce and all_gather bus bandwidth within each group of {what}, against the plan",
            measured=(f"torch.distributed all_reduce / all_gather (one output tensor) on every {name} group at once, "
                      f"{WARMUP} warm-up + {iters} timed calls, slowest rank's time; algbw = bytes / time, busbw = "
                      "algbw x 2(n-1)/n (all_reduce), x (n-1)/n (all_gather), as nccl-tests; the slowest group's "
                      "peak all_reduce busbw over the sizes against the planner's figure for that group"),
            details={"group_size": n, "peak_busbw": peak, "peak_size_mib": peaks[low]["size_mib"],
                     "expected_busbw": expected["gbs"], "expected_source": expected["source"],
                     "groups": [{"ranks": list(g), "sizes": rows} for g, rows in groups.items()]}))
    return checks


def measure_clock_offsets(rank: int, world_size: int, group=None) -> dict[int, tuple[float, float]]:
    """NTP-style offsets of every rank's time.time() against rank 0's: {rank: (offset_s, round_trip_s)}, on
    rank 0 (empty elsewhere). offset = t_remote - (t0 + t1) / 2, where rank 0 sends at t0 and has the reply
    at t1; it is exact when both directions take equally long and otherwise off by at most round_trip / 2."""
    ping = torch.zeros(1, dtype=torch.float64)
    pong = torch.zeros(1, dtype=torch.float64)
    offsets = {}
    for other in range(1, world_size):
        best = None
        for _ in range(CLOCK_ROUNDS):
            if rank == 0:
                t0 = time.time()
                dist.send(ping, other, group=group)
                dist.recv(pong, other, group=group)
                t1 = time.time()
                sample = (pong.item() - (t0 + t1) / 2, t1 - t0)
                best = sample if best is None or sample[1] < best[1] else best
            elif rank == other:
                dist.recv(ping, 0, group=group)
                pong.fill_(time.time())
                dist.send(pong, 0, group=group)
        if rank == 0:
            offsets[other] = best
    return offsets


def clock_check(offsets: dict[int, tuple[float, float]]) -> Check:
    description = "wall clocks (time.time) of all ranks agree with rank 0's"
    measured = (f"{CLOCK_ROUNDS} send/recv ping-pongs between rank 0 and each rank, the shortest round trip kept; "
                "offset = t_remote - (t0 + t1) / 2 (NTP), uncertain by round_trip / 2")
    if not offsets:
        return Check("runtime.clock", description, "skip", "a single rank: nothing to compare", measured=measured)
    worst = max(offsets, key=lambda r: abs(offsets[r][0]))
    skew, rtt = offsets[worst]
    evidence = (f"max skew {abs(skew) * 1e3:.3f} ms (rank {worst}, {'ahead of' if skew >= 0 else 'behind'} rank 0; "
                f"round trip {rtt * 1e3:.3f} ms) over {len(offsets) + 1} ranks")
    status = "fail" if abs(skew) > SKEW_FAIL_S else "warn" if abs(skew) > SKEW_WARN_S else "pass"
    fix = "" if status == "pass" else (
        f"synchronise the clock of rank {worst}'s host with the others: run chrony or ntpd on every node "
        "(`chronyc tracking`, `timedatectl status` show the offset and whether it is synchronised)")
    return Check("runtime.clock", description, status, evidence, fix, measured,
                 {"offsets_s": {str(r): o for r, (o, _) in offsets.items()},
                  "round_trip_s": {str(r): t for r, (_, t) in offsets.items()}, "worst_rank": worst})
