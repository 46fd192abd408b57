"""Hugging Face interop: our Llama weights to and from transformers' `LlamaForCausalLM` layout.

An export directory holds model.safetensors, config.json and, when a tokenizer is given, tokenizer.json with
tokenizer_config.json, special_tokens_map.json and generation_config.json — what `from_pretrained` reads.

The one non-obvious step is RoPE. Our `apply_rope` rotates adjacent pairs (x[2i], x[2i+1]) of each head, as
Meta's original code does; transformers rotates the halves (x[i], x[i + head_dim/2]). Both turn pair i by the
same angle, so permuting the rows of wq and wk inside each head — pair i's two rows moved to positions i and
i + head_dim/2 — gives the same attention scores: q·k is unchanged when q and k are permuted alike, and v, wo
are untouched. This is the `permute` of transformers' convert_llama_weights_to_hf.py; import undoes it.
"""

import json
import math
import os
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import torch
from torch.distributed.tensor import DTensor

from bessemer.dtensor import local_part
from bessemer.errors import BessemerError
from bessemer.model.registry import ModelArgs

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"  # sharded checkpoints (large hub models); read only
ARCHITECTURE = "LlamaForCausalLM"
_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}

# Our per-layer parameter names -> transformers' (under model.layers.{i}.).
_LAYER_NAMES = {
    "attention.wq.weight": "self_attn.q_proj.weight",
    "attention.wk.weight": "self_attn.k_proj.weight",
    "attention.wv.weight": "self_attn.v_proj.weight",
    "attention.wo.weight": "self_attn.o_proj.weight",
    "feed_forward.w1.weight": "mlp.gate_proj.weight",
    "feed_forward.w2.weight": "mlp.down_proj.weight",
    "feed_forward.w3.weight": "mlp.up_proj.weight",
    "attention_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
}
_TOP_NAMES = {
    "tok_embeddings.weight": "model.embed_tokens.weight",
    "norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
# ModelArgs field -> config.json key, for checks that name both.
_FIELDS = {
    "dim": "hidden_size", "n_layers": "num_hidden_layers", "n_heads": "num_attention_heads",
    "n_kv_heads": "num_key_value_heads", "ffn_hidden": "intermediate_size", "vocab_size": "vocab_size",
    "norm_eps": "rms_norm_eps", "rope_theta": "rope_theta", "rope_scaling": "rope_scaling",
    "tie_embeddings": "tie_word_embeddings",
}


def _safetensors():
    try:
        import safetensors.torch
    except ImportError:
        raise ImportError("Hugging Face export/import needs safetensors: pip install safetensors") from None
    return safetensors.torch


def name_map(args: ModelArgs) -> dict[str, str]:
    """Our parameter name -> transformers' name, for every parameter of a model with these dims."""
    names = dict(_TOP_NAMES)
    for i in range(args.n_layers):
        names.update({f"layers.{i}.{ours}": f"model.layers.{i}.{theirs}" for ours, theirs in _LAYER_NAMES.items()})
    return names


def _to_half_rotation(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """wq/wk rows from adjacent-pair order (ours) to rotate-half order (transformers'), head by head."""
    out_dim, in_dim = w.shape
    hd = out_dim // n_heads
    # Row h*hd + 2i + a becomes row h*hd + a*hd/2 + i.
    return w.view(n_heads, hd // 2, 2, in_dim).transpose(1, 2).reshape(out_dim, in_dim)


def _from_half_rotation(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    out_dim, in_dim = w.shape
    hd = out_dim // n_heads
    return w.view(n_heads, 2, hd // 2, in_dim).transpose(1, 2).reshape(out_dim, in_dim)


# ---------------------------------------------------------------------------------------------------- config


def hf_config(args: ModelArgs, max_seq_len: int, dtype: torch.dtype = torch.float32,
              special_ids: dict[str, int] | None = None) -> dict:
    """config.json for `LlamaForCausalLM`. special_ids: bos/eos/pad token ids, when a tokenizer is known.

    RoPE is written the way Meta's Llama 3.1 configs write it (rope_theta + rope_scaling with rope_type
    "llama3"), which every transformers version reads; newer ones fold it into rope_parameters on load.
    """
    rope_scaling = None
    if args.rope_scaling is not None:
        factor, low, high, old_context = args.rope_scaling
        rope_scaling = {"rope_type": "llama3", "factor": float(factor), "low_freq_factor": float(low),
                        "high_freq_factor": float(high), "original_max_position_embeddings": int(old_context)}
    ids = special_ids or {}
    return {
        "architectures": [ARCHITECTURE],
        "model_type": "llama",
        "hidden_size": args.dim,
        "intermediate_size": args.ffn_hidden,
        "num_hidden_layers": args.n_layers,
        "num_attention_heads": args.n_heads,
        "num_key_value_heads": args.n_kv_heads,
        "head_dim": args.head_dim,
        "vocab_size": args.vocab_size,
        "hidden_act": "silu",
        "rms_norm_eps": args.norm_eps,
        "rope_theta": args.rope_theta,
        "rope_scaling": rope_scaling,
        "max_position_embeddings": max_seq_len,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "tie_word_embeddings": args.tie_embeddings,
        "torch_dtype": _DTYPES[dtype],
        "bos_token_id": ids.get("bos"),
        "eos_token_id": ids.get("eos"),
        "pad_token_id": ids.get("pad"),
        "use_cache": True,
    }


def args_from_config(config: dict, where: Path | str = CONFIG_FILE) -> ModelArgs:
    """Our ModelArgs from a Llama config.json; anything our model cannot represent is a BessemerError."""
    archs = config.get("architectures") or [ARCHITECTURE]
    if config.get("model_type") != "llama" or ARCHITECTURE not in archs:
        raise BessemerError(f"{where}: model_type {config.get('model_type')!r}, architectures {archs} — only "
                            f"model_type 'llama' with {ARCHITECTURE} can be imported")
    try:
        dim, n_heads = int(config["hidden_size"]), int(config["num_attention_heads"])
        n_kv_heads = int(config.get("num_key_value_heads") or n_heads)
        fields = {"dim": dim, "n_layers": int(config["num_hidden_layers"]), "n_heads": n_heads,
                  "n_kv_heads": n_kv_heads, "ffn_hidden": int(config["intermediate_size"]),
                  "vocab_size": int(config["vocab_size"])}
    except KeyError as e:
        raise BessemerError(f"{where} lacks {e.args[0]!r}") from None
    # Features of other Llama variants that our module does not have.
    unsupported = {"hidden_act": (config.get("hidden_act", "silu"), "silu"),
                   "attention_bias": (bool(config.get("attention_bias", False)), False),
                   "mlp_bias": (bool(config.get("mlp_bias", False)), False)}
    for key, (got, want) in unsupported.items():
        if got != want:
            raise BessemerError(f"{where}: {key} is {got!r}; our Llama supports only {want!r}")
    if dim % n_heads or n_heads % n_kv_heads or (dim // n_heads) % 2:
        raise BessemerError(f"{where}: hidden_size {dim}, num_attention_heads {n_heads}, num_key_value_heads "
                            f"{n_kv_heads} — heads must divide hidden_size, kv heads must divide heads, and "
                            f"head_dim must be even")
    head_dim = config.get("head_dim")
    if head_dim is not None and head_dim != dim // n_heads:
        raise BessemerError(f"{where}: head_dim {head_dim} differs from hidden_size / num_attention_heads "
                            f"({dim // n_heads}); our Llama derives head_dim from them")
    # Older configs: rope_theta + rope_scaling; transformers 5 writes both inside rope_parameters.
    rope = config.get("rope_scaling") or config.get("rope_parameters") or {}
    rope_theta = config.get("rope_theta", rope.get("rope_theta", 10_000.0))  # transformers' default base
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type == "default":
        rope_scaling = None
    elif rope_type == "llama3":
        rope_scaling = (float(rope["factor"]), float(rope["low_freq_factor"]), float(rope["high_freq_factor"]),
                        int(rope["original_max_position_embeddings"]))
    else:
        raise BessemerError(f"{where}: rope_type {rope_type!r} is not supported; choose 'default' or 'llama3'")
    return ModelArgs(**fields, norm_eps=float(config.get("rms_norm_eps", 1e-6)), rope_theta=float(rope_theta),
                     rope_scaling=rope_scaling, tie_embeddings=bool(config.get("tie_word_embeddings", False)))


def read_config(hf_dir: Path) -> dict:
    path = Path(hf_dir) / CONFIG_FILE
    if not path.is_file():
        raise BessemerError(f"{path} not found — is {hf_dir} a Hugging Face model directory?")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise BessemerError(f"{path} is not valid JSON: {e}") from None


def check_compatible(hf_dir: Path, args: ModelArgs) -> ModelArgs:
    """Raise a BessemerError naming every field where the directory's config differs from `args`; returns
    the directory's dims. Reads config.json only, so it is cheap to call before loading weights."""
    hf_args = args_from_config(read_config(hf_dir), Path(hf_dir) / CONFIG_FILE)
    diffs = [f"{key} ({field}) is {getattr(hf_args, field)!r} there, {getattr(args, field)!r} here"
             for field, key in _FIELDS.items() if getattr(hf_args, field) != getattr(args, field)]
    if diffs:
        raise BessemerError(f"{Path(hf_dir) / CONFIG_FILE} does not match the model: {'; '.join(diffs)}")
    return hf_args


# ---------------------------------------------------------------------------------------------------- export


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n")
    _fsync(path)


def expected_shapes(args: ModelArgs) -> dict[str, tuple[int, ...]]:
    """Our parameter name -> its full shape, for a model with these dims (the tied head included)."""
    kv_dim = args.n_kv_heads * args.head_dim
    layer = {"attention.wq.weight": (args.dim, args.dim), "attention.wk.weight": (kv_dim, args.dim),
             "attention.wv.weight": (kv_dim, args.dim), "attention.wo.weight": (args.dim, args.dim),
             "feed_forward.w1.weight": (args.ffn_hidden, args.dim),
             "feed_forward.w2.weight": (args.dim, args.ffn_hidden),
             "feed_forward.w3.weight": (args.ffn_hidden, args.dim),
             "attention_norm.weight": (args.dim,), "ffn_norm.weight": (args.dim,)}
    shapes = {"tok_embeddings.weight": (args.vocab_size, args.dim), "norm.weight": (args.dim,),
              "output.weight": (args.vocab_size, args.dim)}
    return {ours: shapes.get(ours) or layer[ours.split(".", 2)[2]] for ours in name_map(args)}


def _rope_heads(ours: str, args: ModelArgs) -> int:
    """How many heads wq / wk hold (their rows are permuted per head); 0 for every other parameter."""
    if ours.endswith("attention.wq.weight"):
        return args.n_heads
    return args.n_kv_heads if ours.endswith("attention.wk.weight") else 0


_ST_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}


def write_safetensors(path: Path, shapes: dict[str, tuple[int, ...]], dtype: torch.dtype,
                      tensor: Callable[[str], torch.Tensor]) -> None:
    """Write a safetensors file one tensor at a time: the header from the known shapes, then each tensor's
    bytes as `tensor(name)` returns it (cast to `dtype`), so memory holds one tensor, never the model."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0  # transformers refuses files without the format
    size = torch.empty((), dtype=dtype).element_size()
    for name, shape in shapes.items():
        n = math.prod(shape) * size
        header[name] = {"dtype": _ST_DTYPES[dtype], "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        for name, shape in shapes.items():
            t = tensor(name).detach().to("cpu", dtype).contiguous()
            if tuple(t.shape) != tuple(shape):
                raise BessemerError(f"{name} has shape {tuple(t.shape)}, expected {tuple(shape)}")
            f.write(t.view(torch.uint8).numpy().data)
            del t
        f.flush()
        os.fsync(f.fileno())


def export_tensors(args: ModelArgs, dtype: torch.dtype,
                   read: Callable[[str], torch.Tensor]) -> tuple[dict[str, tuple[int, ...]], Callable]:
    """transformers' names with their shapes, and a function giving one of them from `read` (our name -> a
    full tensor), converted: the wq/wk row permutation and the dtype."""
    names = name_map(args)
    shapes = expected_shapes(args)
    if args.tie_embeddings:
        # One tensor in the file: transformers ties lm_head to embed_tokens itself.
        names.pop("output.weight")
    ours_of = {theirs: ours for ours, theirs in names.items()}

    def tensor(theirs: str) -> torch.Tensor:
        ours = ours_of[theirs]
        t = read(ours)
        if isinstance(t, DTensor):
            raise BessemerError(f"{ours} is a DTensor shard; gather a full state dict first (e.g. "
                                f"get_model_state_dict with full_state_dict=True)")
        t = t.detach().to("cpu", dtype)
        heads = _rope_heads(ours, args)
        return _to_half_rotation(t, heads) if heads else t

    return {theirs: shapes[ours] for ours, theirs in names.items()}, tensor


def _tokenizer_files(tokenizer_dir: Path, dest: Path, max_seq_len: int, vocab_size: int) -> dict[str, int]:
    """Copy tokenizer.json and write the files that let AutoTokenizer load it; returns the special ids."""
    from bessemer.tokenizer.common import BOS, EOS, PAD, TOKENIZER_FILE

    src = Path(tokenizer_dir) / TOKENIZER_FILE
    if not src.is_file():
        raise BessemerError(f"{src} not found; tokenizer_dir must hold the {TOKENIZER_FILE} our BPE training writes")
    vocab = json.loads(src.read_text())
    ids = {t["content"]: t["id"] for t in vocab.get("added_tokens", [])}
    ids.update({tok: i for tok, i in vocab.get("model", {}).get("vocab", {}).items() if tok in (BOS, EOS, PAD)})
    n_tokens = max([*vocab.get("model", {}).get("vocab", {}).values(), *ids.values(), -1]) + 1
    if n_tokens > vocab_size:
        raise BessemerError(f"{src} has {n_tokens} tokens but the model's vocabulary is {vocab_size}")
    shutil.copyfile(src, dest / TOKENIZER_FILE)
    _fsync(dest / TOKENIZER_FILE)
    special = {role: tok for role, tok in (("bos_token", BOS), ("eos_token", EOS), ("pad_token", PAD)) if tok in ids}
    # Our tokenizer adds no BOS/EOS when encoding (documents are separated by EOS in the shards), so the
    # HF tokenizer must not add any either, or its ids would differ from the ones the model trained on.
    _write_json(dest / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast", **special, "model_max_length": max_seq_len,
        "add_bos_token": False, "add_eos_token": False, "clean_up_tokenization_spaces": False})
    _write_json(dest / "special_tokens_map.json", special)
    return {role.removesuffix("_token"): ids[tok] for role, tok in special.items()}


def export_hf(state: dict[str, torch.Tensor], args: ModelArgs, out_dir: Path, max_seq_len: int,
              tokenizer_dir: Path | None = None, dtype: torch.dtype = torch.float32, *,
              overwrite: bool = False) -> Path:
    """Write `state` (our parameter names, full tensors) as a transformers Llama directory; returns out_dir.

    max_seq_len becomes max_position_embeddings. With tokenizer_dir (holding our tokenizer.json) the
    tokenizer is exported too and bos/eos/pad ids go into the configs. Files are written into a temporary
    sibling directory that is renamed into place, so a crash never leaves a half-written export;
    an existing non-empty out_dir is replaced only with overwrite=True.
    """
    names = name_map(args)
    if dtype not in _DTYPES:
        raise BessemerError(f"cannot export as {dtype}; choose one of {', '.join(map(str, _DTYPES))}")
    if args.tie_embeddings:
        out = state.get("output.weight")
        if out is not None and not torch.equal(out, state.get("tok_embeddings.weight", out)):
            raise BessemerError("tie_embeddings is set but output.weight differs from tok_embeddings.weight")
        names.pop("output.weight")
    missing = sorted(set(names) - set(state))
    if missing:
        raise BessemerError(f"the state dict lacks {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''} "
                            f"— export needs the full model (all layers, unsharded)")
    return write_hf_dir(args, out_dir, max_seq_len, state.__getitem__, tokenizer_dir, dtype, overwrite=overwrite)


def write_hf_dir(args: ModelArgs, out_dir: Path, max_seq_len: int, read: Callable[[str], torch.Tensor],
                 tokenizer_dir: Path | None = None, dtype: torch.dtype = torch.float32, *,
                 overwrite: bool = False) -> Path:
    """export_hf with the weights fetched one at a time, `read(our name)` returning a full tensor: memory holds
    one tensor, never the model (`bessemer ckpt export-hf` reads them from the checkpoint this way)."""
    if dtype not in _DTYPES:
        raise BessemerError(f"cannot export as {dtype}; choose one of {', '.join(map(str, _DTYPES))}")
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise BessemerError(f"{out_dir} is a file; export_hf writes a directory")
    if out_dir.exists() and any(out_dir.iterdir()) and not overwrite:
        raise BessemerError(f"{out_dir} already exists and is not empty; remove it, pass overwrite=True or "
                            f"choose another directory")
    shapes, tensor = export_tensors(args, dtype, read)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_dir.with_name(f".{out_dir.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)  # left over from a crashed export
    tmp.mkdir()
    try:
        special_ids = _tokenizer_files(tokenizer_dir, tmp, max_seq_len, args.vocab_size) if tokenizer_dir else {}
        write_safetensors(tmp / WEIGHTS_FILE, shapes, dtype, tensor)
        _write_json(tmp / CONFIG_FILE, hf_config(args, max_seq_len, dtype, special_ids))
        if special_ids:
            _write_json(tmp / "generation_config.json", {
                f"{role}_token_id": i for role, i in special_ids.items()})
        _replace_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def _replace_dir(tmp: Path, out_dir: Path) -> None:
    """Rename tmp to out_dir. A directory cannot be renamed over a non-empty one, so an old export is moved
    aside first and deleted only once the new one is in place."""
    old = None
    if out_dir.exists():
        if any(out_dir.iterdir()):
            old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
            out_dir.rename(old)
        else:
            out_dir.rmdir()
    tmp.rename(out_dir)
    if old is not None:
        shutil.rmtree(old)


# ---------------------------------------------------------------------------------------------------- import


def _weight_files(hf_dir: Path) -> dict[str, Path]:
    """transformers' tensor name -> the safetensors file holding it (headers only, no weights read)."""
    single, index = hf_dir / WEIGHTS_FILE, hf_dir / WEIGHTS_INDEX_FILE
    if single.is_file():
        files = [single]
    elif index.is_file():
        files = [hf_dir / name for name in sorted(set(json.loads(index.read_text())["weight_map"].values()))]
    else:
        raise BessemerError(f"{hf_dir} holds neither {WEIGHTS_FILE} nor {WEIGHTS_INDEX_FILE} (only safetensors "
                            f"weights are read; pickled .bin files are not)")
    safe_open = _safetensors().safe_open
    where = {}
    for path in files:
        with safe_open(str(path), framework="pt") as f:
            where.update({k: path for k in f.keys()})  # noqa: SIM118 (a safe_open handle, not a dict)
    return where


class HFWeights:
    """A transformers Llama directory read lazily: `read(our name, rows, cols)` returns just that region of
    the parameter, in our layout, read from the safetensors file (only those bytes)."""

    def __init__(self, hf_dir: Path, args: ModelArgs | None = None):
        self.dir = hf_dir = Path(hf_dir)
        self.args = check_compatible(hf_dir, args) if args is not None else args_from_config(
            read_config(hf_dir), hf_dir / CONFIG_FILE)
        # Old exports carry the RoPE table as a buffer; it is derived from the config, so it is ignored.
        self.files = {k: v for k, v in _weight_files(hf_dir).items() if not k.endswith("rotary_emb.inv_freq")}
        names = name_map(self.args)
        if self.args.tie_embeddings:
            names.pop("output.weight")
            self.files.pop("lm_head.weight", None)  # some exports write it anyway; transformers ignores it when tied
        missing = sorted(set(names.values()) - set(self.files))
        unexpected = sorted(set(self.files) - set(names.values()))
        if missing or unexpected:
            raise BessemerError(f"{hf_dir}: weights do not match config.json — missing {missing[:5]}, "
                                f"unexpected {unexpected[:5]}")
        if self.args.tie_embeddings:
            names["output.weight"] = names["tok_embeddings.weight"]
        self.names, self.shapes = names, expected_shapes(self.args)
        safe_open = _safetensors().safe_open
        for path in sorted(set(self.files.values())):
            with safe_open(str(path), framework="pt") as f:
                for ours, theirs in names.items():
                    if self.files[theirs] == path:
                        got = tuple(f.get_slice(theirs).get_shape())
                        if got != self.shapes[ours]:
                            raise BessemerError(f"{hf_dir}: {theirs} has shape {got} but config.json implies "
                                                f"{self.shapes[ours]}")

    def read(self, ours: str, rows: slice | None = None, cols: tuple[slice, ...] = ()) -> torch.Tensor:
        shape = self.shapes[ours]
        lo, hi = (rows.start, rows.stop) if rows is not None else (0, shape[0])
        heads = _rope_heads(ours, self.args)
        hd = shape[0] // heads if heads else 1
        first, last = lo // hd * hd, -(-hi // hd) * hd  # wq/wk: whole heads, since rows move within a head
        theirs = self.names[ours]
        with _safetensors().safe_open(str(self.files[theirs]), framework="pt") as f:
            t = f.get_slice(theirs)[(slice(first, last), *cols)]
        if heads:
            t = _from_half_rotation(t, (last - first) // hd)
        return t[lo - first:hi - first].contiguous()


@torch.no_grad()
def load_hf_into(hf_dir: Path, args: ModelArgs, parts: list[torch.nn.Module]) -> None:
    """Fill the parameters of `parts` (whole models, pipeline stages, FSDP or tensor-parallel shards) from a
    transformers Llama directory, each rank reading only the rows and columns of its own shards: memory
    holds this rank's shards plus one region being copied, never the model."""
    weights = HFWeights(hf_dir, args)
    for part in parts:
        for name, p in part.named_parameters():
            local, offset = local_part(p)
            if local.numel() == 0:
                continue
            cols = tuple(slice(o, o + n) for o, n in zip(offset[1:], local.shape[1:]))
            local.copy_(weights.read(name, slice(offset[0], offset[0] + local.shape[0]), cols))


def load_hf(hf_dir: Path, args: ModelArgs | None = None) -> tuple[dict[str, torch.Tensor], ModelArgs]:
    """Read a transformers Llama directory into our parameter names; returns (state dict, its dims).

    With `args`, the config must match them (see check_compatible). Tensors keep the file's dtype. With tied
    embeddings both tok_embeddings.weight and output.weight name the same tensor, as in our model's
    state_dict(). This holds the whole model; `load_hf_into` fills a (sharded) model part by part instead.
    """
    weights = HFWeights(hf_dir, args)
    state = {ours: weights.read(ours) for ours in weights.names if not (
        weights.args.tie_embeddings and ours == "output.weight")}
    if weights.args.tie_embeddings:
        state["output.weight"] = state["tok_embeddings.weight"]
    return state, weights.args
