"""Training throughput and MFU on one GPU through bessemer's Trainer, against torchtitan on the same model,
batch and sequence length.

    python bench/gpu_throughput.py        # on a GPU: llama3-1b and llama3-3b, bf16 and FP8, compiled and eager
    python bench/gpu_throughput.py --device cpu --model debug --seq-len 64 --steps 2 --warmup 1 --compile off

bessemer: each case builds a Trainer from the options a user sets (model, precision, train.compile) on the
bundled token shards (data/debug, read again from the start when used up) and times `--steps` calls of its step
— loader, forward and backward, clipping, the device-side skip of non-finite steps, fused AdamW, the FP8 scale
precompute — after `--warmup` steps (compilation), with the garbage collector paused as `Trainer.train` pauses
it. tokens/s = batch x seq-len / time per step. MFU = the trainer's FLOPs per token (6N + 12·L·d·T,
model/registry.py) x tokens/s / the trainer's peak: the catalog's dense bf16 peak of the detected GPU (989
TFLOP/s on an H200), also for FP8, so FP8 and bf16 MFU compare.

Reference, bf16, compiled when the first --compile setting is on: torchtitan's Llama 3 when `import torchtitan`
works, the device is a GPU and torchtitan has the size (1B, 3B): built from its model registry, parallelised by
its own `parallelize_llama` on a one-rank mesh (FSDP2 mixed precision: bf16 parameters, fp32 reductions;
compile per block and of the loss), flex attention with the causal masks its trainer builds each step, its
cross-entropy, fused AdamW, its gradient clipping at 1.0 — on random tokens already on the GPU (no data
loading). Otherwise (or when it fails, with the reason printed) a plain PyTorch loop on bessemer's model: the
whole model under torch.compile, bf16 autocast, fused AdamW, clipping at 1.0 — what the trainer's machinery
costs.

Ends with the goals (docs/performance.md) met, missed or not measured, then `ratio gpu_tokens_vs_torchtitan X`:
bessemer's bf16 tokens/s over the reference's on the first model, with the reference named on the line before.
Exit status 1 when a case failed (or, with --strict-goals, when a goal was missed or not measured).
"""

import argparse
import contextlib
import dataclasses
import gc
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bessemer.config import load_config  # noqa: E402
from bessemer.errors import ConfigError  # noqa: E402
from bessemer.model.llama import build_model  # noqa: E402
from bessemer.model.registry import count_params, flops_per_token, get_model_args  # noqa: E402
from bessemer.parallel.dims import process_group_backend  # noqa: E402
from bessemer.train.builders import loss_fn  # noqa: E402
from bessemer.train.trainer import Trainer, collector_paused  # noqa: E402

# The goals of issue 15 on one H200 (docs/performance.md).
MFU_GOAL = ("llama3-1b", 0.45)  # bf16, compiled
FP8_GOAL = ("llama3-3b", 1.3)  # FP8 / bf16 tokens/s, compiled
REFERENCE_GOAL = 1.0  # bessemer / torchtitan tokens/s, bf16, first model
BATCH = {"llama3-1b": 8, "llama3-3b": 4}  # sequences per step by default; other sizes: 2
TORCHTITAN_FLAVOR = {"llama3-1b": "1B", "llama3-3b": "3B"}  # the same shapes in torchtitan's llama3 registry


class OutOfTime(BaseException):
    """SIGTERM (e.g. from `timeout`): stop the case in flight and still print what was measured."""


def out_of_time(signum, frame):
    raise OutOfTime


@dataclass
class Result:
    run: str  # "bessemer", "torchtitan" or "plain PyTorch"
    model: str
    precision: str
    compiled: bool
    step_s: float
    tokens_per_s: float
    mfu: float
    peak_gib: float
    loss: float

    def line(self) -> str:
        return (f"{self.run:<13} {self.model:<10} {self.precision:<4} {'compiled' if self.compiled else 'eager':<8}"
                f" {self.step_s * 1e3:9.1f} ms/step {self.tokens_per_s:12,.0f} tokens/s  MFU {100 * self.mfu:5.1f}%"
                f"  peak {self.peak:>6} GiB  loss {self.loss:.3f}")

    @property
    def peak(self) -> str:
        return "n/a" if self.peak_gib != self.peak_gib else f"{self.peak_gib:.1f}"  # NaN: no device counter


@dataclass(frozen=True)
class Case:
    run: str  # "bessemer" or "reference"
    model: str
    precision: str
    compiled: bool


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(step: Callable[[], torch.Tensor], warmup: int, steps: int, device: torch.device) -> tuple[float, float]:
    """Seconds per step over `steps` after `warmup` steps, and the last step's loss."""
    with collector_paused():
        for _ in range(warmup):
            step()
        sync(device)
        t0 = time.perf_counter()
        for _ in range(steps):
            loss = step()
        loss = float(loss)  # waits for the device
        return (time.perf_counter() - t0) / steps, loss


def peak_gib(device: torch.device) -> float:
    return torch.cuda.max_memory_allocated(device) / 2 ** 30 if device.type == "cuda" else float("nan")


def release(device: torch.device) -> None:
    """Free the previous case's model and graphs before the next one is built and measured."""
    gc.collect()
    torch._dynamo.reset()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def batch_of(model: str, args: argparse.Namespace) -> int:
    return args.batch or BATCH.get(model, 2)


def result(run: str, case: Case, args, device, step_s: float, loss: float, peak_flops: float) -> Result:
    tokens_per_s = batch_of(case.model, args) * args.seq_len / step_s
    mfu = flops_per_token(get_model_args(case.model), args.seq_len) * tokens_per_s / peak_flops
    return Result(run, case.model, case.precision, case.compiled, step_s, tokens_per_s, mfu, peak_gib(device), loss)


def bessemer_case(case: Case, args, device: torch.device, run_dir: Path,
                  peak_flops: float | None) -> tuple[Result, float]:
    """The case through bessemer's Trainer; also returns the trainer's peak FLOP/s (the MFU denominator), which
    later cases reuse (on CPU the trainer measures one, a little different each time)."""
    batch = batch_of(case.model, args)
    overrides = [
        f"--run.dir={run_dir}", f"--data.path={REPO / 'data' / 'debug'}", f"--model.name={case.model}",
        f"--model.vocab_size={get_model_args(case.model).vocab_size}", f"--train.seq_len={args.seq_len}",
        f"--train.global_batch={batch}", f"--train.micro_batch={batch}", f"--train.steps={args.warmup + args.steps}",
        "--train.deterministic=false", f"--train.compile={str(case.compiled).lower()}", "--precision.dtype=bf16",
        "--checkpoint.at_end=false", "--metrics.tensorboard=false", "--metrics.progress=false"]
    if case.precision == "fp8":  # real FP8 kernels on a GPU; the same numerics emulated elsewhere
        overrides += ["--precision.fp8.enabled=true", f"--precision.fp8.emulate={str(device.type != 'cuda').lower()}"]
    if peak_flops is not None:
        overrides.append(f"--metrics.peak_tflops={peak_flops / 1e12!r}")
    trainer = Trainer(load_config(None, overrides), log=False)
    if peak_flops is None:
        print(f"MFU against {trainer.peak_flops / 1e12:,.1f} TFLOP/s: {trainer.peak_source}", flush=True)
    try:
        step_s, loss = timed(lambda: trainer.step().device[0], args.warmup, args.steps, device)  # [0]: the loss
        return result("bessemer", case, args, device, step_s, loss, trainer.peak_flops), trainer.peak_flops
    finally:
        trainer.reporter.close()


def plain_case(case: Case, args, device: torch.device, peak_flops: float) -> Result:
    """A plain PyTorch loop on bessemer's model: compiled whole, bf16 autocast, fused AdamW, clipping."""
    margs, batch = get_model_args(case.model), batch_of(case.model, args)
    torch.manual_seed(0)
    model = build_model(margs, args.seq_len, device)
    step_model = torch.compile(model) if case.compiled else model
    loss_of = torch.compile(loss_fn) if case.compiled else loss_fn
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    tokens = torch.randint(0, margs.vocab_size, (batch, args.seq_len + 1), device=device)

    def step() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = loss_of(step_model(tokens[:, :-1]), tokens[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        return loss.detach()

    step_s, loss = timed(step, args.warmup, args.steps, device)
    return result("plain PyTorch", case, args, device, step_s, loss, peak_flops)


@contextlib.contextmanager
def one_rank_group(device: torch.device, scratch: Path):
    """A one-rank process group with bessemer's backends (torchtitan builds its mesh on one), met through a file."""
    import torch.distributed as dist

    if dist.is_initialized():
        yield
        return
    store = dist.FileStore(str(scratch / "store"), 1)
    dist.init_process_group(process_group_backend(device.type), store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@contextlib.contextmanager
def dynamo_settings_kept():
    """torchtitan's apply_compile sets two global dynamo options; the bessemer cases after it run without them."""
    config = torch._dynamo.config
    keys = ("capture_scalar_outputs", "skip_fwd_side_effects_in_bwd_under_checkpoint")
    with config.patch({k: getattr(config, k) for k in keys if hasattr(config, k)}):
        yield


def torchtitan_case(case: Case, args, device: torch.device, peak_flops: float, scratch: Path) -> Result:
    """The same model, batch and sequence length as torchtitan's own single-GPU training builds them."""
    from torchtitan.components.loss import CrossEntropyLoss
    from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed.utils import clip_grad_norm_, set_spmd_backend
    from torchtitan.models.llama3 import model_registry, parallelize_llama

    batch, vocab = batch_of(case.model, args), get_model_args(case.model).vocab_size
    with one_rank_group(device, scratch), dynamo_settings_kept():
        parallelism = ParallelismConfig(spmd_backend="partial_dtensor")  # DTensor FSDP2, as without TP
        set_spmd_backend(parallelism.spmd_backend)
        config = model_registry(TORCHTITAN_FLAVOR[case.model], attn_backend="flex").model
        for layer in config.layers:  # RoPE tables for the trained length, as its trainer sizes them
            layer.attention.rope = dataclasses.replace(layer.attention.rope, max_seq_len=args.seq_len)
        dims = ParallelDims.from_config(parallelism, 1)
        dims.build_mesh()
        with torch.device("meta"):
            model = config.build()
        compile_config = CompileConfig(enable=case.compiled)  # blocks and loss
        model = parallelize_llama(model, parallel_dims=dims, training=TrainingConfig(seq_len=args.seq_len),
                                  parallelism=parallelism, compile_config=compile_config, ac_config=None,
                                  dump_folder=str(scratch))
        model.to_empty(device=device)
        with torch.no_grad():
            model.init_weights(buffer_device=None)
        model.train()
        loss_of = CrossEntropyLoss(CrossEntropyLoss.Config(), compile_config=compile_config)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        tokens = torch.randint(0, vocab, (batch, args.seq_len + 1), device=device)
        positions = torch.arange(args.seq_len, device=device).expand(batch, args.seq_len)
        n_tokens = torch.tensor(batch * args.seq_len, device=device)

        def step() -> torch.Tensor:
            opt.zero_grad(set_to_none=True)
            masks = model.get_attention_masks(positions)
            loss, _ = loss_of(model(tokens[:, :-1], positions, masks), tokens[:, 1:], n_tokens)
            loss.backward()
            clip_grad_norm_(list(model.parameters()), 1.0, foreach=True)
            opt.step()
            return loss.detach()

        step_s, loss = timed(step, args.warmup, args.steps, device)
        return result("torchtitan", case, args, device, step_s, loss, peak_flops)


def torchtitan_unavailable(case: Case, device: torch.device) -> str | None:
    """Why torchtitan cannot be the reference for `case`, or None when it can."""
    if device.type != "cuda":
        return "torchtitan trains on CUDA devices only"
    if case.model not in TORCHTITAN_FLAVOR:
        return f"torchtitan's llama3 registry has no {case.model}"
    try:
        import torchtitan.models.llama3  # noqa: F401
    except Exception as e:  # ImportError, or a torchtitan that does not fit this torch
        return f"import torchtitan failed: {type(e).__name__}: {e}"
    return None


def reference_case(case: Case, args, device: torch.device, peak_flops: float, scratch: Path) -> Result:
    why = torchtitan_unavailable(case, device) if args.reference != "plain" else "--reference plain"
    if why is None:
        try:
            return torchtitan_case(case, args, device, peak_flops, scratch)
        except Exception as e:
            if args.reference == "torchtitan":
                raise
            why = f"torchtitan run failed: {type(e).__name__}: {e}"
            release(device)
    if args.reference == "torchtitan":
        raise RuntimeError(f"--reference torchtitan: {why}")
    print(f"reference for {case.model}: plain PyTorch loop ({why})", flush=True)
    return plain_case(case, args, device, peak_flops)


def plan(args) -> list[Case]:
    """The cases, those the goals need first, so that a time budget cuts the optional ones."""
    compiles = {"on": [True], "off": [False], "both": [True, False]}[args.compile]
    cases = [Case("bessemer", m, p, c) for m in args.models for c in compiles for p in args.precisions]
    if args.reference != "none":
        cases += [Case("reference", m, "bf16", compiles[0]) for m in args.models]
    first = args.models[0]

    def priority(c: Case) -> int:
        if c.run == "reference":
            return 1 if c.model == first else 5
        if c.compiled != compiles[0]:
            return 4
        if c.precision == "bf16" and c.model == first:
            return 0
        return 2 if c.model == FP8_GOAL[0] else 3

    return sorted(cases, key=priority)


def goals(results: list[Result], first: str) -> list[tuple[str, bool | None, str]]:
    """(goal, met — None when not measured, evidence)."""
    def find(run: str, model: str, precision: str) -> Result | None:
        return next((r for r in results if r.run == run and r.model == model and r.precision == precision
                     and r.compiled), None)

    out = []
    model, target = MFU_GOAL
    r = find("bessemer", model, "bf16")
    out.append((f"{model} bf16 compiled MFU >= {target:.0%}", None if r is None else r.mfu >= target,
                "not measured" if r is None else f"{r.mfu:.1%}"))
    model, target = FP8_GOAL
    bf16, fp8 = find("bessemer", model, "bf16"), find("bessemer", model, "fp8")
    speedup = fp8.tokens_per_s / bf16.tokens_per_s if bf16 and fp8 else None
    out.append((f"{model} FP8 >= {target}x bf16 tokens/s (compiled)", None if speedup is None else speedup >= target,
                "not measured" if speedup is None else f"{speedup:.2f}x"))
    ours, titan = find("bessemer", first, "bf16"), find("torchtitan", first, "bf16")
    ratio = ours.tokens_per_s / titan.tokens_per_s if ours and titan else None
    out.append((f"ratio gpu_tokens_vs_torchtitan >= {REFERENCE_GOAL} ({first}, compiled)",
                None if ratio is None else ratio >= REFERENCE_GOAL,
                "not measured against torchtitan" if ratio is None else f"{ratio:.3f}"))
    return out


def table(results: list[Result], args) -> str:
    rows = ["| run | model | batch x seq | precision | compile | ms/step | tokens/s | MFU | peak GiB |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    rows += [f"| {r.run} | {r.model} | {batch_of(r.model, args)} x {args.seq_len} | {r.precision} | "
             f"{'on' if r.compiled else 'off'} | {r.step_s * 1e3:.1f} | {r.tokens_per_s:,.0f} | {100 * r.mfu:.1f}% | "
             f"{r.peak} |" for r in results]
    return "\n".join(rows)


def run_case(case: Case, args, device: torch.device, peak_flops: float | None, scratch: Path,
             index: int) -> tuple[Result, float | None]:
    if case.run == "bessemer":
        return bessemer_case(case, args, device, scratch / f"run{index}", peak_flops)
    if peak_flops is None:  # the trainer's peak for this device comes from a bessemer case
        raise RuntimeError("no bessemer case ran before the reference: no peak FLOP/s to compare with")
    return reference_case(case, args, device, peak_flops, scratch), peak_flops


def run_cases(args, device: torch.device) -> tuple[list[Result], list[str]]:
    """Every planned case that the time budget lets start; (results, names of the cases that failed)."""
    results, failed = [], []
    deadline = time.monotonic() + args.budget_s if args.budget_s > 0 else float("inf")
    longest, peak_flops, name = 0.0, None, ""
    with tempfile.TemporaryDirectory(prefix="gpu_throughput_") as tmp:
        try:
            for i, case in enumerate(plan(args)):
                name = f"{case.run} {case.model} {case.precision} {'compiled' if case.compiled else 'eager'}"
                if time.monotonic() + longest > deadline:
                    print(f"skipped (time budget of {args.budget_s:g} s): {name}", flush=True)
                    continue
                t0 = time.monotonic()
                try:
                    r, peak_flops = run_case(case, args, device, peak_flops, Path(tmp), i)
                    results.append(r)
                    print(r.line(), flush=True)
                except Exception as e:
                    failed.append(name)
                    print(f"FAILED {name}: {type(e).__name__}: {e}", flush=True)
                    traceback.print_exc(limit=-4)
                release(device)
                longest = max(longest, time.monotonic() - t0)
        except OutOfTime:
            failed.append(f"{name} (stopped: out of time)")
            print(f"stopped by SIGTERM during: {name}", flush=True)
    return results, failed


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama3-1b,llama3-3b", help="registry sizes, comma-separated; the "
                        "first is the reference ratio's")
    parser.add_argument("--precision", default="bf16,fp8", help="bf16, fp8 or both, comma-separated")
    parser.add_argument("--compile", choices=("on", "off", "both"), default="both")
    parser.add_argument("--batch", type=int, default=0, help="sequences per step; 0 = per model (llama3-1b 8, "
                        "llama3-3b 4, others 2)")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per case")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation happens here)")
    parser.add_argument("--reference", choices=("auto", "torchtitan", "plain", "none"), default="auto",
                        help="auto: torchtitan where it runs, else the plain PyTorch loop")
    parser.add_argument("--budget-s", type=float, default=0, help="start no case that the longest so far would "
                        "carry past this many seconds; 0 = no limit")
    parser.add_argument("--strict-goals", action="store_true", help="exit 1 when a goal is missed or not measured")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else None,
                        help="default: cuda when present, else the script says so and exits")
    args = parser.parse_args()
    args.models = [m.strip() for m in args.model.split(",") if m.strip()]
    args.precisions = [p.strip() for p in args.precision.split(",") if p.strip()]
    try:
        for m in args.models:
            get_model_args(m)
    except ConfigError as e:
        parser.error(str(e))
    if not args.models or not args.precisions or any(p not in ("bf16", "fp8") for p in args.precisions):
        parser.error(f"--model needs a size and --precision takes bf16 and/or fp8, got {args.precision!r}")
    if args.steps < 1 or args.warmup < 0:
        parser.error(f"--steps must be >= 1 and --warmup >= 0, got {args.steps} and {args.warmup}")
    return args


def main() -> int:
    args = parse_args()
    if args.device is None:
        print("no GPU here: nothing measured (pass --device cpu --model debug --seq-len 64 --compile off for the "
              "smoke test)")
        return 0
    device = torch.device(args.device)
    signal.signal(signal.SIGTERM, out_of_time)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"{where}; torch {torch.__version__}; {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    for m in args.models:
        print(f"model {m} ({count_params(get_model_args(m))['total'] / 1e6:,.1f}M parameters): "
              f"{batch_of(m, args)} x {args.seq_len} tokens per step")
    print(f"{args.warmup} warm-up + {args.steps} timed steps per case", flush=True)
    results, failed = run_cases(args, device)
    print("\n" + table(results, args) + "\n")
    verdicts = goals(results, args.models[0])
    if device.type != "cuda" or "h200" not in where.lower():
        print(f"goals are set for one H200 on llama3-1b/llama3-3b; this is {where}")
    for goal, met, evidence in verdicts:
        print(f"goal {goal}: {evidence}" + ("" if met is None else f" — {'met' if met else 'MISSED'}"))
    ours = next((r for r in results if r.run == "bessemer" and r.model == args.models[0] and r.precision == "bf16"
                 and r.compiled == (args.compile != "off")), None)
    ref = next((r for r in results if r.run != "bessemer" and r.model == args.models[0]), None)
    ratio = ours.tokens_per_s / ref.tokens_per_s if ours and ref else float("nan")
    print(f"ratio = bessemer tokens/s / {ref.run if ref else 'no reference'} tokens/s, {args.models[0]} bf16 "
          f"(higher is better; reference: {ref.run if ref else 'none measured'})")
    print(f"ratio gpu_tokens_vs_torchtitan {ratio:.3f}")
    if failed:
        print(f"{len(failed)} case(s) failed: {'; '.join(failed)}")
        return 1
    return 1 if args.strict_goals and not all(met for _, met, _ in verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())
