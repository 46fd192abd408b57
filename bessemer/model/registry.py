"""Model sizes and the arithmetic on them (parameter count, FLOPs per token) — plain Python, no torch.

`plan` sizes clusters from these numbers without building a model; `model/llama.py` builds modules from
the same `ModelArgs`, and a test checks that both count the same parameters.
"""

import dataclasses
from dataclasses import dataclass
from typing import Protocol

from bessemer.errors import ConfigError


@dataclass(frozen=True)
class ModelArgs:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_hidden: int  # SwiGLU hidden width (w1/w3 out, w2 in)
    vocab_size: int
    norm_eps: float = 1e-5
    rope_theta: float = 500_000.0
    # Llama 3.1 long-context RoPE rescaling (factor, low_freq_factor, high_freq_factor, original context); None = off.
    rope_scaling: tuple[float, float, float, int] | None = None
    tie_embeddings: bool = False
    published_params: int = 0  # the count the model's authors published (0 = ours, no published count)

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def with_vocab(self, vocab_size: int) -> "ModelArgs":
        return dataclasses.replace(self, vocab_size=vocab_size, published_params=0)

    def check(self) -> None:
        assert self.dim % self.n_heads == 0, f"dim {self.dim} not divisible by n_heads {self.n_heads}"
        assert self.n_heads % self.n_kv_heads == 0, f"n_heads {self.n_heads} not divisible by n_kv_heads {self.n_kv_heads}"
        assert self.head_dim % 2 == 0, f"head_dim {self.head_dim} must be even for RoPE"


_LLAMA31_ROPE = (8.0, 1.0, 4.0, 8192)

# Llama 3 dimensions from Meta's published configs (Llama 3.2 1B/3B; Llama 3.1 8B/70B/405B).
MODEL_SIZES: dict[str, ModelArgs] = {
    # ~1M parameters: a CPU smoke-test model.
    "debug": ModelArgs(dim=128, n_layers=4, n_heads=4, n_kv_heads=2, ffn_hidden=384, vocab_size=1024),
    # The debug model with tied embeddings (input embedding = output head), as llama3-1b has.
    "debug-tied": ModelArgs(dim=128, n_layers=4, n_heads=4, n_kv_heads=2, ffn_hidden=384, vocab_size=1024,
                            tie_embeddings=True),
    # ~10M parameters: the demo model.
    "tiny": ModelArgs(dim=256, n_layers=8, n_heads=8, n_kv_heads=4, ffn_hidden=768, vocab_size=8192),
    "llama3-1b": ModelArgs(dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, ffn_hidden=8192, vocab_size=128256,
                           rope_scaling=(32.0, 1.0, 4.0, 8192), tie_embeddings=True,
                           published_params=1_235_814_400),
    "llama3-3b": ModelArgs(dim=3072, n_layers=28, n_heads=24, n_kv_heads=8, ffn_hidden=8192, vocab_size=128256,
                           rope_scaling=(32.0, 1.0, 4.0, 8192), tie_embeddings=True,
                           published_params=3_212_749_824),
    "llama3-8b": ModelArgs(dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, ffn_hidden=14336, vocab_size=128256,
                           rope_scaling=_LLAMA31_ROPE, published_params=8_030_261_248),
    "llama3-70b": ModelArgs(dim=8192, n_layers=80, n_heads=64, n_kv_heads=8, ffn_hidden=28672, vocab_size=128256,
                            rope_scaling=_LLAMA31_ROPE, published_params=70_553_706_496),
    "llama3-405b": ModelArgs(dim=16384, n_layers=126, n_heads=128, n_kv_heads=8, ffn_hidden=53248,
                             vocab_size=128256, rope_scaling=_LLAMA31_ROPE, published_params=405_853_388_800),
}


def count_params(args: ModelArgs) -> dict[str, int]:
    """Parameters by part: embedding, per-layer total, final norm, output head (0 when tied), total."""
    kv_dim = args.n_kv_heads * args.head_dim
    attn = args.dim * args.dim * 2 + args.dim * kv_dim * 2  # wq, wo + wk, wv
    ffn = 3 * args.dim * args.ffn_hidden  # w1, w2, w3
    layer = attn + ffn + 2 * args.dim  # + attention_norm, ffn_norm
    embedding = args.vocab_size * args.dim
    output = 0 if args.tie_embeddings else args.vocab_size * args.dim
    total = embedding + args.n_layers * layer + args.dim + output
    return {"embedding": embedding, "layer": layer, "layers": args.n_layers * layer, "norm": args.dim,
            "output": output, "total": total}


def flops_per_token(args: ModelArgs, seq_len: int) -> float:
    """Training FLOPs per token: 6·N + 12·L·d·T (forward + backward).

    N counts the parameters that take part in matrix multiplies: every parameter except the embedding table
    (a lookup), plus the output head (which is the embedding matrix when tied). The attention term
    12·L·d·T covers QK^T and attention·V (2 matmuls x 2 FLOPs x 3 for forward+backward, summed over T keys)
    — Chinchilla/PaLM appendix B, as used by nanoGPT and torchtitan. It ignores causal masking savings,
    as they do, so MFU values are comparable.
    """
    p = count_params(args)
    n_matmul = p["total"] - p["embedding"] + args.vocab_size * args.dim * args.tie_embeddings
    return 6.0 * n_matmul + 12.0 * args.n_layers * args.dim * seq_len


def get_model_args(name: str, vocab_size: int = 0) -> ModelArgs:
    """The registry entry, optionally with another vocabulary (e.g. the data's tokenizer)."""
    if name not in MODEL_SIZES:
        raise ConfigError(f"unknown model size {name!r}; choose one of {', '.join(MODEL_SIZES)}")
    args = MODEL_SIZES[name]
    return args.with_vocab(vocab_size) if vocab_size and vocab_size != args.vocab_size else args


class ModelChoice(Protocol):
    """What the registry needs of the config's [model] section (the registry does not import the config)."""

    name: str
    vocab_size: int


def resolve_model_args(cfg: ModelChoice, data_vocab: int) -> ModelArgs:
    """The registry size with the vocabulary the data needs (model.vocab_size, if set, must cover it)."""
    vocab = cfg.vocab_size or data_vocab
    if vocab < data_vocab:
        raise ConfigError(f"model.vocab_size {vocab} is smaller than the data's vocabulary ({data_vocab})")
    return get_model_args(cfg.name, vocab)
