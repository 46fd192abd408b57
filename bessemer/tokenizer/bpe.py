"""Byte-level BPE with HF tokenizers: training from texts in memory. No torch.

Byte-level means every string is representable (no unknown token): text is mapped to its UTF-8 bytes
first, and merges are learned on top. Pre-tokenization is the domain-aware split of pretok.py, stored in
tokenizer.json, which `tokenizers.Tokenizer.from_file` and transformers' PreTrainedTokenizerFast both load.
The `bessemer tokenizer` commands (train.py, encode.py, stats.py) are the full interface; this is the small
one for training from texts in memory (encoding always goes through encode.py).
"""

from pathlib import Path
from typing import Iterable

from bessemer.tokenizer.common import (  # noqa: F401
    BOS,
    EOS,
    PAD,
    SPECIAL_TOKENS,
    TOKENIZER_FILE,
    load_tokenizer,
)


def train_bpe(texts: Iterable[str], vocab_size: int, out_dir: str | Path) -> Path:
    """Learn a byte-level BPE vocabulary of `vocab_size` entries (specials included); returns tokenizer.json."""
    from bessemer.tokenizer.train import train_tokenizer

    return train_tokenizer(((t, None) for t in texts), vocab_size, out_dir, kind="bpe")
