"""What is being trained: the model's shape (from the registry or given dims) and its FLOPs per token."""

from bessemer.errors import ConfigError
from bessemer.model.registry import MODEL_SIZES, ModelArgs, flops_per_token
from bessemer.plan.footprint import Arch


def arch_from_model_args(args: ModelArgs, name: str = "") -> Arch:
    """A registry model (Llama: SwiGLU, grouped KV heads, flash-style attention, no dropout)."""
    return Arch(dim=args.dim, n_layers=args.n_layers, n_heads=args.n_heads, n_kv_heads=args.n_kv_heads,
                ffn_hidden=args.ffn_hidden, vocab_size=args.vocab_size, tie_embeddings=args.tie_embeddings,
                name=name)


def model_args_of(arch: Arch) -> ModelArgs:
    return ModelArgs(dim=arch.dim, n_layers=arch.n_layers, n_heads=arch.n_heads, n_kv_heads=arch.n_kv_heads,
                     ffn_hidden=arch.ffn_hidden, vocab_size=arch.vocab_size, tie_embeddings=arch.tie_embeddings)


def arch_flops_per_token(arch: Arch, seq_len: int) -> float:
    """Training FLOPs per token: the trainer's own function (model/registry.py) for Llama-style models, the
    same 6·N + 12·L·h·s with N = the matmul parameters (head included) for GeLU models."""
    if arch.gated:
        return flops_per_token(model_args_of(arch), seq_len)
    n_matmul = arch.n_layers * arch.layer_matmul_params() + arch.vocab_size * arch.dim
    return 6.0 * n_matmul + 12.0 * arch.n_layers * arch.dim * seq_len


def resolve_arch(model: str | None, hidden: int, layers: int, heads: int, kv_heads: int, ffn: int,
                 vocab: int, mlp: str = "swiglu") -> Arch:
    """`--model NAME` (dims given too override it) or a model from `--hidden --layers --heads [--kv-heads]
    [--ffn] [--vocab] [--mlp]`. `mlp` "gelu" is a GPT-style MLP: two matrices of width `ffn` (default 4h);
    "swiglu" three (default Llama's 8h/3 rounded up to 256). Registry models are SwiGLU."""
    if mlp not in ("swiglu", "gelu"):
        raise ConfigError(f"--mlp must be swiglu or gelu, got {mlp!r}")
    if model and mlp == "gelu":
        raise ConfigError("--mlp gelu describes a custom model; registry models (--model) are SwiGLU")
    if model:
        if model not in MODEL_SIZES:
            raise ConfigError(f"unknown model {model!r}; choose one of {', '.join(MODEL_SIZES)} or give "
                              f"--hidden --layers --heads")
        base = MODEL_SIZES[model]
        hidden, layers, heads = hidden or base.dim, layers or base.n_layers, heads or base.n_heads
        kv_heads, ffn, vocab = kv_heads or base.n_kv_heads, ffn or base.ffn_hidden, vocab or base.vocab_size
        tie = base.tie_embeddings
    else:
        if not (hidden and layers and heads):
            raise ConfigError("give --model NAME, or the model's dims: --hidden, --layers and --heads "
                              "(and optionally --kv-heads, --ffn, --vocab)")
        kv_heads = kv_heads or heads
        ffn = ffn or (4 * hidden if mlp == "gelu" else _llama_ffn(hidden))
        vocab = vocab or 128256
        tie = False
    for what, n in (("--hidden", hidden), ("--layers", layers), ("--heads", heads), ("--kv-heads", kv_heads),
                    ("--ffn", ffn), ("--vocab", vocab)):
        if n <= 0:
            raise ConfigError(f"{what} must be > 0, got {n}")
    if hidden % heads:
        raise ConfigError(f"--hidden {hidden} is not divisible by --heads {heads}")
    if heads % kv_heads:
        raise ConfigError(f"--heads {heads} is not divisible by --kv-heads {kv_heads}")
    return Arch(dim=hidden, n_layers=layers, n_heads=heads, n_kv_heads=kv_heads, ffn_hidden=ffn,
                vocab_size=vocab, gated=mlp == "swiglu", tie_embeddings=tie,
                name=model or f"custom-{hidden}x{layers}")


def _llama_ffn(hidden: int, multiple: int = 256) -> int:
    """Llama's SwiGLU width: 2/3 of 4h, rounded up to a multiple of 256."""
    f = int(2 * 4 * hidden / 3)
    return multiple * ((f + multiple - 1) // multiple)
