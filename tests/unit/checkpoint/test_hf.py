"""Hugging Face export/import, checked against transformers' own LlamaForCausalLM on the same token ids."""

import dataclasses
import json
import logging

import pytest
import torch

from bessemer.checkpoint.hf import check_compatible, export_hf, load_hf
from bessemer.errors import BessemerError
from bessemer.model.llama import build_model
from bessemer.model.registry import get_model_args

transformers = pytest.importorskip("transformers")

DEBUG = get_model_args("debug")
SEQ = 64
TOKENIZER_DIR = "data/debug"  # tests run from the repository root (conftest.py)


@pytest.fixture(autouse=True, scope="module")
def _quiet_transformers():
    """Loading a local, randomly initialised model makes transformers chatty (progress bars, notes about
    generation defaults); none of it matters here."""
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)
    yield
    transformers.logging.set_verbosity(verbosity)
    transformers.logging.enable_progress_bar()


def make_model(args, seed: int = 0):
    torch.manual_seed(seed)
    model = build_model(args, SEQ)
    with torch.no_grad():
        for name, p in model.named_parameters():
            # init_weights() sets every norm weight to 1, which would hide a swapped or missing norm mapping.
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
            # At init (std 0.02) attention is nearly uniform, so a RoPE mistake (no permutation, scaling
            # ignored) moves logits by only ~1e-3; sharper attention makes it ~0.2, far above the tolerance.
            if name.endswith(("wq.weight", "wk.weight")):
                p.mul_(10.0)
    return model.eval()


def max_logit_diff(model, out_dir) -> float:
    hf = transformers.LlamaForCausalLM.from_pretrained(out_dir, dtype=torch.float32, local_files_only=True).eval()
    tokens = torch.randint(0, model.args.vocab_size, (2, SEQ), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, theirs = model(tokens), hf(tokens).logits
    assert ours.shape == theirs.shape
    return (ours - theirs).abs().max().item()


@pytest.mark.parametrize("variant", ["debug", "tied", "rope_scaling"])
def test_transformers_logits_match(tmp_path, variant):
    args = {"debug": DEBUG,
            "tied": dataclasses.replace(DEBUG, tie_embeddings=True),
            # Original context 32 < SEQ, so positions past it use the rescaled long wavelengths.
            "rope_scaling": dataclasses.replace(DEBUG, rope_scaling=(8.0, 1.0, 4.0, 32))}[variant]
    model = make_model(args)
    out = export_hf(model.state_dict(), args, tmp_path / "hf", SEQ)
    diff = max_logit_diff(model, out)
    assert diff < 1e-4, f"{variant}: max |logit difference| {diff:.3g}"

    config = json.loads((out / "config.json").read_text())
    assert config["tie_word_embeddings"] is args.tie_embeddings
    if args.rope_scaling:
        assert config["rope_scaling"] == {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0, "original_max_position_embeddings": 32}


@pytest.mark.parametrize("tie", [False, True])
def test_round_trip_is_bitwise(tmp_path, tie):
    args = dataclasses.replace(DEBUG, tie_embeddings=tie, rope_scaling=(8.0, 1.0, 4.0, 32))
    state = make_model(args).state_dict()
    out = export_hf(state, args, tmp_path / "hf", SEQ)
    loaded, loaded_args = load_hf(out, args)
    assert loaded_args == args
    assert loaded.keys() == state.keys()
    for name, t in state.items():
        assert loaded[name].dtype == t.dtype and torch.equal(loaded[name], t), name
    # The loaded state fits our model as it is, ties included.
    fresh = build_model(args, SEQ)
    fresh.load_state_dict(loaded)
    assert (fresh.output.weight is fresh.tok_embeddings.weight) == tie


def test_tokenizer_loads_with_auto_tokenizer(tmp_path):
    from tokenizers import Tokenizer

    out = export_hf(make_model(DEBUG).state_dict(), DEBUG, tmp_path / "hf", SEQ, tokenizer_dir=TOKENIZER_DIR)
    hf_tok = transformers.AutoTokenizer.from_pretrained(out, local_files_only=True)
    ours = Tokenizer.from_file(f"{TOKENIZER_DIR}/tokenizer.json")
    text = "The quick brown fox, def f(x): return x ** 2<|eos|>日本語のテキスト 123"
    assert hf_tok(text)["input_ids"] == ours.encode(text).ids
    assert hf_tok.decode(ours.encode("hello world").ids) == "hello world"

    config = json.loads((out / "config.json").read_text())
    ids = tuple(ours.token_to_id(f"<|{role}|>") for role in ("bos", "eos", "pad"))
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == ids
    assert (hf_tok.bos_token_id, hf_tok.eos_token_id, hf_tok.pad_token_id) == ids


def test_mismatched_config_is_a_clear_error(tmp_path):
    out = export_hf(make_model(DEBUG).state_dict(), DEBUG, tmp_path / "hf", SEQ)
    config_path = out / "config.json"
    config = json.loads(config_path.read_text())
    config.update(hidden_size=256, head_dim=64)
    config_path.write_text(json.dumps(config))

    with pytest.raises(BessemerError, match=r"hidden_size \(dim\) is 256 there, 128 here"):
        check_compatible(out, DEBUG)
    with pytest.raises(BessemerError, match=r"hidden_size \(dim\) is 256 there, 128 here"):
        load_hf(out, DEBUG)
    # Without dims to compare against, the weights themselves contradict the config.
    with pytest.raises(BessemerError, match=r"model.embed_tokens.weight has shape \(1024, 128\) but config.json "
                                            r"implies \(1024, 256\)"):
        load_hf(out)


def test_export_refuses_to_clobber_and_rejects_bad_input(tmp_path):
    state = make_model(DEBUG).state_dict()
    out = export_hf(state, DEBUG, tmp_path / "hf", SEQ)
    with pytest.raises(BessemerError, match="already exists"):
        export_hf(state, DEBUG, out, SEQ)
    export_hf(state, DEBUG, out, SEQ, dtype=torch.bfloat16, overwrite=True)
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]  # no temporary directories left behind

    with pytest.raises(BessemerError, match="lacks layers.3.attention.wq.weight"):
        export_hf({k: v for k, v in state.items() if k != "layers.3.attention.wq.weight"}, DEBUG,
                  tmp_path / "other", SEQ)
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "model_type": "mistral"}))
    with pytest.raises(BessemerError, match="only model_type 'llama'"):
        load_hf(out)


def test_a_shard_reads_only_its_region_and_gets_the_full_loads_values(tmp_path):
    """What a rank of a sharded run reads (checkpoint.initial_load_hf): rows and columns of one parameter, wq's
    rows crossing heads (they are permuted within each head), equal to that part of the whole load."""
    from bessemer.checkpoint.hf import HFWeights

    out = export_hf(make_model(DEBUG).state_dict(), DEBUG, tmp_path / "hf", SEQ)
    full, _ = load_hf(out, DEBUG)
    weights = HFWeights(out, DEBUG)
    for name in ("layers.1.attention.wq.weight", "layers.1.attention.wk.weight", "tok_embeddings.weight"):
        part = weights.read(name, slice(5, 45), (slice(16, 80),))
        assert torch.equal(part, full[name][5:45, 16:80]), name
