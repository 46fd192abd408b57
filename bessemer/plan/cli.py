"""`bessemer plan`: size a training cluster and pick the layout. No torch."""

import argparse
import json
import math

from bessemer.errors import ConfigError
from bessemer.plan.catalog import GPUS, NETWORKS, get_gpu, get_network
from bessemer.plan.search import RECOMPUTE, SCHEDULES, Job, Pins, search
from bessemer.plan.throughput import Cluster
from bessemer.plan.workload import resolve_arch

EXAMPLES = """examples:
  bessemer plan --model llama3-70b --gpus 512 --gpu h100-sxm
  bessemer plan --model llama3-8b --gpus 64 --gpu a100-80gb,h100-sxm,b200 --objective cost
  bessemer plan --model llama3-70b --gpus 512 --emit-config run.toml   # then: bessemer train run.toml
"""

# The valid range of every numeric flag: (dest, lowest value, whether the lowest itself is excluded, what 0 means
# where 0 is a sentinel outside the range). Checked before anything is computed: bad input is one line, not a
# traceback or a nonsense plan. A new numeric flag needs a row (a test holds every one to that).
LIMITS = [
    ("gpus", 1, False, ""), ("gpus_per_node", 1, False, ""), ("seq_len", 1, False, ""),
    ("global_batch", 1, False, "0 = ~4M tokens"), ("tokens", 0, True, ""),
    ("hidden", 1, False, "0 = the model's"), ("layers", 1, False, "0 = the model's"),
    ("heads", 1, False, "0 = the model's"), ("kv_heads", 1, False, "0 = the model's"),
    ("ffn", 1, False, "0 = the model's"), ("vocab", 1, False, "0 = the model's"),
    ("nics_per_node", 1, False, "0 = one per GPU"), ("price", 0, True, "0 = the catalog's"),
    ("oversubscription", 1, False, ""), ("radix", 4, False, "0 = the network's"),
    ("tp", 1, False, ""), ("pp", 1, False, ""), ("dp_replicate", 1, False, ""), ("dp_shard", 1, False, ""),
    ("micro_batch", 1, False, ""), ("storage_write_gbs", 0, True, ""), ("ckpt_stall_s", 0, True, ""),
    ("gpu_mtbf_hours", 0, True, "0 = the checkpoint config's"), ("restart_min", 0, False, ""),
    ("top", 1, False, ""), ("cp", 1, False, ""), ("recompute_layers", 1, False, ""), ("headroom", 0, False, ""),
]


def check_args(args: argparse.Namespace) -> None:
    """Every numeric flag within its range (NaN and infinity never are); raises ConfigError naming the flag."""
    for dest, low, exclusive, zero in LIMITS:
        value = getattr(args, dest)
        if value is None or (zero and value == 0):  # an unpinned search dimension, or 0 = the default
            continue
        if not (math.isfinite(value) and (value > low if exclusive else value >= low)):
            valid = f"{'>' if exclusive else '>='} {low}" + (f", or {zero}" if zero else "")
            raise ConfigError(f"--{dest.replace('_', '-')} must be {valid}, got {value:g}")
    if args.gpus > args.gpus_per_node and args.gpus % args.gpus_per_node:
        raise ConfigError(f"--gpus {args.gpus} is not a whole number of nodes of --gpus-per-node "
                          f"{args.gpus_per_node}")


def _number(text: str) -> float:
    """1e12, 15T, 2.5B, 300M."""
    scale = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
    t = text.strip().lower()
    try:
        return float(t[:-1]) * scale[t[-1]] if t and t[-1] in scale else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number such as 15e12 or 15T, got {text!r}") from None


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Examples kept as written; every flag's help ends with its default unless the text already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (action.required or action.default is None or action.default is False
                or action.default == argparse.SUPPRESS or "(default" in text or not action.option_strings):
            return text
        return f"{text} (default: %(default)s)"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan", help="size a training cluster: memory, 3D layout, MFU and time, fabric, storage, checkpoints",
        formatter_class=_HelpFormatter, epilog=EXAMPLES,
        description="Search every valid parallel layout for a model on a cluster, rank by time to train (or\n"
                    "cost), explain the choice, size the network, storage and checkpoint interval, and write\n"
                    "the training config. Every numeric flag is checked against its range (exit 2 if out).")
    m = p.add_argument_group("model")
    m.add_argument("--model", help="a registry size (debug, llama3-1b, llama3-8b, llama3-70b, llama3-405b, ...) "
                                   "(default: none: give --hidden --layers --heads)")
    for flag, what in (("--hidden", "hidden size"), ("--layers", "layers"), ("--heads", "attention heads"),
                       ("--kv-heads", "key/value heads"), ("--ffn", "FFN width"), ("--vocab", "vocabulary size")):
        m.add_argument(flag, type=int, default=0, help=f"{what}, instead of or overriding --model (0 = the model's)")
    m.add_argument("--mlp", choices=("swiglu", "gelu"), default="swiglu",
                   help="MLP of a custom model: swiglu (3 matrices, --ffn default 8h/3) or gelu (2, default 4h)")
    w = p.add_argument_group("workload")
    w.add_argument("--seq-len", type=int, default=8192, help="tokens per sequence")
    w.add_argument("--global-batch", type=int, default=0,
                   help="sequences per step (0 = ~4M tokens, at least --gpus / 8)")
    w.add_argument("--tokens", type=_number, default="1T", help="tokens to train on (15e12, 15T, 2.5B)")
    w.add_argument("--fp8", action="store_true", help="matmuls in FP8 at the catalog's FP8 peak (default: BF16)")
    c = p.add_argument_group("cluster")
    c.add_argument("--gpu", default="h100-sxm",
                   help=f"one or a comma list to compare ({', '.join(GPUS)})")
    c.add_argument("--gpus", type=int, required=True, help="GPUs in the job (required)")
    c.add_argument("--gpus-per-node", type=int, default=8,
                   help="GPUs per node; --gpus must be a multiple when larger")
    c.add_argument("--intra-node", choices=("nvlink", "pcie"), default="nvlink", help="link between a node's GPUs")
    c.add_argument("--network", default="ib-ndr", help=f"between nodes ({', '.join(NETWORKS)})")
    c.add_argument("--nics-per-node", type=int, default=0, help="NICs per node (0 = one per GPU)")
    c.add_argument("--price", type=float, default=0.0, help="USD per GPU-hour (0 = the catalog's)")
    c.add_argument("--oversubscription", type=float, default=1.0,
                   help="fabric leaf down:up ratio, >= 1 (1 = non-blocking)")
    c.add_argument("--radix", type=int, default=0, help="switch ports, >= 4 (0 = the network's)")
    c.add_argument("--headroom", type=float, default=0.10,
                   help="share of each GPU's memory a layout must leave free, 0 to 0.9")
    s = p.add_argument_group("search (pin a dimension to fix it)")
    for flag, what in (("--tp", "tensor-parallel degree"), ("--pp", "pipeline-parallel degree"),
                       ("--dp-replicate", "data-parallel replica groups"),
                       ("--dp-shard", "data-parallel sharding degree (FSDP)"),
                       ("--micro-batch", "sequences per micro-batch")):
        s.add_argument(flag, type=int, default=None, help=f"pin the {what} (default: searched)")
    s.add_argument("--recompute", choices=RECOMPUTE, default=None,
                   help="pin activation recomputation; partial = full recomputation of the fewest layers "
                        "that fit (default: searched)")
    s.add_argument("--recompute-layers", type=int, default=None,
                   help="pin partial recomputation to this many layers (default: searched)")
    s.add_argument("--cp", type=int, default=None,
                   help="pin the context-parallel degree (default: searched from 32K-token sequences, else 1)")
    s.add_argument("--pp-schedule", choices=SCHEDULES, default=None,
                   help="pin the pipeline schedule (default: searched, zero_bubble only when pinned)")
    s.add_argument("--objective", choices=("time", "cost"), default="time", help="what to rank layouts by")
    r = p.add_argument_group("storage and reliability")
    r.add_argument("--storage-write-gbs", type=float, default=50.0, help="aggregate checkpoint write GB/s, > 0")
    r.add_argument("--ckpt-stall-s", type=float, default=30.0, help="target save stall in seconds, > 0")
    r.add_argument("--gpu-mtbf-hours", type=float, default=0.0,
                   help="MTBF of one GPU in hours (0 = the checkpoint config's default)")
    r.add_argument("--restart-min", type=float, default=10.0, help="minutes to restart after a failure")
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="print JSON instead of tables")
    o.add_argument("--top", type=int, default=10, help="layouts to list")
    o.add_argument("--emit-config", metavar="RUN.toml",
                   help="write the `bessemer train` config of the winner, with its prediction in [plan] "
                        "(default: not written)")
    o.add_argument("--chart", metavar="PNG", help="memory breakdown of the top layouts (default: not drawn)")


def run(args: argparse.Namespace) -> int:
    from bessemer.checkpoint.interval import young_daly  # noqa: F401 -- torch-free; fail early if moved
    from bessemer.config import CheckpointConfig
    from bessemer.plan.explain import explain
    from bessemer.plan.fabric import fabric_notes, fat_tree
    from bessemer.plan.reliability import reliability_plan
    from bessemer.plan.report import emit_config, memory_chart, print_report, to_json
    from bessemer.plan.storage import storage_plan

    check_args(args)
    arch = resolve_arch(args.model, args.hidden, args.layers, args.heads, args.kv_heads, args.ffn, args.vocab,
                        args.mlp)
    # Default batch: ~4M tokens, and at least one sequence per 8 GPUs so that large clusters keep a valid
    # data-parallel split (Llama 3 405B: 16M tokens = 2,048 sequences on 16,384 GPUs).
    batch = args.global_batch or max(1, 2 ** round(math.log2(4 * 2**20 / args.seq_len)), args.gpus // 8)
    network = get_network(args.network)
    pins = Pins(args.tp, args.pp, args.dp_replicate, args.dp_shard, args.micro_batch, args.recompute,
                args.pp_schedule, args.cp, args.recompute_layers)
    results = []
    for gpu_name in args.gpu.split(","):
        gpu = get_gpu(gpu_name.strip())
        cluster = Cluster(gpu, args.gpus, min(args.gpus_per_node, args.gpus), args.intra_node, network,
                          args.nics_per_node, args.oversubscription, args.radix)
        job = Job(arch, args.seq_len, batch, args.tokens, cluster, args.price or gpu.price_per_hour, args.objective,
                  args.headroom, args.fp8)
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
