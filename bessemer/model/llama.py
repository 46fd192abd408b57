"""A Llama-3-style decoder as a plain nn.Module (RMSNorm, RoPE, SwiGLU, grouped-query attention).

It knows nothing about parallelism, precision or checkpoints: those are applied from outside. Layers live
in a ModuleDict keyed "0".."n-1" and `forward` skips parts that are absent (None), so a pipeline stage can
delete what it does not own without changing any parameter name. `__init__` allocates, `init_weights(seed)`
fills: build on the meta device, `to_empty()` onto the real one, then `init_weights(seed)`.

Initialisation is a function of (seed, parameter name, row block) alone: each block of rows of each parameter
is drawn from its own generator. A rank that holds a shard (FSDP, tensor parallel) or a pipeline stage draws
only the blocks its shard covers, so the full weights are the single-process ones for any layout, no rank
ever holds more than its shards plus one block, and shards and stages all get their own values.
"""

import hashlib
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor

from bessemer.dtensor import local_part
from bessemer.model.registry import ModelArgs

# Values drawn per generator: blocks of whole rows of about this many elements (16 MiB in fp32).
INIT_BLOCK_NUMEL = 1 << 22


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32 whatever the compute dtype: statistics in 16 bits drift. One upcast, one downcast:
        # under torch.compile the whole norm is one fused kernel.
        x32 = x.float()
        out = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return out.type_as(x) * self.weight


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
    """The rotation tables of `apply_rope`, (T, hd) each, laid out like a head's pairs: cos(θ_i) at 2i and 2i+1;
    sin(θ_i) negated at 2i, kept at 2i+1 (the signs of the rotation matrix's off-diagonal)."""
    freqs = rope_frequencies(args).to(device)
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), freqs)  # (T, hd/2)
    sign = torch.tensor([-1.0, 1.0], device=device)
    cos = angles.cos().repeat_interleave(2, dim=-1)  # (T, hd)
    sin = (angles.sin()[..., None] * sign).flatten(-2)  # (T, hd): -s0, s0, -s1, s1, ...
    return cos, sin


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[2i], x[2i+1]) by position-dependent angles, in fp32. x: (B, T, nh, hd).

    Written as two elementwise products on real tensors, x*cos + swap(x)*sin with swap(x) = (x[2i+1], x[2i]),
    so the compiler fuses the whole rotation into one kernel; the values are those of the rotation matrix
    (x0 c - x1 s, x1 c + x0 s) to the bit, since negating s is exact and fp32 addition commutes."""
    T = x.shape[1]
    x32 = x.float()
    swapped = x32.unflatten(-1, (-1, 2)).flip(-1).flatten(-2)  # (B, T, nh, hd): pairs swapped
    c, s = cos[:T, None, :], sin[:T, None, :]  # (T, 1, hd), broadcast over batch and heads
    return (x32 * c + swapped * s).type_as(x)


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
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hd) and (B, nkv, T, hd)
        # Grouped-query attention: each kv head serves n_heads / n_kv_heads query heads; the kernel indexes the
        # shared head instead of copying K and V per query head.
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])
        y = y.transpose(1, 2).reshape(B, T, -1)  # (B, T, nh*hd)
        return self.wo(y)


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, layer_id: int, args: ModelArgs):
        super().__init__()
        self.attention_norm = RMSNorm(args.dim, args.norm_eps)
        self.attention = Attention(args)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)
        self.feed_forward = FeedForward(args.dim, args.ffn_hidden)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class _RowsIntoGrad:
    """The gradient rows of one tied-embedding lookup, added into the weight's `.grad` in place.

    With tied embeddings the head's gradient (a dense vocab x dim matrix) and the lookup's meet at one weight:
    through autograd the lookup's gradient is materialised as a second dense matrix and the two are summed —
    two or three vocab x dim matrices at the peak of backward. Here the lookup hands over only its rows (tokens x
    dim): they are added into `.grad` once the head's gradient has landed there (a post-accumulate-grad hook on
    the weight), or at once when it already has. One vocab x dim matrix."""

    def __init__(self, weight: nn.Parameter):
        self.weight, self.pending, self.landed = weight, [], False
        self.handle = weight.register_post_accumulate_grad_hook(self._landed)

    def add(self, tokens: torch.Tensor, rows: torch.Tensor) -> None:
        if self.landed:
            self.weight.grad.index_add_(0, tokens, rows.to(self.weight.grad.dtype))
        else:
            self.pending.append((tokens, rows))

    def _landed(self, weight: torch.Tensor) -> None:
        self.landed = True
        self.handle.remove()
        for tokens, rows in self.pending:
            weight.grad.index_add_(0, tokens, rows.to(weight.grad.dtype))
        self.pending.clear()


class _Lookup(torch.autograd.Function):
    """F.embedding whose weight gradient goes to a _RowsIntoGrad instead of through autograd. The weight enters
    detached (no autograd edge); `anchor`, an empty leaf that requires grad, makes the output require grad."""

    @staticmethod
    def forward(ctx, tokens: torch.Tensor, weight: torch.Tensor, anchor: torch.Tensor, sink: _RowsIntoGrad):
        ctx.save_for_backward(tokens)
        ctx.sink = sink
        return F.embedding(tokens, weight)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (tokens,) = ctx.saved_tensors
        ctx.sink.add(tokens.reshape(-1), grad.reshape(-1, grad.shape[-1]))
        return None, None, None, None


class TokenEmbedding(nn.Embedding):
    """nn.Embedding; when it shares its weight with the output head of the same module (`tied`), the lookup's
    gradient rows are added into the head's gradient in place (_RowsIntoGrad)."""

    def __init__(self, vocab_size: int, dim: int, tied: bool = False):
        super().__init__(vocab_size, dim)
        self.tied = tied

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        if not (self.tied and torch.is_grad_enabled() and weight.requires_grad) or isinstance(weight, DTensor):
            return super().forward(tokens)
        anchor = torch.empty(0, device=weight.device, requires_grad=True)
        return _Lookup.apply(tokens, weight.detach(), anchor, _RowsIntoGrad(weight))


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs, max_seq_len: int):
        super().__init__()
        args.check()
        self.args = args
        self.max_seq_len = max_seq_len
        self.tok_embeddings: nn.Embedding | None = TokenEmbedding(args.vocab_size, args.dim, tied=args.tie_embeddings)
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

    def init_weights(self, seed: int) -> None:
        """Fill every parameter and buffer (also after `to_empty()` from the meta device), each parameter's
        values a function of (seed, its name) only. Parameters may be DTensor shards: each rank fills its own.
        A pipeline stage's `output.weight` with tied embeddings gets the embedding's values (the tied copy)."""
        self.init_buffers()
        tied = self.args.tie_embeddings
        for name, p in self.named_parameters():
            source = "tok_embeddings.weight" if tied and name == "output.weight" else name
            init_param_(p, self.init_rule(source), seed, source)

    def init_rule(self, name: str) -> Callable[[torch.Tensor, torch.Generator], None]:
        """How parameter `name` is drawn: fills a block of its rows in place from a generator."""
        if name.endswith("norm.weight"):
            return lambda t, g: t.fill_(1.0)
        if name == "tok_embeddings.weight":
            return lambda t, g: nn.init.normal_(t, generator=g)
        if name == "output.weight":
            # Output logits start near zero (std ~ 1/sqrt(dim)), so the first loss is close to ln(vocab).
            std = self.args.dim ** -0.5
            return lambda t, g: nn.init.trunc_normal_(t, std=std, a=-3 * std, b=3 * std, generator=g)
        _, layer_id, _, module, _ = name.split(".")  # layers.{i}.attention.wq.weight
        # Residual-branch outputs shrink with depth so the residual stream's variance stays bounded.
        std = 0.02 if module in ("wq", "wk", "wv", "w1") else 0.02 / (2 * (int(layer_id) + 1)) ** 0.5
        return lambda t, g: nn.init.trunc_normal_(t, std=std, generator=g)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (B, T) int64 -> logits (B, T, vocab). A pipeline stage gets and returns hidden states."""
        h = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens  # (B, T, dim)
        assert h.shape[1] <= self.max_seq_len, f"sequence length {h.shape[1]} > max_seq_len {self.max_seq_len}"
        for layer in self.layers.values():
            h = layer(h, self.rope_cos, self.rope_sin)
        h = self.norm(h) if self.norm is not None else h
        return self.output(h) if self.output is not None else h


def _block_seed(seed: int, name: str, block: int) -> int:
    digest = hashlib.blake2b(f"{seed}/{name}/{block}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1  # a non-negative 63-bit seed


@torch.no_grad()
def init_param_(p: torch.Tensor, draw: Callable[[torch.Tensor, torch.Generator], None], seed: int,
                name: str) -> None:
    """Fill `p` (a tensor, or a DTensor whose local shard is filled) with `draw`, row block by row block,
    each block from a generator seeded by (seed, name, block index): only the blocks that overlap this rank's
    shard are drawn, in fp32 on the shard's device, so the result does not depend on how `p` is sharded."""
    local, offset = local_part(p)
    if local.numel() == 0:
        return
    rows, row_shape = p.shape[0], tuple(p.shape[1:])
    per_block = max(1, INIT_BLOCK_NUMEL // max(1, math.prod(row_shape)))
    lo, hi = offset[0], offset[0] + local.shape[0]  # this shard's rows
    cols = tuple(slice(o, o + n) for o, n in zip(offset[1:], local.shape[1:]))
    for block in range(lo // per_block, (hi - 1) // per_block + 1):
        start, stop = block * per_block, min((block + 1) * per_block, rows)
        values = torch.empty((stop - start, *row_shape), dtype=torch.float32, device=local.device)
        draw(values, torch.Generator(local.device).manual_seed(_block_seed(seed, name, block)))
        a, b = max(start, lo), min(stop, hi)
        local[a - lo:b - lo].copy_(values[(slice(a - start, b - start), *cols)])


def build_model(args: ModelArgs, max_seq_len: int, device: str | torch.device = "cpu",
                seed: int | None = None) -> Transformer:
    """Build on the meta device (no memory), then materialise on `device` and initialise with `seed`.

    With device="meta" the model stays unmaterialised: shapes and parameter counts of a 405B model cost
    nothing. seed=None takes one from torch's global generator (seed it before calling for reproducible
    weights); the trainer passes run.seed, which gives the weights every parallel layout starts from.
    """
    with torch.device("meta"):
        model = Transformer(args, max_seq_len)
    if torch.device(device).type != "meta":
        model.to_empty(device=device)
        if args.tie_embeddings:  # to_empty() across devices makes new Parameters and so unties them
            model.output.weight = model.tok_embeddings.weight
        if seed is None:
            seed = int(torch.randint(0, 2**62, (), dtype=torch.int64))
        model.init_weights(seed)
    return model
