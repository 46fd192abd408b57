"""`bessemer tokenizer stats`: how well a tokenizer compresses each domain of a corpus. No torch.

Per domain:
- bytes/token: UTF-8 bytes of the text / tokens (higher is better compression);
- tokens/word: tokens / words, where words are whitespace-separated words and, inside runs of Chinese
  characters, jieba's words (a Chinese sentence has no spaces to count);
- byte-fallback rate: the share of tokens that are not whole characters: byte-level BPE tokens whose bytes
  are not valid UTF-8 on their own (a piece of a character the vocabulary never merged), and Unigram's
  <0xNN> byte pieces;
- the longest tokens the domain's text used.
And for the vocabulary: its longest tokens (BPE: the results of the longest merges).
"""

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bessemer.data.text.script import HAN
from bessemer.errors import BessemerError
from bessemer.tokenizer.common import read_meta, tokenizer_file, tokenizer_kind
from bessemer.tokenizer.encode import DEFAULT_DOMAIN, _load
from bessemer.tokenizer.inputs import BadRecords, read_documents
from bessemer.tokenizer.pretok import METASPACE

_BYTE_PIECE = re.compile(r"<0x([0-9A-F]{2})>")


def _byte_decoder() -> dict[str, int]:
    """Byte-level BPE writes byte b as a printable character (GPT-2's table); this maps it back."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def token_bytes(tokenizer) -> list[bytes]:
    """The bytes each id stands for (special tokens: their text)."""
    kind = tokenizer_kind(tokenizer)
    specials = {t.content for t in tokenizer.get_added_tokens_decoder().values()}
    table = _byte_decoder()
    out = []
    for i in range(tokenizer.get_vocab_size()):
        tok = tokenizer.id_to_token(i) or ""
        if tok in specials:
            out.append(tok.encode())
        elif kind == "bpe":
            out.append(bytes(table[c] for c in tok))
        elif m := _BYTE_PIECE.fullmatch(tok):
            out.append(bytes([int(m.group(1), 16)]))
        else:
            out.append(tok.replace(METASPACE, " ").encode())
    return out


def _is_partial(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


@dataclass
class _Domain:
    docs: int = 0
    bytes: int = 0
    tokens: int = 0
    words: int = 0
    fallback: int = 0
    used: set[int] = field(default_factory=set)


class _WordCounter:
    def __init__(self):
        self._cut = None

    def __call__(self, text: str) -> int:
        n = 0
        for word in text.split():
            if not HAN.search(word):
                n += 1
                continue
            if self._cut is None:
                from bessemer.data.text.segment import load_jieba

                self._cut = load_jieba().cut
            n += sum(1 for w in self._cut(word) if w.strip())
        return n


def tokenizer_stats(tokenizer: str | Path, inputs: str | Path, text_field: str = "text",
                    domain_field: str = "metadata.domain", domain: str | None = None, max_docs: int = 0,
                    top: int = 10, input_format: str = "auto") -> dict:
    """Per-domain compression numbers of `tokenizer` on the documents under `inputs` (at most `max_docs`
    per domain when > 0); see the module docstring for the definitions."""
    path = tokenizer_file(tokenizer)
    tok = _load(path)
    tbytes = token_bytes(tok)
    lengths = np.array([len(b) for b in tbytes])
    specials = {t.content for t in tok.get_added_tokens_decoder().values()}
    partial = np.array([_is_partial(b) and tok.id_to_token(i) not in specials for i, b in enumerate(tbytes)])
    count_words = _WordCounter()
    bad = BadRecords()
    per: dict[str, _Domain] = {}
    batch: list[tuple[str, str]] = []

    def flush() -> None:
        for (text, name), enc in zip(batch, tok.encode_batch([t for t, _ in batch], add_special_tokens=False)):
            d = per.setdefault(name, _Domain())
            ids = np.asarray(enc.ids, dtype=np.int64)
            d.docs += 1
            d.bytes += len(text.encode())
            d.tokens += ids.size
            d.words += count_words(text)
            d.fallback += int(partial[ids].sum())
            d.used.update(np.unique(ids).tolist())
        batch.clear()

    taken: dict[str, int] = {}
    for text, doc_domain in read_documents(inputs, bad, text_field, domain_field, input_format):
        name = domain or doc_domain or DEFAULT_DOMAIN
        if max_docs and taken.get(name, 0) >= max_docs:
            continue
        taken[name] = taken.get(name, 0) + 1
        batch.append((text, name))
        if len(batch) >= 256:
            flush()
    flush()
    if not per:
        raise BessemerError(f"no documents in {inputs}" + (f"; {bad.summary()}" if bad.total else ""))

    def show(ids) -> list[str]:
        return [tbytes[i].decode("utf-8", errors="backslashreplace") for i in ids]

    def longest(ids) -> list[int]:
        ids = [i for i in ids if tok.id_to_token(i) not in specials]
        return sorted(ids, key=lambda i: (-lengths[i], i))[:top]

    domains = {}
    for name, d in sorted(per.items()):
        domains[name] = {
            "docs": d.docs, "bytes": d.bytes, "tokens": d.tokens, "words": d.words,
            "bytes_per_token": d.bytes / d.tokens if d.tokens else 0.0,
            "tokens_per_word": d.tokens / d.words if d.words else 0.0,
            "byte_fallback_rate": d.fallback / d.tokens if d.tokens else 0.0,
            "longest_tokens_used": show(longest(d.used)),
        }
    spec = json.loads(tok.to_str())["model"]
    meta = read_meta(path)
    return {
        "tokenizer": str(path), "kind": tokenizer_kind(tok), "vocab_size": tok.get_vocab_size(),
        "jieba": meta.get("jieba"), "merges": len(spec.get("merges", [])),
        "longest_tokens": show(longest(range(tok.get_vocab_size()))),
        "domains": domains, "bad_lines": bad.total, "bad_lines_summary": bad.summary(),
    }


def format_stats(stats: dict) -> str:
    jieba = {True: ", jieba", False: "", None: ""}[stats["jieba"]]
    lines = [f"{stats['tokenizer']}: {stats['kind']}, vocab {stats['vocab_size']:,}{jieba}", "",
             f"{'domain':<14} {'docs':>8} {'MB':>8} {'bytes/token':>12} {'tokens/word':>12} {'byte-fallback':>14}"]
    for name, d in stats["domains"].items():
        lines.append(f"{name:<14} {d['docs']:>8,} {d['bytes'] / 1e6:>8.2f} {d['bytes_per_token']:>12.3f} "
                     f"{d['tokens_per_word']:>12.3f} {d['byte_fallback_rate']:>13.2%}")
    lines.append("")
    for name, d in stats["domains"].items():
        lines.append(f"longest tokens used by {name}: " + "  ".join(repr(t) for t in d["longest_tokens_used"][:5]))
    lines.append("longest tokens in the vocabulary: " + "  ".join(repr(t) for t in stats["longest_tokens"]))
    return "\n".join(lines)
