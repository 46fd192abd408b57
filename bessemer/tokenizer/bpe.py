"""Byte-level BPE with HF tokenizers, and encoding documents into token shards. No torch.

Byte-level means every string is representable (no unknown token): text is mapped to its UTF-8 bytes
first, and merges are learned on top. Pre-tokenization is the domain-aware split of pretok.py, stored in
tokenizer.json, which `tokenizers.Tokenizer.from_file` and transformers' PreTrainedTokenizerFast both load.
The `bessemer tokenizer` commands (train.py, encode.py, stats.py) are the full interface; these functions
are the small one the demo uses.
"""

from pathlib import Path
from typing import Iterable, Iterator

from bessemer.dataset.shards import ShardWriter
from bessemer.tokenizer.common import BOS, EOS, PAD, SPECIAL_TOKENS, TOKENIZER_FILE, load_tokenizer  # noqa: F401


def train_bpe(texts: Iterable[str], vocab_size: int, out_dir: str | Path) -> Path:
    """Learn a byte-level BPE vocabulary of `vocab_size` entries (specials included); returns tokenizer.json."""
    from bessemer.tokenizer.train import train_tokenizer

    return train_tokenizer(((t, None) for t in texts), vocab_size, out_dir, kind="bpe")


def _batches(docs: Iterable[tuple[str, str]], size: int) -> Iterator[list[tuple[str, str]]]:
    batch = []
    for doc in docs:
        batch.append(doc)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def encode_to_shards(tokenizer_path: str | Path, docs: Iterable[tuple[str, str]], out_dir: str | Path,
                     shard_tokens: int = 1 << 26) -> Path:
    """Tokenize (text, domain) pairs into the shard format (dataset/shards.py); EOS is the tokenizer's."""
    tokenizer = load_tokenizer(tokenizer_path)
    eos = tokenizer.token_to_id(EOS)
    assert eos is not None, f"{tokenizer_path} has no {EOS} token"
    writer = ShardWriter(out_dir, tokenizer.get_vocab_size(), eos, shard_tokens, tokenizer=str(tokenizer_path))
    for batch in _batches(docs, 256):
        for (_, domain), enc in zip(batch, tokenizer.encode_batch([text for text, _ in batch])):
            writer.add(enc.ids, domain)
    return writer.close()
