"""A Llama-3-style decoder as a plain nn.Module (RMSNorm, RoPE, SwiGLU, grouped-query attention).

It knows nothing about parallelism, precision or checkpoints: those are applied from outside. Layers live
in a ModuleDict keyed "0".."n-1" and `forward` skips parts that are absent (None), so a pipeline stage can
delete what it does not own without changing any parameter name. `__init__` allocates, `init_weights()`
fills: build on the meta device, `to_empty()` onto the real one, then `init_weights()`.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from bessemer.model.registry import ModelArgs


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32 whatever the compute dtype: statistics in 16 bits drift.
        out = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return out.type_as(x) * self.weight

    def init_weights(self) -> None:
        nn.init.ones_(self.weight)


def rope_frequencies(args: ModelArgs) -> torch.Tensor:
    """Inverse frequencies of rotary embeddings, with Llama 3.1's long-context rescaling when configured."""
    freqs = 1.0 / (args.rope_theta ** (torch.arange(0, args.head_dim, 2, dtype=torch.float32) / args.head_dim))
    if args.rope_scaling is None:
        return freqs
    factor, low_freq_factor, high_freq_factor, old_context = args.rope_scaling
    low_wavelen, high_wavelen = old_context / low_freq_factor, old_context / high_freq_factor
    wavelen = 2 * math.pi / freqs
    # Long wavelengths are slowed by `factor`, short ones kept, and the band between interpolated smoothly.
    smooth = (old_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    scaled = torch.where(wavelen > low_wavelen, freqs / factor, freqs)
    mid = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(mid, (1 - smooth) * freqs / factor + smooth * freqs, scaled)


def rope_cos_sin(args: ModelArgs, seq_len: int, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    freqs = rope_frequencies(args).to(device)
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), freqs)  # (T, hd/2)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[2i], x[2i+1]) by position-dependent angles. x: (B, T, nh, hd)."""
    T = x.shape[1]
    x_ = x.float().unflatten(-1, (-1, 2))  # (B, T, nh, hd/2, 2)
    x0, x1 = x_[..., 0], x_[..., 1]
    c, s = cos[:T, None, :], sin[:T, None, :]  # (T, 1, hd/2), broadcast over batch and heads
    out = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)
    return out.flatten(-2).type_as(x)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = args.n_heads, args.n_kv_heads, args.head_dim
        self.wq = nn.Linear(args.dim, args.n_heads * args.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, args.n_kv_heads * args.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, args.n_kv_heads * args.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * args.head_dim, args.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        # -1 rather than n_heads: under tensor parallelism each rank holds a slice of the heads.
        q = self.wq(x).view(B, T, -1, self.head_dim)  # (B, T, nh, hd)
        k = self.wk(x).view(B, T, -1, self.head_dim)  # (B, T, nkv, hd)
        v = self.wv(x).view(B, T, -1, self.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        # Grouped-query attention: each kv head serves n_heads / n_kv_heads query heads.
        repeats = q.shape[2] // k.shape[2]
        k = k.repeat_interleave(repeats, dim=2)
        v = v.repeat_interleave(repeats, dim=2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hd)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(B, T, -1)  # (B, T, nh*hd)
        return self.wo(y)

    def init_weights(self, init_std: float) -> None:
        for lin in (self.wq, self.wk, self.wv):
            nn.init.trunc_normal_(lin.weight, mean=0.0, std=0.02)
        nn.init.trunc_normal_(self.wo.weight, mean=0.0, std=init_std)


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))

    def init_weights(self, init_std: float) -> None:
        nn.init.trunc_normal_(self.w1.weight, mean=0.0, std=0.02)
        for lin in (self.w2, self.w3):
            nn.init.trunc_normal_(lin.weight, mean=0.0, std=init_std)


class TransformerBlock(nn.Module):
    def __init__(self, layer_id: int, args: ModelArgs):
        super().__init__()
        self.attention_norm = RMSNorm(args.dim, args.norm_eps)
        self.attention = Attention(args)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)
        self.feed_forward = FeedForward(args.dim, args.ffn_hidden)
        # Residual-branch outputs shrink with depth so the residual stream's variance stays bounded.
        self.init_std = 0.02 / (2 * (layer_id + 1)) ** 0.5

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))

    def init_weights(self) -> None:
        self.attention_norm.init_weights()
        self.ffn_norm.init_weights()
        self.attention.init_weights(self.init_std)
        self.feed_forward.init_weights(self.init_std)


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs, max_seq_len: int):
        super().__init__()
        args.check()
        self.args = args
        self.max_seq_len = max_seq_len
        self.tok_embeddings: nn.Embedding | None = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleDict({str(i): TransformerBlock(i, args) for i in range(args.n_layers)})
        self.norm: RMSNorm | None = RMSNorm(args.dim, args.norm_eps)
        self.output: nn.Linear | None = nn.Linear(args.dim, args.vocab_size, bias=False)
        if args.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        # Derived from args, so not persistent: checkpoints hold parameters only.
        cos, sin = rope_cos_sin(args, max_seq_len)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def init_buffers(self) -> None:
        """Fill the derived buffers (RoPE tables), e.g. after `to_empty()` when the weights come from elsewhere."""
        with torch.no_grad():
            cos, sin = rope_cos_sin(self.args, self.max_seq_len, self.rope_cos.device)
            self.rope_cos.copy_(cos)
            self.rope_sin.copy_(sin)

    def init_weights(self) -> None:
        """Fill every parameter and buffer (also after `to_empty()` from the meta device)."""
        self.init_buffers()
        if self.tok_embeddings is not None:
            nn.init.normal_(self.tok_embeddings.weight)
        for layer in self.layers.values():
            layer.init_weights()
        if self.norm is not None:
            self.norm.init_weights()
        if self.output is not None and not self.args.tie_embeddings:
            # Output logits start near zero (std ~ 1/sqrt(dim)), so the first loss is close to ln(vocab).
            std = self.args.dim ** -0.5
            nn.init.trunc_normal_(self.output.weight, mean=0.0, std=std, a=-3 * std, b=3 * std)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, T) int64 -> logits (B, T, vocab). A pipeline stage gets and returns hidden states."""
        h = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens  # (B, T, dim)
        assert h.shape[1] <= self.max_seq_len, f"sequence length {h.shape[1]} > max_seq_len {self.max_seq_len}"
        for layer in self.layers.values():
            h = layer(h, self.rope_cos, self.rope_sin)
        h = self.norm(h) if self.norm is not None else h
        return self.output(h) if self.output is not None else h


def build_model(args: ModelArgs, max_seq_len: int, device: str | torch.device = "cpu") -> Transformer:
    """Build on the meta device (no memory), then materialise on `device` and initialise.

    With device="meta" the model stays unmaterialised: shapes and parameter counts of a 405B model cost
    nothing. Seed torch's RNG before calling for reproducible weights.
    """
    with torch.device("meta"):
        model = Transformer(args, max_seq_len)
    if torch.device(device).type != "meta":
        model.to_empty(device=device)
        if args.tie_embeddings:  # to_empty() across devices makes new Parameters and so unties them
            model.output.weight = model.tok_embeddings.weight
        model.init_weights()
    return model
