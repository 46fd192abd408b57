"""`bessemer plan`: size a training cluster and pick the layout. No torch."""

import argparse
import json
import math

from bessemer.errors import ConfigError
from bessemer.plan.catalog import GPUS, NETWORKS, get_gpu, get_network
from bessemer.plan.search import RECOMPUTE, SCHEDULES, Job, Pins, search
from bessemer.plan.throughput import Cluster
from bessemer.plan.workload import resolve_arch


def _number(text: str) -> float:
    """1e12, 15T, 2.5B, 300M."""
    scale = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
    t = text.strip().lower()
    try:
        return float(t[:-1]) * scale[t[-1]] if t and t[-1] in scale else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number such as 15e12 or 15T, got {text!r}") from None


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan", help="size a training cluster: memory, 3D layout, MFU and time, fabric, storage, checkpoints",
        description="Search every valid parallel layout for a model on a cluster, rank by time to train (or "
                    "cost), explain the choice, size the network, storage and checkpoint interval, and write "
                    "the training config.")
    m = p.add_argument_group("model")
    m.add_argument("--model", help="a registry size (llama3-1b, llama3-8b, llama3-70b, llama3-405b, ...)")
    for flag in ("--hidden", "--layers", "--heads", "--kv-heads", "--ffn", "--vocab"):
        m.add_argument(flag, type=int, default=0, help="model dims (instead of, or overriding, --model)")
    w = p.add_argument_group("workload")
    w.add_argument("--seq-len", type=int, default=8192)
    w.add_argument("--global-batch", type=int, default=0,
                   help="sequences per step (default: ~4M tokens, at least --gpus / 8)")
    w.add_argument("--tokens", type=_number, default=_number("1T"), help="tokens to train on (e.g. 15T)")
    c = p.add_argument_group("cluster")
    c.add_argument("--gpu", default="h100-sxm",
                   help=f"one or a comma list to compare ({', '.join(GPUS)})")
    c.add_argument("--gpus", type=int, required=True)
    c.add_argument("--gpus-per-node", type=int, default=8)
    c.add_argument("--intra-node", choices=("nvlink", "pcie"), default="nvlink")
    c.add_argument("--network", default="ib-ndr", help=", ".join(NETWORKS))
    c.add_argument("--nics-per-node", type=int, default=0, help="0 = one per GPU")
    c.add_argument("--price", type=float, default=0.0, help="USD per GPU-hour (default: the catalog's)")
    c.add_argument("--oversubscription", type=float, default=1.0, help="fabric leaf down:up ratio (1 = "
                                                                          "non-blocking)")
    c.add_argument("--radix", type=int, default=0, help="switch ports (default: the network's)")
    s = p.add_argument_group("search (pin a dimension to fix it)")
    for flag in ("--tp", "--pp", "--dp-replicate", "--dp-shard", "--micro-batch"):
        s.add_argument(flag, type=int, default=None)
    s.add_argument("--recompute", choices=RECOMPUTE, default=None)
    s.add_argument("--pp-schedule", choices=SCHEDULES, default=None)
    s.add_argument("--objective", choices=("time", "cost"), default="time")
    r = p.add_argument_group("storage and reliability")
    r.add_argument("--storage-write-gbs", type=float, default=50.0, help="aggregate checkpoint write GB/s")
    r.add_argument("--ckpt-stall-s", type=float, default=30.0, help="target save stall, seconds")
    r.add_argument("--gpu-mtbf-hours", type=float, default=0.0, help="default: the checkpoint config's")
    r.add_argument("--restart-min", type=float, default=10.0, help="minutes to restart after a failure")
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="print JSON instead of tables")
    o.add_argument("--top", type=int, default=10)
    o.add_argument("--emit-config", metavar="RUN.toml", help="write the `bessemer train` config of the winner")
    o.add_argument("--chart", metavar="PNG", help="memory breakdown of the top layouts")


def run(args: argparse.Namespace) -> int:
    from bessemer.checkpoint.interval import young_daly  # noqa: F401 -- torch-free; fail early if moved
    from bessemer.config import CheckpointConfig
    from bessemer.plan.explain import explain
    from bessemer.plan.fabric import fabric_notes, fat_tree
    from bessemer.plan.reliability import reliability_plan
    from bessemer.plan.report import emit_config, memory_chart, print_report, to_json
    from bessemer.plan.storage import storage_plan

    arch = resolve_arch(args.model, args.hidden, args.layers, args.heads, args.kv_heads, args.ffn, args.vocab)
    for name in ("gpus", "gpus_per_node", "seq_len", "top"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.gpus > args.gpus_per_node and args.gpus % args.gpus_per_node:
        raise ConfigError(f"--gpus {args.gpus} is not a whole number of nodes of --gpus-per-node "
                          f"{args.gpus_per_node}")
    # Default batch: ~4M tokens, and at least one sequence per 8 GPUs so that large clusters keep a valid
    # data-parallel split (Llama 3 405B: 16M tokens = 2,048 sequences on 16,384 GPUs).
    batch = args.global_batch or max(1, 2 ** round(math.log2(4 * 2**20 / args.seq_len)), args.gpus // 8)
    network = get_network(args.network)
    pins = Pins(args.tp, args.pp, args.dp_replicate, args.dp_shard, args.micro_batch, args.recompute,
                args.pp_schedule)
    results = []
    for gpu_name in args.gpu.split(","):
        gpu = get_gpu(gpu_name.strip())
        cluster = Cluster(gpu, args.gpus, min(args.gpus_per_node, args.gpus), args.intra_node, network,
                          args.nics_per_node)
        job = Job(arch, args.seq_len, batch, args.tokens, cluster, args.price or gpu.price_per_hour, args.objective)
        results.append((job, search(job, pins)))
    key = (lambda jr: jr[1].best.cost) if args.objective == "cost" else (lambda jr: jr[1].best.time.step_s)
    job, result = min(results, key=key)
    best = result.best

    nodes = math.ceil(args.gpus / job.cluster.gpus_per_node)
    nics = nodes * (args.nics_per_node or job.cluster.gpus_per_node)
    fabric = fat_tree(nics, network.gbps, args.radix or network.radix, args.oversubscription) if nodes > 1 else None
    storage = storage_plan(arch.params(), arch.vocab_size, best.time.tokens_per_s, nodes, args.ckpt_stall_s,
                           args.storage_write_gbs)
    mtbf = args.gpu_mtbf_hours or CheckpointConfig().gpu_mtbf_hours
    reliability = reliability_plan(args.gpus, mtbf, best.days * 24, storage.save_s, args.restart_min * 60,
                                   best.time.step_s)
    explanation = explain(result, job)
    if len(results) > 1:
        explanation.insert(0, "GPUs compared: " + "; ".join(
            f"{j.cluster.gpu.name} {r.best.days:.1f} days, ${r.best.cost:,.0f}" for j, r in results))
    if args.json:
        print(json.dumps(to_json(job, result, fabric, storage, reliability, explanation, args.top), indent=1))
    else:
        print_report(job, result, fabric, fabric_notes(network, args.gpus, nodes), storage, reliability,
                     explanation, args.top)
    if args.emit_config:
        emit_config(args.emit_config, job, best, reliability)
        if not args.json:
            print(f"wrote {args.emit_config}")
    if args.chart:
        memory_chart(args.chart, result, min(args.top, 8))
        if not args.json:
            print(f"wrote {args.chart}")
    return 0
