"""Memory per GPU for cluster sizing: model states under ZeRO / FSDP / HSDP and activations by the
Korthikanti et al. formulas. Plain Python, no torch.

`plan/memory.py` counts what *our* trainer keeps, tensor by tensor, for one config; this module is the
closed-form model that `plan` evaluates for thousands of layouts, in the published formulas so that its
numbers can be checked against the papers:

Model states (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models", §5): with Ψ parameters on a model-parallel rank and mixed-precision Adam, 2Ψ bytes of 16-bit
weights, 2Ψ of 16-bit gradients and KΨ of optimizer states (K = 12: fp32 master copy, momentum, variance):
    DP      (2 + 2 + K)·Ψ            ZeRO-1  (2 + 2)·Ψ + K·Ψ/N
    ZeRO-2  2Ψ + (2 + K)·Ψ/N          ZeRO-3  (2 + 2 + K)·Ψ/N   (FSDP; HSDP with N = the shard group)
Our trainer keeps fp32 weights and gradients (4 + 4 + 8 bytes, also 16 per parameter) and shards all of
them over dp_shard, i.e. ZeRO-3, plus the unsharded 16-bit copies of the layers in use (FSDP buffers).

Activations (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
§4, Table 2), bytes per layer for a GPT layer with s tokens, micro-batch b, hidden h, a heads, tp = t:
    no parallelism                   sbh·(34 + 5as/h)
    tensor parallel                  sbh·(10 + 24/t + 5as/(ht))
    tensor + sequence parallel       sbh·(34/t + 5as/(ht))
    tensor parallel + selective      sbh·(10 + 24/t)
    tensor + sequence + selective    sbh·34/t
    full recomputation               2sbh (the layer input; /t with sequence parallelism)
`layer_activation_bytes` derives them term by term (the paper's §4.1 accounting) so that the same code
covers Llama layers: SwiGLU (w1, w3 outputs, the gate, the product: 8sbf instead of GeLU's 4sbf), grouped
KV heads (k and v at the kv width), flash attention (no s² terms: the output and a log-sum-exp per head
instead), no dropout masks. With flash attention "selective" recomputes the attention core and the
pointwise ops (the SwiGLU gate): op-level selective checkpointing that keeps only the matmul outputs
(save_ops = ["mm"]).

Pipeline: the first stage of 1F1B holds p micro-batches of its L/p layers, i.e. L layers' worth; the
interleaved schedule multiplies that by (1 + (p−1)/(p·v)); GPipe holds all m micro-batches.
"""

from dataclasses import dataclass

GB = 1e9
GIB = 2**30
ZERO_K = 12  # bytes of optimizer state per parameter under mixed-precision Adam (fp32 master, m, v)
FRAGMENTATION = 0.10  # allocator fragmentation margin on top of the estimate
CONTEXT_GIB = 1.0  # CUDA context, NCCL buffers, workspace


@dataclass(frozen=True)
class Arch:
    """A transformer's shape as the planner needs it."""

    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_hidden: int
    vocab_size: int
    gated: bool = True  # SwiGLU (3 matrices) vs GeLU MLP (2)
    flash: bool = True  # attention without a stored s x s matrix
    dropout: bool = False  # dropout masks stored (GPT-style training)
    tie_embeddings: bool = False
    name: str = ""

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * (self.dim // self.n_heads)

    def layer_matmul_params(self) -> int:
        attn = 2 * self.dim * self.dim + 2 * self.dim * self.kv_dim
        return attn + (3 if self.gated else 2) * self.dim * self.ffn_hidden

    def params(self) -> int:
        """All parameters: blocks (matrices + two norm vectors each), embedding, final norm, head."""
        head = 0 if self.tie_embeddings else self.vocab_size * self.dim
        return (self.n_layers * (self.layer_matmul_params() + 2 * self.dim) + self.vocab_size * self.dim
                + self.dim + head)


def model_state_bytes(params: float, zero: int, dp: int, k: int = ZERO_K) -> dict[str, float]:
    """Bytes per GPU of 16-bit parameters, 16-bit gradients and K bytes/parameter of optimizer states for
    `params` parameters replicated over `dp` data-parallel ranks under ZeRO stage `zero` (0 = plain DP)."""
    if zero not in (0, 1, 2, 3):
        raise ValueError(f"ZeRO stage must be 0-3, got {zero}")
    shard = lambda stage: dp if zero >= stage else 1  # noqa: E731 -- which states stage `zero` partitions
    out = {"params": 2 * params / shard(3), "grads": 2 * params / shard(2), "optimizer": k * params / shard(1)}
    out["total"] = sum(out.values())
    return out


@dataclass(frozen=True)
class ActTerm:
    """One tensor a layer keeps for backward: bytes per token, whether tensor parallelism splits it even
    without sequence parallelism, and whether selective recomputation drops it."""

    name: str
    bytes_per_token: float
    tp_split: bool
    selective_drops: bool = False


def layer_activation_terms(arch: Arch, seq_len: int, c: int = 2) -> list[ActTerm]:
    """The tensors of one layer in the paper's accounting (c = bytes of the 16-bit activations); attention
    scores are per token too: a·s values per token per s x s matrix."""
    h, a, s, f, kv = arch.dim, arch.n_heads, seq_len, arch.ffn_hidden, arch.kv_dim
    terms = [
        ActTerm("attention_norm input", c * h, False),
        ActTerm("qkv input", c * h, False),
        ActTerm("q", c * h, True),
        ActTerm("k", c * kv, True),
        ActTerm("v", c * kv, True),
    ]
    if arch.flash:  # selective recomputes the attention core, so its output and log-sum-exp go
        terms += [ActTerm("attention output", c * h, True, True), ActTerm("logsumexp", 4 * a, True, True)]
    else:
        terms += [ActTerm("softmax output", c * a * s, True, True)]
        if arch.dropout:
            terms += [ActTerm("softmax dropout mask", a * s, True, True),
                      ActTerm("softmax dropout output", c * a * s, True, True)]
    terms += [ActTerm("output projection input", c * h, True)]
    if arch.dropout:
        terms += [ActTerm("attention dropout mask", h, False)]
    terms += [ActTerm("ffn_norm input", c * h, False), ActTerm("ffn input", c * h, False)]
    if arch.gated:
        terms += [ActTerm("w1 output", c * f, True), ActTerm("w3 output", c * f, True),
                  ActTerm("silu output", c * f, True, selective_drops=arch.flash),
                  ActTerm("w2 input", c * f, True)]
    else:
        terms += [ActTerm("gelu input", c * f, True), ActTerm("fc2 input", c * f, True)]
    if arch.dropout:
        terms += [ActTerm("ffn dropout mask", h, False)]
    return terms


def layer_activation_bytes(arch: Arch, seq_len: int, micro_batch: int, tp: int = 1,
                           sequence_parallel: bool = False, recompute: str = "none", c: int = 2,
                           cp: int = 1) -> float:
    """Bytes one layer keeps for backward for one micro-batch (Korthikanti et al. Table 2 for GPT layers);
    context parallelism over `cp` ranks gives each rank s/cp of the tokens."""
    tokens = seq_len * micro_batch / cp
    if recompute == "full":
        return c * arch.dim * tokens / (tp if sequence_parallel else 1)
    total = 0.0
    for term in layer_activation_terms(arch, seq_len, c):
        if recompute == "selective" and term.selective_drops:
            continue
        split = tp if (term.tp_split or sequence_parallel) else 1
        total += term.bytes_per_token * tokens / split
    return total


def recompute_flops_fraction(arch: Arch, seq_len: int, recompute: str) -> float:
    """Extra forward FLOPs per token that recomputation adds, over the layers' training FLOPs:
    full recomputes each layer's forward (one third of forward + backward); selective the attention core
    (QKᵀ and attention·V: 4·h·s FLOPs per token per layer), with flash attention too: the kernel's forward
    runs again in backward so that its output need not be kept."""
    layer_train = 6 * arch.layer_matmul_params() + 12 * arch.dim * seq_len
    if recompute == "full":
        return 1 / 3
    if recompute == "selective":
        return 4 * arch.dim * seq_len / layer_train
    return 0.0


def pipeline_in_flight_factor(schedule: str, pp: int, virtual: int, microbatches: int) -> float:
    """The activations the first pipeline rank holds at its peak, in units of L layers x one micro-batch
    (Korthikanti et al. §4.2.3): 1F1B holds min(m, p) micro-batches of its L/p layers, interleaved
    (1 + (p−1)/(p·v)) times that, GPipe all m."""
    if pp == 1:
        return 1.0
    if schedule == "gpipe":
        return microbatches / pp
    if schedule in ("interleaved_1f1b", "zero_bubble"):
        return min(1 + (pp - 1) / (pp * virtual), microbatches / pp)
    return min(microbatches, pp) / pp


def activation_bytes_per_gpu(arch: Arch, seq_len: int, micro_batch: int, tp: int, pp: int, schedule: str,
                             virtual: int, microbatches: int, sequence_parallel: bool, recompute: str,
                             c: int = 2, cp: int = 1, recompute_layers: int | None = None) -> float:
    """Activations on the first pipeline rank (the largest), including the embedding output it holds and,
    when one rank has the whole model, the logits and the fp32 log-softmax of the loss. Full recompute of
    `recompute_layers` k of the L layers (None = all) keeps k layer inputs and L − k layers whole."""
    def layer(mode: str) -> float:
        return layer_activation_bytes(arch, seq_len, micro_batch, tp, sequence_parallel, mode, c, cp)

    k = recomputed_layers(arch.n_layers, recompute, recompute_layers)
    per_model = k * layer(recompute) + (arch.n_layers - k) * layer("none") if recompute == "full" else \
        arch.n_layers * layer(recompute)
    total = per_model * pipeline_in_flight_factor(schedule, pp, virtual, microbatches)
    if recompute != "none" and k:  # backward rebuilds one layer on top
        total += layer("none")
    tokens = seq_len * micro_batch / cp
    if pp == 1:
        total += tokens * arch.vocab_size * (c + 4) / tp  # logits + fp32 log-softmax (vocab-parallel loss)
    return total


def recomputed_layers(n_layers: int, recompute: str, recompute_layers: int | None) -> int:
    """Layers whose activations are rebuilt in backward: all of them for selective and full, k for partial
    full recomputation (`recompute_layers`), none without recomputation."""
    if recompute == "none":
        return 0
    if recompute == "full" and recompute_layers is not None:
        return min(max(recompute_layers, 0), n_layers)
    return n_layers
