import dataclasses

import pytest
import torch

from bessemer.model.llama import apply_rope, build_model, rope_cos_sin
from bessemer.model.registry import (
    MODEL_SIZES,
    count_params,
    flops_per_token,
    get_model_args,
)

DEBUG = MODEL_SIZES["debug"]


@pytest.mark.parametrize("name", ["llama3-1b", "llama3-3b", "llama3-8b", "llama3-70b", "llama3-405b"])
def test_registry_matches_published_counts_on_meta(name):
    args = MODEL_SIZES[name]
    model = build_model(args, max_seq_len=8, device="meta")
    n = sum(p.numel() for p in model.parameters())  # tied weights counted once
    assert abs(n - args.published_params) / args.published_params < 0.01, (name, n, args.published_params)
    assert n == count_params(args)["total"]
    assert all(p.device.type == "meta" for p in model.parameters())


@pytest.mark.parametrize("name, lo, hi", [("debug", 0.8e6, 1.3e6), ("tiny", 8e6, 12e6)])
def test_small_sizes(name, lo, hi):
    assert lo < count_params(MODEL_SIZES[name])["total"] < hi


def test_forward_shapes_and_gqa():
    torch.manual_seed(0)
    model = build_model(DEBUG, max_seq_len=32)
    assert DEBUG.n_kv_heads < DEBUG.n_heads
    assert model.layers["0"].attention.wk.weight.shape == (DEBUG.n_kv_heads * DEBUG.head_dim, DEBUG.dim)
    logits = model(torch.randint(0, DEBUG.vocab_size, (3, 17)))
    assert logits.shape == (3, 17, DEBUG.vocab_size)
    assert torch.isfinite(logits).all()


def test_causality_future_tokens_never_change_earlier_logits():
    torch.manual_seed(0)
    model = build_model(DEBUG, max_seq_len=32).eval()
    x = torch.randint(0, DEBUG.vocab_size, (2, 24))
    y = x.clone()
    y[:, 12:] = torch.randint(0, DEBUG.vocab_size, (2, 12))
    with torch.no_grad():
        a, b = model(x), model(y)
    assert torch.equal(a[:, :12], b[:, :12])
    assert not torch.allclose(a[:, 12:], b[:, 12:])


def test_tied_embeddings_share_one_tensor_after_materialising():
    args = dataclasses.replace(DEBUG, tie_embeddings=True)
    model = build_model(args, max_seq_len=8)
    assert model.output.weight is model.tok_embeddings.weight
    assert sum(p.numel() for p in model.parameters()) == count_params(args)["total"]


def test_init_is_seeded_and_meta_build_matches_direct_init():
    torch.manual_seed(1)
    a = build_model(DEBUG, max_seq_len=8)
    torch.manual_seed(1)
    b = build_model(DEBUG, max_seq_len=8)
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)
    # Checkpoint keys are stable and hold parameters only (RoPE tables are derived, not saved).
    assert "layers.0.attention.wq.weight" in a.state_dict() and "rope_cos" not in a.state_dict()


def test_rope_is_a_rotation_and_relative():
    cos, sin = rope_cos_sin(DEBUG, 16)
    q = torch.randn(1, 16, 1, DEBUG.head_dim)
    k = torch.randn(1, 16, 1, DEBUG.head_dim)
    rq, rk = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    torch.testing.assert_close(rq.norm(dim=-1), q.norm(dim=-1))  # norms preserved
    # <R(m) q, R(n) k> depends on m - n only: shift both positions by 3.
    q0, k0 = q[:, :1].expand(1, 16, 1, -1), k[:, :1].expand(1, 16, 1, -1)
    rq, rk = apply_rope(q0, cos, sin), apply_rope(k0, cos, sin)
    torch.testing.assert_close((rq[:, 5] * rk[:, 2]).sum(), (rq[:, 8] * rk[:, 5]).sum())


def test_llama31_rope_scaling_slows_low_frequencies_only():
    from bessemer.model.llama import rope_frequencies

    args = MODEL_SIZES["llama3-8b"]
    scaled, plain = rope_frequencies(args), rope_frequencies(dataclasses.replace(args, rope_scaling=None))
    assert torch.equal(scaled[0], plain[0])  # the highest frequency is kept
    torch.testing.assert_close(scaled[-1], plain[-1] / 8)  # the lowest is divided by the factor


def test_flops_per_token_formula():
    args = MODEL_SIZES["llama3-8b"]
    p = count_params(args)
    n = p["total"] - p["embedding"]
    assert flops_per_token(args, 8192) == 6 * n + 12 * 32 * 4096 * 8192
    tied = MODEL_SIZES["llama3-1b"]  # tied: the head still multiplies, so it still counts
    pt = count_params(tied)
    assert flops_per_token(tied, 1) == 6 * (pt["total"] - pt["embedding"] + 128256 * 2048) + 12 * 16 * 2048


def test_vocab_override_and_unknown_size():
    assert get_model_args("debug", 4096).vocab_size == 4096
    from bessemer.errors import ConfigError

    with pytest.raises(ConfigError, match="choose one of"):
        get_model_args("nope")


def test_init_depends_on_seed_and_name_only_and_blocks_do_not_change_it(monkeypatch):
    from bessemer.model import llama

    a, b = build_model(DEBUG, 8, seed=3), build_model(DEBUG, 8, seed=3)
    c = build_model(DEBUG, 8, seed=4)
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb), name
        assert name.endswith("norm.weight") or not torch.equal(pa, pc), name
    # Layers draw their own values: the same module in two layers starts apart.
    assert not torch.equal(a.layers["0"].attention.wq.weight, a.layers["1"].attention.wq.weight)
    # Rows are drawn in blocks of whole rows (the block size is part of the definition); a shard covering some
    # rows and columns draws exactly that part of the full tensor.
    monkeypatch.setattr(llama, "INIT_BLOCK_NUMEL", 3 * DEBUG.dim)  # blocks of 3 rows
    full = build_model(DEBUG, 8, seed=3).tok_embeddings.weight.detach()
    shard = torch.empty(5, 16)  # rows 7..11 (across block boundaries), columns 32..47
    monkeypatch.setattr(llama, "local_part", lambda p: (shard, (7, 32)))
    llama.init_param_(torch.empty(full.shape, device="meta"), a.init_rule("tok_embeddings.weight"), 3,
                      "tok_embeddings.weight")
    assert torch.equal(shard, full[7:12, 32:48])


def test_a_pipeline_stage_with_tied_embeddings_starts_its_head_as_the_embedding():
    from bessemer.parallel.pipeline import build_stage_module

    args = dataclasses.replace(DEBUG, tie_embeddings=True)
    whole = build_model(args, 8, seed=5)
    last = build_stage_module(args, 8, range(2, 4), 2, 1)
    last.to_empty(device="cpu")
    last.init_weights(5)
    assert last.tok_embeddings is None
    assert torch.equal(last.output.weight, whole.tok_embeddings.weight)
    assert torch.equal(last.layers["3"].feed_forward.w2.weight, whole.layers["3"].feed_forward.w2.weight)


def test_rope_equals_the_rotation_of_each_pair_to_the_bit():
    from bessemer.model.llama import rope_frequencies

    T = 16
    cos, sin = rope_cos_sin(DEBUG, T)
    x = torch.randn(2, T, 3, DEBUG.head_dim, dtype=torch.bfloat16)
    angles = torch.outer(torch.arange(T, dtype=torch.float32), rope_frequencies(DEBUG))[:, None, :]  # (T, 1, hd/2)
    c, s = angles.cos(), angles.sin()
    x0, x1 = x.float()[..., 0::2], x.float()[..., 1::2]  # pair i = (x[2i], x[2i+1]), as hf.py's permute assumes
    expected = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2).to(torch.bfloat16)
    out = apply_rope(x, cos, sin)
    assert out.dtype == torch.bfloat16 and torch.equal(out, expected)


def test_rmsnorm_upcasts_once_and_keeps_the_values():
    from bessemer.model.llama import RMSNorm

    norm = RMSNorm(DEBUG.dim, 1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(DEBUG.dim) + 0.5)
    x = torch.randn(2, 5, DEBUG.dim, dtype=torch.bfloat16)
    ref = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).type_as(x) * norm.weight
    assert torch.equal(norm(x), ref)


def test_attention_shares_kv_heads_without_copying_and_matches_repeated_heads(monkeypatch):
    import torch.nn.functional as F

    torch.manual_seed(0)
    model = build_model(DEBUG, max_seq_len=16, seed=0)
    attn, T = model.layers["0"].attention, 12
    x = torch.randn(2, T, DEBUG.dim)
    calls = []
    real_sdpa = F.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        calls.append((q.shape[1], k.shape[1], kw.get("enable_gqa")))
        return real_sdpa(q, k, v, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    out = attn(x, model.rope_cos, model.rope_sin)
    monkeypatch.undo()
    assert calls == [(DEBUG.n_heads, DEBUG.n_kv_heads, True)]  # K and V reach the kernel with their own heads
    # The reference: K and V copied per query head (what the kernel computes without the copies).
    q = apply_rope(attn.wq(x).view(2, T, -1, DEBUG.head_dim), model.rope_cos, model.rope_sin)
    k = apply_rope(attn.wk(x).view(2, T, -1, DEBUG.head_dim), model.rope_cos, model.rope_sin)
    v = attn.wv(x).view(2, T, -1, DEBUG.head_dim)
    rep = DEBUG.n_heads // DEBUG.n_kv_heads
    k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
    y = real_sdpa(*(t.transpose(1, 2) for t in (q, k, v)), is_causal=True).transpose(1, 2).reshape(2, T, -1)
    torch.testing.assert_close(out, attn.wo(y), rtol=1e-5, atol=1e-6)
