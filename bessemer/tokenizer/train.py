"""Training a tokenizer with HF tokenizers from a stream of documents. No torch.

Two kinds, both over the domain-aware pre-tokenization of pretok.py and both able to encode any string:
- `bpe`: byte-level BPE (every byte is in the base alphabet);
- `sentencepiece`: HF tokenizers' own Unigram model with Metaspace (spaces shown as ▁) and byte fallback
  (a character outside the vocabulary becomes its UTF-8 bytes, <0x00>..<0xFF>). The `sentencepiece`
  package is not used.

The vocabulary holds exactly `vocab_size` entries once it is full: <|bos|>, <|eos|>, <|pad|>, one
<|domain:NAME|> per domain, and what was learned. Domains named up front are reserved before training;
domains found in the documents while training are made room for by dropping the last learned merges (BPE)
or the least likely pieces (Unigram).
"""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from bessemer.errors import BessemerError
from bessemer.tokenizer.common import (
    KINDS,
    META_FILE,
    SPECIAL_TOKENS,
    TOKENIZER_FILE,
    domain_tag,
    tokenizers_module,
)
from bessemer.tokenizer.pretok import METASPACE, PATTERN, jieba_sequences, pretokenizer

PRETOKENIZER_NAME = "bessemer-domain/1"
UNK = "<|unk|>"
BYTE_PIECES = [f"<0x{b:02X}>" for b in range(256)]


class NoDocuments(BessemerError):
    """The document stream was empty."""


@dataclass
class CorpusStats:
    """What the trainer saw, counted while streaming."""

    docs: int = 0
    bytes: int = 0
    domains: dict[str, int] = field(default_factory=dict)

    def count(self, docs: Iterable[tuple[str, str | None]]) -> Iterator[str]:
        for text, domain in docs:
            self.docs += 1
            self.bytes += len(text.encode("utf-8", errors="surrogatepass"))
            if domain is not None:
                self.domains[domain] = self.domains.get(domain, 0) + 1
            yield text


def train_tokenizer(docs: Iterable[tuple[str, str | None]], vocab_size: int, out_dir: str | Path,
                    kind: str = "bpe", use_jieba: bool = False, domains: Iterable[str] = (),
                    extra_meta: dict | None = None) -> Path:
    """Train on (text, domain or None) pairs and write out_dir/tokenizer.json and tokenizer_meta.json."""
    tk = tokenizers_module()
    if kind not in KINDS:
        raise BessemerError(f"unknown tokenizer kind {kind!r}; choose one of {', '.join(KINDS)}")
    domains = list(dict.fromkeys(domains))
    specials = SPECIAL_TOKENS + [domain_tag(d) for d in domains]
    floor = len(specials) + 256 + (1 if kind == "bpe" else 64)  # Unigram: some room for pieces
    if vocab_size < floor:
        raise BessemerError(f"--vocab-size {vocab_size} is too small for {kind}: {len(specials)} special tokens "
                            f"+ 256 bytes need at least {floor}")
    stats = CorpusStats()
    texts: Iterator = stats.count(docs)
    if use_jieba:
        texts = jieba_sequences(texts)  # batches: one list of sequences per document

    if kind == "bpe":
        tokenizer = tk.Tokenizer(tk.models.BPE())
        tokenizer.decoder = tk.decoders.ByteLevel()
        trainer = tk.trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                         initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet())
    else:
        tokenizer = tk.Tokenizer(tk.models.Unigram())
        tokenizer.decoder = tk.decoders.Sequence([tk.decoders.Replace(METASPACE, " "), tk.decoders.ByteFallback(),
                                                  tk.decoders.Fuse()])
        # The lattice needs an unknown piece to exist; byte fallback replaces it, so it is never emitted.
        specials = specials + [UNK]
        trainer = tk.trainers.UnigramTrainer(vocab_size=vocab_size - 256, special_tokens=specials, unk_token=UNK,
                                             show_progress=False)
    tokenizer.pre_tokenizer = pretokenizer(kind)
    tokenizer.train_from_iterator(texts, trainer)
    if stats.docs == 0:
        raise NoDocuments("no documents to train on")

    spec = json.loads(tokenizer.to_str())
    if kind == "sentencepiece":
        _add_byte_fallback(spec["model"])
    found = [d for d in stats.domains if d not in domains]
    model_size = len(spec["model"]["vocab"])
    _trim(spec["model"], model_size + len(found) - vocab_size, kind)
    tokenizer = tk.Tokenizer.from_str(json.dumps(spec))
    tokenizer.add_special_tokens([domain_tag(d) for d in found])
    assert tokenizer.get_vocab_size() <= vocab_size, (tokenizer.get_vocab_size(), vocab_size)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out / TOKENIZER_FILE))
    all_domains = domains + found
    meta = {
        "kind": kind, "vocab_size": tokenizer.get_vocab_size(), "requested_vocab_size": vocab_size,
        "jieba": use_jieba, "pretokenizer": PRETOKENIZER_NAME, "pattern": PATTERN,
        "special_tokens": {t: tokenizer.token_to_id(t) for t in SPECIAL_TOKENS + [domain_tag(d) for d in all_domains]},
        "domains": all_domains,
        "corpus": {"docs": stats.docs, "bytes": stats.bytes, "docs_per_domain": stats.domains, **(extra_meta or {})},
    }
    (out / META_FILE).write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
    return out / TOKENIZER_FILE


def _add_byte_fallback(model: dict) -> None:
    """Byte pieces go last with a score far below any learned piece, so the lattice only takes them for
    characters it has no piece for (and never for a literal "<0x41>" in the text)."""
    have = {piece for piece, _ in model["vocab"]}
    floor = min((score for _, score in model["vocab"] if score < 0), default=0.0) - 1e4
    model["vocab"].extend([piece, floor] for piece in BYTE_PIECES if piece not in have)
    model["byte_fallback"] = True


def _trim(model: dict, n: int, kind: str) -> None:
    """Drop the `n` least useful learned entries so that the added domain tags fit the vocabulary size."""
    if n <= 0:
        return
    if kind == "bpe":
        # The last merges made the highest ids and no earlier merge uses their results.
        merges = model["merges"]
        drop = {"".join(m) if isinstance(m, list) else m.replace(" ", "", 1) for m in merges[-n:]}
        by_id = sorted(model["vocab"].items(), key=lambda kv: kv[1])
        assert {t for t, _ in by_id[-n:]} == drop, "BPE vocab ids are not in merge order"
        model["merges"] = merges[:-n]
        model["vocab"] = dict(by_id[:-n])
        return
    vocab = model["vocab"]
    learned = [i for i, (piece, _) in enumerate(vocab)
               if len(piece) > 1 and piece not in BYTE_PIECES and not piece.startswith("<|")]
    worst = set(sorted(learned, key=lambda i: vocab[i][1])[:n])
    if len(worst) < n:
        raise BessemerError(f"vocabulary too small to hold {n} more domain tags")
    model["vocab"] = [entry for i, entry in enumerate(vocab) if i not in worst]
