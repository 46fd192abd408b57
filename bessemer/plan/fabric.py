"""Network sizing: a fat-tree (folded Clos) for the cluster's NICs. No torch.

With switches of radix k and a leaf oversubscription o (down : up ports, 1 = non-blocking), each leaf gives
d = ⌊k·o/(o+1)⌋ ports to NICs and u = k − d to the next level. Two levels (leaf-spine) reach k·d endpoints
(every leaf has a port on every spine); beyond that three levels: pods of k/2 leaves under k/2 aggregation
switches, and a core layer joining the pods. Bandwidth the spine layer must carry: N·B/o (all NICs at line
rate over the oversubscription); bisection bandwidth: N·B/(2·o). A single switch (flat) serves up to k NICs
at full bisection.
"""

import math
from dataclasses import asdict, dataclass

from bessemer.plan.catalog import Network


@dataclass(frozen=True)
class FatTree:
    endpoints: int
    radix: int
    oversubscription: float
    levels: int  # 1 = one switch
    leaves: int
    spines: int  # second level (aggregation in a three-level tree)
    cores: int
    leaf_down: int
    leaf_up: int
    link_gbps: float
    bisection_tbps: float
    spine_capacity_tbps: float  # what the level above the leaves must carry
    cables: int  # NIC-leaf plus switch-switch links

    def as_dict(self) -> dict:
        return asdict(self)


def fat_tree(endpoints: int, link_gbps: float, radix: int, oversubscription: float = 1.0) -> FatTree:
    if endpoints < 1 or radix < 4 or oversubscription < 1:
        raise ValueError("fat_tree needs endpoints >= 1, radix >= 4 and oversubscription >= 1")
    capacity = endpoints * link_gbps / oversubscription / 1000
    bisection = endpoints * link_gbps / (2 * oversubscription) / 1000
    if endpoints <= radix:
        return FatTree(endpoints, radix, oversubscription, 1, 1, 0, 0, endpoints, 0, link_gbps,
                       endpoints * link_gbps / 2 / 1000, 0.0, endpoints)
    down = int(radix * oversubscription // (oversubscription + 1))
    up = radix - down
    leaves = math.ceil(endpoints / down)
    if leaves <= radix:  # leaf-spine: each leaf's up ports spread over the spines
        spines = math.ceil(leaves * up / radix)
        return FatTree(endpoints, radix, oversubscription, 2, leaves, spines, 0, down, up, link_gbps, bisection,
                       capacity, endpoints + leaves * up)
    pod_leaves = radix // 2
    pods = math.ceil(leaves / pod_leaves)
    aggregation = pods * up  # one aggregation switch per leaf uplink in each pod
    agg_up = radix // 2
    cores = math.ceil(aggregation * agg_up / radix)
    return FatTree(endpoints, radix, oversubscription, 3, leaves, aggregation, cores, down, up, link_gbps,
                   bisection, capacity, endpoints + leaves * up + aggregation * agg_up)


def fabric_notes(network: Network, gpus: int, nodes: int) -> list[str]:
    notes = []
    if network.kind == "roce":
        notes.append("RoCE needs a lossless configuration end to end: PFC on the RDMA priority and ECN/DCQCN "
                     "on every switch and NIC (`bessemer doctor` checks rdma.pfc); a PFC storm from one bad NIC "
                     "can stall the whole fabric, so enable PFC watchdogs.")
    elif network.kind == "omni-path":
        notes.append("Omni-Path is lossless (credit-based flow control); its fabric manager (opafm) must run.")
    else:
        notes.append("InfiniBand is lossless by design (credit-based flow control) and routes adaptively; "
                     "a subnet manager (opensm/UFM) must run on the fabric.")
    if nodes > 1:
        notes.append("Rail-optimized wiring (GPU i of every node on leaf group i) keeps data-parallel and "
                     "pipeline traffic between same-index GPUs on one leaf hop.")
    return notes
