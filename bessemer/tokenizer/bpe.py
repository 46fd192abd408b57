"""Byte-level BPE with HF tokenizers, and encoding documents into token shards. No torch.

Byte-level means every string is representable (no unknown token): text is mapped to its UTF-8 bytes
first, and merges are learned on top. The tokenizer is saved as tokenizer.json, which
`tokenizers.Tokenizer.from_file` and transformers' PreTrainedTokenizerFast both load.
"""

from pathlib import Path
from typing import Iterable, Iterator

from bessemer.dataset.shards import ShardWriter

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
SPECIAL_TOKENS = [BOS, EOS, PAD]
TOKENIZER_FILE = "tokenizer.json"


def _tokenizers():
    try:
        import tokenizers
    except ImportError:
        raise ImportError("tokenizer training needs HF tokenizers: pip install tokenizers") from None
    return tokenizers


def train_bpe(texts: Iterable[str], vocab_size: int, out_dir: str | Path) -> Path:
    """Learn a byte-level BPE vocabulary of `vocab_size` entries (specials included); returns tokenizer.json."""
    tk = _tokenizers()
    tokenizer = tk.Tokenizer(tk.models.BPE())
    tokenizer.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                     initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out / TOKENIZER_FILE))
    return out / TOKENIZER_FILE


def load_tokenizer(path: str | Path):
    path = Path(path)
    if path.is_dir():
        path = path / TOKENIZER_FILE
    return _tokenizers().Tokenizer.from_file(str(path))


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
