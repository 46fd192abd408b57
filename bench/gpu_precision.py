"""bf16 vs FP8 training throughput and MFU on one GPU (torchao Float8Linear with real FP8 kernels, under
torch.compile), on a ~1B Llama configuration.

    python bench/gpu_precision.py                       # on a GPU: llama3-1b, 4 x 2048 tokens per step
    python bench/gpu_precision.py --device cpu --model debug --seq-len 128 --emulate --no-compile   # smoke test

Each mode builds the model the way the trainer does (precision policy, FP8 conversion by rules), then times
`--steps` optimizer steps after `--warmup` steps. MFU = 6N+attention FLOPs per token (the trainer's own
`flops_per_token`) x tokens/s / the catalog's dense bf16 peak of the GPU (FP8 MFU is also printed against the
bf16 peak, the usual convention, so the two are comparable). Ends with `ratio fp8_vs_bf16_tokens_per_s X`.
"""

import argparse
import gc
import time

import torch
import torch.nn.functional as F

from bessemer.config import ParallelConfig, load_config
from bessemer.model.registry import count_params, flops_per_token, get_model_args
from bessemer.parallel.build import build_model_parts, single_process
from bessemer.plan.catalog import match_gpu
from bessemer.precision.policy import PrecisionPolicy, compute_context


def run(mode: str, args: argparse.Namespace, device: torch.device) -> float:
    overrides = ["--precision.dtype=bf16"]
    if mode == "fp8":
        overrides += ["--precision.fp8.enabled=true", f"--precision.fp8.recipe={args.recipe}",
                      f"--precision.fp8.emulate={str(args.emulate).lower()}"]
    cfg = load_config(None, overrides).precision
    torch.manual_seed(0)
    margs = get_model_args(args.model, args.vocab)
    # The trainer's own recipe on a mesh of one: FP8 conversion, recompute, autocast islands.
    (model,), _ = build_model_parts(margs, args.seq_len, single_process(), None, ParallelConfig(), cfg, device, seed=0)
    policy = PrecisionPolicy(cfg)
    step_model = torch.compile(model) if args.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    tokens = torch.randint(0, margs.vocab_size, (args.batch, args.seq_len + 1), device=device)

    def step() -> None:
        with compute_context(policy, device, autocast=True):
            logits = step_model(tokens[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / args.steps
    tokens_per_s = args.batch * args.seq_len / dt
    mem = torch.cuda.max_memory_allocated() / 2 ** 30 if device.type == "cuda" else float("nan")
    line = f"{mode:<5} {dt * 1e3:8.1f} ms/step  {tokens_per_s:10,.0f} tokens/s  peak {mem:6.1f} GiB"
    if args.peak_tflops:
        mfu = flops_per_token(margs, args.seq_len) * tokens_per_s / (args.peak_tflops * 1e12)
        line += f"  MFU {100 * mfu:5.1f}% (of {args.peak_tflops:g} TFLOP/s bf16 dense)"
    print(line, flush=True)
    return tokens_per_s


def release(device: torch.device) -> None:
    """Free the previous mode's model before the next one measures its peak."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama3-1b")
    parser.add_argument("--vocab", type=int, default=0, help="0 = the registry's vocabulary")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--recipe", default="tensorwise")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else None,
                        help="default: cuda when present, else the script says so and exits")
    parser.add_argument("--emulate", action="store_true", help="FP8 numerics without FP8 kernels")
    parser.add_argument("--no-compile", dest="compile", action="store_false")
    args = parser.parse_args()
    if args.device is None:
        print("no GPU here: nothing measured (pass --device cpu --model debug --emulate --no-compile for the "
              "smoke test)")
        return
    device = torch.device(args.device)
    args.peak_tflops = 0.0
    if device.type == "cuda":
        gpu = match_gpu(torch.cuda.get_device_name(device))
        args.peak_tflops = gpu.bf16_tflops if gpu else 0.0
        print(f"{torch.cuda.get_device_name(device)}; torch {torch.__version__}")
    n = count_params(get_model_args(args.model, args.vocab))["total"]
    print(f"model {args.model} ({n / 1e6:,.1f}M parameters), {args.batch} x {args.seq_len} tokens per step, "
          f"compile {args.compile}, FP8 recipe {args.recipe}{' (emulated)' if args.emulate else ''}")
    bf16 = run("bf16", args, device)
    release(device)
    fp8 = run("fp8", args, device)
    print(f"ratio fp8_vs_bf16_tokens_per_s {fp8 / bf16:.3f}")


if __name__ == "__main__":
    main()
