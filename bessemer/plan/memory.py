"""Per-rank device memory of a training job, estimated from the config alone — plain Python, no torch.

`bessemer train CFG --dry-run` prints it; `plan` can size clusters with it. It counts the big resident
buffers of the worst rank (the pipeline rank with the largest total) and ignores the CUDA context
(~0.5 GiB), allocator fragmentation and transient backward buffers (activation gradients, the
cross-entropy gradient, reduce-scatter outputs), so a real peak sits somewhat above it.

Notation: P = this rank's parameters (its pipeline stages; block matrices, the embedding and the head
divided by tp, norms replicated), D = dp_shard, s = train.seq_len, b = the micro-batch of one forward
(train.micro_batch / pipeline micro-batches when pp > 1), h = model dim, a = n_heads·head_dim / tp,
f = ffn_hidden / tp, V = vocabulary (/ tp with loss_parallel), c = bytes of precision.dtype (4 or 2),
r = bytes of the residual stream (4 under autocast, else c), t = tp with sequence parallelism, else 1.

- parameters: 4·P/D (fp32 master weights, FSDP shards everything over dp_shard).
- gradients: 4·P/D (fp32, sharded the same way).
- optimizer: 8·P/D (AdamW's two fp32 states).
- offload "full" under FSDP (D > 1 or dp_replicate > 1): parameters, gradients and states live on the
  host (FSDP2 CPUOffloadPolicy) and the device keeps only the FSDP buffers. "partial", and "full" without
  FSDP (fraction 1): the fraction's states step on the host (train/offload.py), which holds 16 bytes
  per such parameter (fp32 copy, its gradient, two states); the device drops their states only.
- fsdp buffers (D > 1, or a replicated FSDP group with a 16-bit compute dtype): unsharded compute-dtype
  copies of the block in use and the prefetched one, plus the root (embedding, final norm, head), which
  `parallel/fsdp.py` does not reshard after forward. With pp > 1 nothing is resharded after forward, so
  the rank's whole stages stay unsharded.
- cast weights (16-bit compute without FSDP, i.e. under autocast): autocast saves its 16-bit copy of
  every matrix for backward: c x (the stage's matrix parameters).
- activations: per block and micro-batch, the tensors autograd saves in our block (model/llama.py),
  counted as Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
  count them for GPT, redone for RMSNorm, RoPE, GQA, SwiGLU and flash-style SDPA (no s² attention
  matrix; SDPA's math fallback would add one):
    norms        2 x sb·(8h + 4) / t        fp32 input and x·rsqrt (the default rules keep norms in
                                            fp32, inputs cast up), rsqrt
    projections  k x sbh·c                  the norm outputs that wq/wk/wv and w1/w3 read (k = 2; under
                                            autocast each matmul saves its own cast, k = 5); not / t:
                                            sequence parallelism all-gathers them before the matmuls
    attention    4·sba·c + 4·sb·n_heads/tp  q, k, v (k and v repeated to n_heads), output, logsumexp
    FFN          4·sbf·c                    w1 and w3 outputs, silu output, their product
  RoPE saves nothing (its cos/sin tables need no gradient), neither does repeat_interleave. The first
  stage adds the token ids (8·sb); the last stage the final norm, the head's input (sbh·c), the logits
  the trainer holds (sbV·c), the cross-entropy's fp32 log-softmax (4·sbV) and the targets (8·sb).
  Checkpointing: "full" keeps only each block's input (sbh·r / t), and backward rebuilds one block at a
  time (one block's activations on top); "selective" with every = n does so for the blocks whose global
  layer id is a multiple of n (parallel/recompute.py); "selective" with save_ops keeps each block's
  input plus the outputs of those ops (mm: every projection; sdpa: attention output and logsumexp; silu).
- pipeline: at its peak a rank holds the activations of several micro-batches, in the order torch's
  schedules run them (m = pipeline micro-batches): gpipe all m; 1f1b min(m, pp - rank);
  interleaved_1f1b and zero_bubble (v stages per rank) warmup + 1 stage micro-batches, at most m·v, with
  warmup = (v-1)·q + 2·(pp-1-rank) (1x for zero_bubble) and q = m // max(1, m // pp) micro-batches per
  round. On rank 0 with enough micro-batches that is 1F1B's memory x (1 + (pp-1)/(pp·v)), Korthikanti
  et al.'s factor. Zero bubble's deferred weight gradients hold a little more (not counted). The logits
  are held for one micro-batch (all m with gpipe).

Approximations: FSDP buffers count norm weights in the compute dtype (the default rules keep them fp32:
a few KiB); rules that move norms or other modules to other dtypes are not followed; FP8
(torchao) keeps the fp32 weights and casts on the fly, so it only gets a note (the 8-bit inputs its
matmuls save would make activations somewhat smaller).
"""

import math
from dataclasses import dataclass

from bessemer.config import ActivationCheckpointConfig, ParallelConfig, PrecisionConfig, TrainConfig
from bessemer.model.registry import ModelArgs, count_params
from bessemer.parallel.dims import ParallelDims
from bessemer.parallel.layout import stage_layers

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
MASTER, GRAD, ADAM = 4, 4, 8  # bytes per parameter: fp32 weights, fp32 gradients, two fp32 AdamW states
TOKEN_ID = 8  # int64


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes on one rank's device (the worst rank's), and what offload puts in host memory."""

    params: int
    grads: int
    optimizer: int
    activations: int
    fsdp_buffers: int
    cast_weights: int
    host_bytes: int
    # What the numbers were computed for, for `format()`.
    pp_rank: int
    pp: int
    in_flight: int  # stage micro-batches whose activations the rank holds at its peak
    micro_batch: int
    seq_len: int
    dtype: str
    checkpointing: str
    offload: str
    fp8: bool

    @property
    def total(self) -> int:
        """Device bytes: everything but host_bytes."""
        return self.params + self.grads + self.optimizer + self.activations + self.fsdp_buffers + self.cast_weights

    def format(self) -> str:
        where = f", pipeline rank {self.pp_rank} of {self.pp}, the largest" if self.pp > 1 else ""
        batch = f"{self.in_flight} micro-batch(es) of {self.micro_batch} x {self.seq_len} tokens in flight"
        rows = [
            ("parameters", self.params, "fp32 master weights"),
            ("gradients", self.grads, "fp32"),
            ("optimizer", self.optimizer, "AdamW, 2 fp32 states"),
            ("activations", self.activations, f"{self.dtype}, {batch}, checkpointing {self.checkpointing}"),
            ("fsdp buffers", self.fsdp_buffers,
             f"unsharded {self.dtype} working copies" if self.fsdp_buffers else "none (parameters not sharded)"),
            ("cast weights", self.cast_weights,
             f"autocast's {self.dtype} copies kept for backward" if self.cast_weights else "none"),
            ("host", self.host_bytes, f"offload {self.offload}"),
        ]
        lines = [f"memory per rank (estimate{where}): {human_bytes(self.total)} on the device"]
        lines += [f"  {name:<13}{human_bytes(n):>11}  {what}" for name, n, what in rows]
        if self.fp8:
            lines.append("  fp8: weights are cast to FP8 on the fly; the fp32 weights above are unchanged and the "
                         "FP8-saved inputs (not counted) make activations smaller")
        return "\n".join(lines)


def human_bytes(n: float) -> str:
    """GiB from 1 GiB up, else MiB, two decimals."""
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.2f} MiB"


@dataclass(frozen=True)
class _Micro:
    """The shapes of one micro-batch on one rank, in elements, and the byte sizes they are stored in."""

    tokens: int  # s·b
    dim: int  # h
    heads: int  # a: attention width on this rank (n_heads·head_dim / tp)
    kv: int  # n_kv_heads·head_dim / tp, the wk/wv output width
    n_heads: int  # query heads on this rank (logsumexp is one fp32 value per head and token)
    ffn: int  # f
    vocab: int  # logits width on this rank
    seq_shards: int  # t: tp with sequence parallelism, else 1
    c: int  # compute dtype bytes
    resid: int  # residual-stream bytes: fp32 under autocast, else the compute dtype
    autocast: bool


def _norm(m: _Micro) -> int:
    """One RMSNorm, computing in fp32 as the default precision rules say: its fp32 input (a cast when the
    residual stream is 16-bit), x·rsqrt in fp32, rsqrt (one fp32 per token)."""
    return m.tokens * (8 * m.dim + 4) // m.seq_shards


def _block(m: _Micro) -> int:
    """Everything one block saves for backward without checkpointing."""
    projection_inputs = (5 if m.autocast else 2) * m.tokens * m.dim * m.c
    attention = 4 * m.tokens * m.heads * m.c + 4 * m.tokens * m.n_heads
    ffn = 4 * m.tokens * m.ffn * m.c
    return 2 * _norm(m) + projection_inputs + attention + ffn


def _block_input(m: _Micro) -> int:
    return m.tokens * m.dim * m.resid // m.seq_shards


def _saved_ops(m: _Micro, ops: list[str]) -> int:
    """Outputs that op-level selective checkpointing keeps, per block."""
    t, c = m.tokens, m.c
    kept = {
        # wq, wk, wv; wo and w2 (full-sequence partial sums before any reduce-scatter); w1, w3
        "mm": t * (m.heads + 2 * m.kv) * c + 2 * t * m.dim * c + 2 * t * m.ffn * c,
        "sdpa": t * m.heads * c + 4 * t * m.n_heads,
        "silu": t * m.ffn * c,
    }
    return sum(kept[op] for op in ops)


def _stage_activations(m: _Micro, layers: range, ac: ActivationCheckpointConfig) -> tuple[int, bool]:
    """One micro-batch through the blocks `layers` (global ids) under the checkpointing config `ac`; also
    whether any block is recomputed in backward."""
    full, inp = _block(m), _block_input(m)
    if ac.mode == "full":
        return len(layers) * inp, len(layers) > 0
    if ac.mode == "selective" and ac.save_ops:
        return len(layers) * (inp + _saved_ops(m, ac.save_ops)), len(layers) > 0
    if ac.mode == "selective":
        checkpointed = sum(1 for i in layers if i % ac.every == 0)
        return checkpointed * inp + (len(layers) - checkpointed) * full, checkpointed > 0
    return len(layers) * full, False


def _first_stage_extra(m: _Micro) -> int:
    return m.tokens * TOKEN_ID


def _last_stage_extra(m: _Micro) -> int:
    """Final norm, the head's input, the logits the trainer holds, the fp32 log-softmax, the targets."""
    return _norm(m) + m.tokens * m.dim * m.c + m.tokens * m.vocab * (m.c + 4) + m.tokens * TOKEN_ID


def stages_in_flight(schedule: str, pp: int, stages_per_rank: int, microbatches: int, rank: int) -> int:
    """Stage micro-batches whose activations pipeline rank `rank` holds at its peak, following the
    warmup of torch.distributed.pipelining's schedules (forward-only steps before the first backward)."""
    if pp == 1:
        return 1
    if schedule == "gpipe":
        return microbatches
    if schedule == "1f1b":
        return min(microbatches, pp - rank)
    per_round = microbatches // max(1, microbatches // pp)
    hop = 2 if schedule == "interleaved_1f1b" else 1
    warmup = (stages_per_rank - 1) * per_round + hop * (pp - 1 - rank)
    return min(warmup + 1, microbatches * stages_per_rank)


def estimate_memory(args: ModelArgs, dims: ParallelDims, parallel: ParallelConfig, train: TrainConfig,
                    precision: PrecisionConfig, pp_microbatches: int) -> MemoryEstimate:
    """The memory of the rank that needs the most (over pipeline ranks; the others are symmetric)."""
    ranks = [_rank_memory(args, dims, parallel, train, precision, pp_microbatches, r) for r in range(dims.pp)]
    return max(ranks, key=lambda e: e.total)


def _rank_memory(args: ModelArgs, dims: ParallelDims, parallel: ParallelConfig, train: TrainConfig,
                 precision: PrecisionConfig, pp_microbatches: int, rank: int) -> MemoryEstimate:
    tp, pp, shard = dims.tp, dims.pp, dims.dp_shard
    v = parallel.stages_per_rank if pp > 1 else 1
    num_stages = pp * v
    stages = [rank + k * pp for k in range(v)]  # loop placement, as parallel/pipeline.stage_ids
    ranges = stage_layers(args.n_layers, num_stages, parallel.pp_layers)
    layers = [len(ranges[i]) for i in stages]
    first, last = 0 in stages, num_stages - 1 in stages

    # Parameters: block matrices, embedding and head split over tp; norms replicated.
    counts = count_params(args)
    norms = 2 * args.dim
    matrices = counts["layer"] - norms
    head = args.vocab_size * args.dim  # the head's matrix, also when it is the tied embedding
    block_local = matrices // tp + norms
    root_local = (counts["embedding"] // tp if first else 0) + (args.dim + counts["output"] // tp if last else 0)
    local = sum(layers) * block_local + root_local
    sharded = math.ceil(local / shard)
    params, grads, optimizer, host = MASTER * sharded, GRAD * sharded, ADAM * sharded, 0

    c = DTYPE_BYTES[precision.dtype]
    fsdp = shard > 1 or dims.dp_replicate > 1  # parallel/build.py wraps the model in FSDP2 then
    autocast = c < 4 and not fsdp

    offload = precision.offload
    if offload.mode == "full" and fsdp:
        host, params, grads, optimizer = params + grads + optimizer, 0, 0, 0
    elif offload.mode != "none":  # a host AdamW for the first `fraction` (all, for full) of the parameters
        moved = sharded if offload.mode == "full" else math.ceil(sharded * offload.fraction)
        host = moved * (MASTER + GRAD + ADAM)
        optimizer -= moved * ADAM

    fsdp_buffers = 0
    if shard > 1 or (fsdp and c < 4):
        if pp > 1:  # blocks are not resharded after forward: the stages stay whole
            fsdp_buffers = local * c
        else:  # the block in use + the prefetched one, and the root, resharded only after backward
            fsdp_buffers = (min(2, args.n_layers) * block_local + root_local) * c
    cast_weights = (sum(layers) * matrices // tp + (head // tp if last else 0)) * c if autocast else 0

    # Activations.
    b = train.micro_batch // pp_microbatches if pp > 1 else train.micro_batch
    seq_shards = tp if parallel.sequence_parallel and tp > 1 else 1
    vocab = args.vocab_size // tp if parallel.loss_parallel and tp > 1 else args.vocab_size
    m = _Micro(tokens=train.seq_len * b, dim=args.dim, heads=args.n_heads * args.head_dim // tp,
               kv=args.n_kv_heads * args.head_dim // tp, n_heads=args.n_heads // tp, ffn=args.ffn_hidden // tp,
               vocab=vocab, seq_shards=seq_shards, c=c, resid=4 if autocast else c, autocast=autocast)
    ac = precision.activation_checkpoint
    per_stage = [_stage_activations(m, ranges[i], ac) for i in stages]
    in_flight = stages_in_flight(parallel.pp_schedule, pp, v, pp_microbatches, rank)
    activations = in_flight * sum(a for a, _ in per_stage) // v  # stage micro-batches of the rank's mean stage
    if any(recomputed for _, recomputed in per_stage):
        activations += _block(m) - _block_input(m)  # backward rebuilds one block at a time on top
    if first:
        activations += max(1, in_flight // v) * _first_stage_extra(m)
    if last:
        activations += (pp_microbatches if pp > 1 and parallel.pp_schedule == "gpipe" else 1) * _last_stage_extra(m)

    return MemoryEstimate(
        params=params, grads=grads, optimizer=optimizer, activations=activations, fsdp_buffers=fsdp_buffers,
        cast_weights=cast_weights, host_bytes=host, pp_rank=rank, pp=pp, in_flight=in_flight, micro_batch=b,
        seq_len=train.seq_len, dtype=precision.dtype, checkpointing=_describe_ac(ac), offload=offload.mode,
        fp8=precision.fp8.enabled)


def _describe_ac(ac: ActivationCheckpointConfig) -> str:
    if ac.mode == "selective":
        return f"selective ({'ops ' + '+'.join(ac.save_ops) if ac.save_ops else f'every {ac.every}'})"
    return ac.mode
