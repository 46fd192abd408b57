"""`bessemer doctor --runtime`: checks that need every rank of the job running, under torchrun.

    torchrun --nproc-per-node N -m bessemer.cli doctor --runtime [--tp 2 --pp 1 --dp-shard -1 --data DIR]
    torchrun --nproc-per-node N -m bessemer.doctor.runtime [--json] [...]     (the same, without the CLI)

Checks: collective bus bandwidth per mesh dimension (runtime.busbw.<dim>), RNG state shared where the trainer
shares it (runtime.rng), identical initial weights on every rank (runtime.params), clock skew against rank 0
(runtime.clock) and the data loader's share of a step (runtime.dataloader). Every rank returns the same list
of checks; rank 0 prints them. torch is imported when the checks run, not when the arguments are added.
"""

import argparse
import json
import os
import sys
import time
from collections import Counter

from bessemer.doctor.check import SCHEMA_VERSION, Check
from bessemer.errors import BessemerError, ConfigError
from bessemer.plan.catalog import NETWORKS

MESH_DIMS = ("pp", "dp_replicate", "dp_shard", "tp")  # build_mesh's order, outer to inner
LOADER_WAIT_WARN = 0.10  # the loader's share of (load + forward/backward) above which training waits on data
LOADER_BATCHES = 5  # timed micro-batches (after a first, cold one reported apart)


def _mib_list(text: str) -> tuple[float, ...]:
    try:
        sizes = tuple(float(s) for s in text.split(","))
    except ValueError:
        sizes = ()
    if not sizes or any(s <= 0 for s in sizes):
        raise argparse.ArgumentTypeError(f"expected comma-separated sizes in MiB > 0, e.g. 1,16; got {text!r}")
    return sizes


def _positive_mib(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a size in MiB > 0, e.g. 256; got {text!r}")
    return value


def _nics(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a count >= 0 (0 = one NIC per GPU); got {text!r}")
    return int(text)


def add_runtime_arguments(parser: argparse.ArgumentParser) -> None:
    """The runtime checks' options (no --json: the doctor command owns it; run_runtime reads args.json)."""
    g = parser.add_argument_group("runtime checks (every rank of the job, under torchrun)")
    g.add_argument("--tp", type=int, default=1, help="tensor-parallel degree of the mesh (default 1)")
    g.add_argument("--pp", type=int, default=1, help="pipeline-parallel degree (default 1)")
    g.add_argument("--dp-replicate", type=int, default=1, help="data-parallel replica groups (default 1)")
    g.add_argument("--dp-shard", type=int, default=-1,
                   help="data-parallel sharding degree; -1 = what the world leaves (default)")
    g.add_argument("--busbw-sizes", type=_mib_list, default=None, metavar="MIB,MIB",
                   help="message sizes for the bandwidth checks, in MiB (default 1, 4, 16, ... up to "
                        "--busbw-max-mib)")
    g.add_argument("--busbw-max-mib", type=_positive_mib, default=None, metavar="MIB",
                   help="largest default message size, in MiB (default 256 on GPU, 16 on CPU/gloo)")
    g.add_argument("--network", choices=sorted(NETWORKS), default=None,
                   help="the fabric between nodes, as in `bessemer plan`: the planner's bandwidth for groups that "
                        "span nodes (default none: those are not compared)")
    g.add_argument("--nics-per-node", type=_nics, default=0, metavar="N",
                   help="NICs per node with --network (default 0 = one per GPU, as in `bessemer plan`)")
    g.add_argument("--busbw-iters", type=int, default=5, metavar="N", help="timed calls per size (default 5)")
    g.add_argument("--data", default=None, metavar="PATH", help="a token shard directory: time the data loader on it")
    g.add_argument("--seq-len", type=int, default=256, help="sequence length for the loader check (default 256)")
    g.add_argument("--micro-batch", type=int, default=2, help="micro-batch for the loader check (default 2)")
    g.add_argument("--seed", type=int, default=0, help="run.seed of the job (default 0, the config default)")
    g.add_argument("--inject-rng-skew", type=int, default=None, metavar="RANK",
                   help="self-test: advance RANK's RNG after seeding, so that runtime.rng fails naming it")
    g.add_argument("--inject-param-skew", type=int, default=None, metavar="RANK",
                   help="self-test: perturb one initial weight on RANK, so that runtime.params fails naming it")


def expected_rng_groups(world_size: int) -> list[list[int]]:
    """Ranks that must hold the same RNG state, one list per group; ranks of different groups must differ.

    The trainer calls seed_everything(cfg.run.seed) on every rank (train/trainer.py, rng.py) with no
    per-rank offset: the model has no dropout, every rank initialises from the same seeded full model
    (model/llama.py: per-parameter generators seeded by run.seed and the parameter's name, not the global RNG)
    and the data order is positional (tokens/loader.py), not sampled. So every
    rank shares one state: a single group. Update this rule with the trainer's if it ever derives seeds per
    rank (e.g. dropout differing across data-parallel ranks, identical across tensor-parallel ones).
    """
    return [list(range(world_size))]


def _odd_ones(values: list, ranks: list[int]) -> tuple[object, list[int]]:
    """The value most ranks hold (ties go to the lowest rank's) and the ranks that hold another."""
    counts = Counter(values[r] for r in ranks)
    top = max(counts.values())
    majority = next(values[r] for r in ranks if counts[values[r]] == top)
    return majority, [r for r in ranks if values[r] != majority]


def _digest(data: bytes) -> str:
    import xxhash

    return xxhash.xxh64(data).hexdigest()


def rng_fingerprint() -> dict[str, str]:
    """A hash of each generator's state (Python, NumPy, torch CPU and CUDA when initialised)."""
    from bessemer.rng import RNGState

    state = RNGState().state_dict()
    n = state["numpy"]
    fp = {"python": _digest(repr(state["python"]).encode()), "torch": _digest(state["torch"].numpy().tobytes()),
          "numpy": _digest(n["keys"].numpy().tobytes()
                           + repr((n["kind"], n["pos"], n["has_gauss"], n["gauss"])).encode())}
    if "cuda" in state:
        fp["cuda"] = _digest(state["cuda"].cpu().numpy().tobytes())
    return fp


def rng_check(fingerprints: list[dict[str, str]], groups: list[list[int]]) -> Check:
    description = "ranks the trainer seeds alike hold the same RNG state, ranks it seeds apart differ"
    measured = ("seed_everything(seed) as the trainer calls it, then an xxh64 of each generator's state (Python, "
                "NumPy, torch CPU, CUDA) gathered from every rank")
    keys = [tuple(sorted(fp.items())) for fp in fingerprints]
    problems, offenders, majorities = [], [], []
    for ranks in groups:
        majority, odd = _odd_ones(keys, ranks)
        majorities.append(majority)
        for r in odd:
            which = sorted(k for k, v in fingerprints[r].items() if dict(majority).get(k) != v)
            agree = [x for x in ranks if keys[x] == majority]
            problems.append(f"rank {r} differs in {which} from the {len(agree)} rank(s) of its group that agree "
                            f"(e.g. rank {agree[0]})")
            offenders.append(r)
    for i, a in enumerate(groups):
        for j in range(i + 1, len(groups)):
            if majorities[i] == majorities[j]:
                problems.append(f"ranks {a} and {groups[j]} share one state but must differ")
                offenders.extend([*a, *groups[j]])
    details = {"groups": groups, "fingerprints": fingerprints, "offending_ranks": sorted(set(offenders))}
    if len(groups) == 1:
        rule = f"all {len(fingerprints)} ranks must share one RNG state (the trainer seeds every rank with run.seed)"
    else:
        rule = f"{len(fingerprints)} ranks in {len(groups)} groups: one state per group, the groups apart"
    if problems:
        return Check("runtime.rng", description, "fail",
                     f"offending ranks {details['offending_ranks']}: " + "; ".join(problems) + f"; {rule}",
                     "seed every rank with the same run.seed before anything draws random numbers; look for code "
                     "that consumes random numbers on some ranks only, or a per-rank seed offset",
                     measured, details)
    return Check("runtime.rng", description, "pass", f"{rule}: they do", "", measured, details)


def param_fingerprint(seed: int, skew: bool = False) -> list[tuple[str, float, str]]:
    """(name, float64 sum, xxh64 of the bytes) of every parameter of the debug model, initialised as the
    trainer initialises it: each parameter drawn from generators seeded by (run.seed, its name), so every
    rank computes the single-process weights that the layouts' shards are taken from."""
    import torch

    from bessemer.model.llama import build_model
    from bessemer.model.registry import MODEL_SIZES

    model = build_model(MODEL_SIZES["debug"], 256, "cpu", seed=seed)
    if skew:  # self-test: one weight off by a little, as a rank with another torch build or seed would be
        with torch.no_grad():
            model.layers["0"].attention.wq.weight.view(-1)[0] += 1e-3
    return [(name, float(p.detach().double().sum()), _digest(p.detach().contiguous().numpy().tobytes()))
            for name, p in model.named_parameters()]


def params_check(per_rank: list[list[tuple[str, float, str]]]) -> Check:
    description = "every rank builds the same initial weights from the seed (replicas start identical)"
    measured = ("the debug model (model/registry.py) built on every rank with the trainer's initialisation: "
                "build_model(seed=run.seed) on CPU; per parameter a float64 sum and xxh64 of its bytes, "
                "gathered from every rank. No parallelism is applied: the check is that seeding yields the same "
                "full model everywhere (same torch build, same generators), whose shards the ranks draw")
    world = list(range(len(per_rank)))
    keys = [tuple(h for _, _, h in fp) for fp in per_rank]
    majority, odd = _odd_ones(keys, world)
    n_params = len(per_rank[0])
    details = {"parameters": n_params, "offending_ranks": odd}
    if not odd:
        return Check("runtime.params", description, "pass",
                     f"{n_params} parameters identical on all {len(world)} ranks", "", measured, details)
    ref = keys.index(majority)
    lines = []
    for r in odd:
        i = next(i for i, (a, b) in enumerate(zip(per_rank[r], per_rank[ref])) if a[2] != b[2])
        name, total, _ = per_rank[r][i]
        lines.append(f"rank {r}: {name} (sum {total:.9g} vs {per_rank[ref][i][1]:.9g} on rank {ref})")
        details.setdefault("first_difference", {})[str(r)] = name
    return Check("runtime.params", description, "fail",
                 f"offending ranks {odd}, first differing parameter: " + "; ".join(lines),
                 "run the same torch build on every node (`python -c 'import torch; print(torch.__version__, "
                 "torch.version.git_version)'`) and seed before building the model; replicas that start apart "
                 "never agree", measured, details)


def measure_loader(data: str, seq_len: int, micro_batch: int, dp_rank: int, dp_world: int, seed: int,
                   device) -> dict:
    """Time TokenLoader.next_batch against a forward+backward of the debug model on the same batch."""
    import torch
    import torch.nn.functional as F

    from bessemer.tokens.loader import TokenLoader
    from bessemer.tokens.shards import TokenDataset
    from bessemer.model.llama import build_model
    from bessemer.model.registry import MODEL_SIZES

    dataset = TokenDataset(data)
    loader = TokenLoader(dataset, seq_len, micro_batch * dp_world, micro_batch, dp_rank, dp_world)
    torch.manual_seed(seed)
    model = build_model(MODEL_SIZES["debug"].with_vocab(dataset.vocab_size), seq_len, device)
    load, compute = [], []
    for _ in range(LOADER_BATCHES + 1):
        t0 = time.perf_counter()
        x, y = loader.next_batch()
        x, y = x.to(device), y.to(device)
        t1 = time.perf_counter()
        logits = model(x)  # (mb, T, vocab)
        F.cross_entropy(logits.flatten(0, 1), y.flatten()).backward()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        load.append(t1 - t0)
        compute.append(time.perf_counter() - t1)
    wait, busy = sum(load[1:]), sum(compute[1:])
    return {"first_ms": load[0] * 1e3, "load_ms": wait / LOADER_BATCHES * 1e3,
            "compute_ms": busy / LOADER_BATCHES * 1e3, "wait_fraction": wait / (wait + busy),
            "tokens_per_s": micro_batch * seq_len * LOADER_BATCHES / wait}


def loader_check(per_rank: list[dict] | None, data: str | None, seq_len: int, micro_batch: int) -> Check:
    description = "the data loader's share of a step (time waiting for a batch vs computing on it)"
    measured = (f"TokenLoader.next_batch over {LOADER_BATCHES} micro-batches of {micro_batch} x {seq_len} tokens "
                "(after a first, cold one) on every rank, against a forward+backward of the debug model on the "
                "same batch; wait fraction = load / (load + compute). The debug model is small: a real model "
                "hides the loader better, so a pass here holds there")
    if per_rank is None:
        return Check("runtime.dataloader", description, "skip", "no --data given", measured=measured)
    worst = max(range(len(per_rank)), key=lambda r: per_rank[r]["wait_fraction"])
    w = per_rank[worst]
    evidence = (f"wait fraction {w['wait_fraction']:.1%} on rank {worst} (worst of {len(per_rank)}): "
                f"{w['load_ms']:.2f} ms per batch load vs {w['compute_ms']:.1f} ms compute, "
                f"first batch {w['first_ms']:.1f} ms, {w['tokens_per_s']:.3g} tokens/s from {data}")
    status, fix = "pass", ""
    if w["wait_fraction"] > LOADER_WAIT_WARN:
        status = "warn"
        fix = ("put the token shards on local disk or keep them in the page cache: the loader memory-maps them "
               "and every miss is a synchronous read inside the training step")
    return Check("runtime.dataloader", description, status, evidence, fix, measured,
                 {"ranks": per_rank, "worst_rank": worst})


def trainer_checks(dims_spec: dict, seed: int) -> list[Check]:
    """The runtime checks as the trainer runs them at start (`metrics.runtime_checks`), on its own mesh."""
    return run_runtime_checks(dims_spec, iters=3, seed=seed)


def run_runtime_checks(dims_spec: dict | None = None, sizes_mb: tuple[float, ...] | None = None, iters: int = 5, *,
                       max_mib: float | None = None, network: str | None = None, nics_per_node: int = 0,
                       data: str | None = None, seq_len: int = 256, micro_batch: int = 2, seed: int = 0,
                       inject_rng_skew: int | None = None, inject_param_skew: int | None = None) -> list[Check]:
    """Run every runtime check on this rank; all ranks of the job must call it and all return the same list.

    `dims_spec` holds the mesh degrees ({"tp": 2, "dp_shard": -1, ...}; keys of MESH_DIMS, missing ones as in
    the config's defaults). Joins the process group unless it exists already, and leaves it (destroyed) only
    if it joined it here.
    """
    import torch
    import torch.distributed as dist

    from bessemer.config import ParallelConfig
    from bessemer.doctor.runtime_comm import (DEFAULT_MAX_MIB, busbw_checks, clock_check, measure_busbw,
                                              measure_clock_offsets, planner_expectation, size_ladder)
    from bessemer.parallel.dims import Launch, ParallelDims, build_mesh, init_distributed, new_group
    from bessemer.rng import seed_everything

    spec = dict(dims_spec or {})
    unknown = sorted(set(spec) - set(MESH_DIMS))
    if unknown:
        raise ConfigError(f"unknown mesh dimension(s) {unknown}; valid: {list(MESH_DIMS)}")
    cfg = ParallelConfig(**spec)
    cfg.validate()
    launch = Launch.from_env()
    dims = ParallelDims.from_config(cfg, launch.world_size)
    for name, rank in (("--inject-rng-skew", inject_rng_skew), ("--inject-param-skew", inject_param_skew)):
        if rank is not None and not 0 <= rank < launch.world_size:
            raise BessemerError(f"{name} {rank}: not a rank of this job (0..{launch.world_size - 1})")
    if data is not None:
        from bessemer.tokens.shards import TokenDataset

        TokenDataset(data)  # a bad path fails here, on every rank, before any collective
    device = torch.device("cpu")
    if torch.cuda.is_available():
        torch.cuda.set_device(launch.local_rank)
        device = torch.device("cuda", launch.local_rank)

    joined = launch.distributed and not dist.is_initialized()
    init_distributed(launch, device.type)
    try:
        mesh = dp_mesh = None
        if launch.distributed:
            mesh, dp_mesh = build_mesh(dims, device.type)

        def gather(obj) -> list:
            if not launch.distributed:
                return [obj]
            out = [None] * launch.world_size
            dist.all_gather_object(out, obj)
            return out

        checks = []
        sizes = {name: getattr(dims, name) for name in MESH_DIMS if getattr(dims, name) > 1}
        if launch.distributed:
            sizes["world"] = launch.world_size
            sizes_mb = tuple(sizes_mb or size_ladder(max_mib or DEFAULT_MAX_MIB[device.type]))
            gpu_name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
            expect = planner_expectation(gpu_name, gather(launch.node), network, nics_per_node)
            checks += busbw_checks(gather(measure_busbw(mesh, sizes, sizes_mb, iters, device)), iters, expect)

        seed_everything(seed, deterministic=False)  # as Trainer.__init__ does, first thing
        if inject_rng_skew == launch.rank:
            torch.rand(1)
        checks.append(rng_check(gather(rng_fingerprint()), expected_rng_groups(launch.world_size)))
        checks.append(params_check(gather(param_fingerprint(seed, skew=inject_param_skew == launch.rank))))

        offsets = {}
        if launch.distributed:
            # Timestamps travel on CPU tensors (a gloo group under nccl): no stream between the clock and the wire.
            group = new_group(backend="gloo", desc="doctor_clock") if device.type == "cuda" else None
            box = [measure_clock_offsets(launch.rank, launch.world_size, group)]
            dist.broadcast_object_list(box, src=0, group=group)
            offsets = box[0]
        checks.append(clock_check(offsets))

        loader = None
        if data is not None:
            dp_rank = dp_mesh.get_local_rank() if dp_mesh is not None else 0
            loader = gather(measure_loader(data, seq_len, micro_batch, dp_rank, dims.dp, seed, device))
        checks.append(loader_check(loader, data, seq_len, micro_batch))
    finally:
        if joined:
            dist.destroy_process_group()
    return checks


def format_table(checks: list[Check]) -> str:
    width = max(len(c.id) for c in checks)
    lines = [f"{c.status.upper():<5} {c.id:<{width}}  {c.evidence}" for c in checks]
    lines += [f"  fix {c.id}: {c.fix}" for c in checks if c.fix]
    return "\n".join(lines)


def run_runtime(args: argparse.Namespace, host: dict | None = None) -> int:
    """The runtime doctor on this rank (every rank runs it): rank 0 prints, 1 when any check fails (or, with
    `args.strict`, warns). With `args.json`, rank 0 prints one document: `{"schema_version", "checks"}`, or
    `{"schema_version", "host", "runtime": {"checks"}}` when given its node's `host` document. Options that
    `args` lacks (a parser without add_runtime_arguments) take their defaults."""
    from bessemer.parallel.dims import Launch

    defaults = argparse.ArgumentParser(add_help=False)
    add_runtime_arguments(defaults)
    args = argparse.Namespace(**{**vars(defaults.parse_args([])), **vars(args)})
    spec = {"tp": args.tp, "pp": args.pp, "dp_replicate": args.dp_replicate, "dp_shard": args.dp_shard}
    checks = run_runtime_checks(spec, args.busbw_sizes, args.busbw_iters, max_mib=args.busbw_max_mib,
                                network=args.network, nics_per_node=args.nics_per_node, data=args.data,
                                seq_len=args.seq_len, micro_batch=args.micro_batch, seed=args.seed,
                                inject_rng_skew=args.inject_rng_skew,
                                inject_param_skew=args.inject_param_skew)
    if Launch.from_env().rank == 0:
        if getattr(args, "json", False):
            runtime = {"checks": [c.as_dict() for c in checks]}
            doc = runtime if host is None else {"host": host, "runtime": runtime}
            print(json.dumps({"schema_version": SCHEMA_VERSION, **doc}, indent=1, default=str))
        else:
            print(format_table(checks))
    bad = ("fail", "warn") if getattr(args, "strict", False) else ("fail",)
    return 1 if any(c.status in bad for c in checks) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bessemer.doctor.runtime",
                                     description="Runtime checks over every rank of a job; run under torchrun.")
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")
    add_runtime_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_runtime(args)
    except BessemerError as e:
        print(f"bessemer doctor --runtime: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    status = main()
    if "TORCHELASTIC_RUN_ID" in os.environ:
        from bessemer.proc import exit_rank

        exit_rank(status)  # no interpreter finalization under torchrun (gloo teardown abort)
    sys.exit(status)
