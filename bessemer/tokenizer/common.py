"""Names and files every tokenizer command shares: special tokens, tokenizer.json, tokenizer_meta.json."""

import json
from pathlib import Path

from bessemer.errors import BessemerError

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
SPECIAL_TOKENS = [BOS, EOS, PAD]
TOKENIZER_FILE = "tokenizer.json"
META_FILE = "tokenizer_meta.json"
KINDS = ("bpe", "sentencepiece")


def domain_tag(domain: str) -> str:
    return f"<|domain:{domain}|>"


def tokenizers_module():
    try:
        import tokenizers
    except ImportError:
        raise ImportError("the tokenizer needs HF tokenizers: pip install tokenizers") from None
    return tokenizers


def tokenizer_file(path: str | Path) -> Path:
    """tokenizer.json itself, or the one inside a directory; a clear error when there is none."""
    path = Path(path)
    if path.is_dir():
        path = path / TOKENIZER_FILE
    if not path.is_file():
        raise BessemerError(f"no tokenizer at {path}; train one with `bessemer tokenizer train`")
    return path


def load_tokenizer(path: str | Path):
    return tokenizers_module().Tokenizer.from_file(str(tokenizer_file(path)))


def read_meta(path: str | Path) -> dict:
    """tokenizer_meta.json beside tokenizer.json ({} for a tokenizer written without one)."""
    meta = tokenizer_file(path).with_name(META_FILE)
    if not meta.is_file():
        return {}
    try:
        return json.loads(meta.read_text())
    except json.JSONDecodeError as e:
        raise BessemerError(f"{meta}: not valid JSON: {e}") from None


def tokenizer_kind(tokenizer) -> str:
    model = json.loads(tokenizer.to_str())["model"]["type"]
    return {"BPE": "bpe", "Unigram": "sentencepiece"}.get(model, model.lower())
