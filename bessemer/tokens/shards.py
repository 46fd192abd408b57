"""Token shards: memory-mapped token files plus a small index. NumPy only (no torch).

A dataset is a directory:

    index.json            format, dtype, vocab_size, eos_id, domain names, shard list (tokens, docs each)
    shard_00000.bin       the tokens of many documents back to back (uint16 if vocab <= 65536, else uint32)
    shard_00000.idx.npz   offsets (int64, docs+1: document k is tokens[offsets[k]:offsets[k+1]]) and
                          domains (uint16, one label per document; names in index.json)

Documents are stored without separators; readers put EOS after each one. index.json is written last and
atomically, so a directory with an index is complete. A shard entry of the index may carry its own
`domains` list: its labels then number that list (a shard written by a worker that did not know the other
workers' domains), and TokenDataset maps them to the index's `domains`.
"""

import json
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Iterable

import numpy as np

from bessemer.errors import BessemerError

FORMAT = "bessemer-tokens/1"
INDEX = "index.json"


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


class ShardWriter:
    """Append documents (token id lists) and their domain; rolls to a new shard every `shard_tokens` tokens."""

    def __init__(self, out_dir: str | Path, vocab_size: int, eos_id: int, shard_tokens: int = 1 << 26,
                 tokenizer: str = ""):
        if not 0 <= eos_id < vocab_size:
            raise BessemerError(f"eos_id {eos_id} outside the vocabulary [0, {vocab_size})")
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.vocab_size, self.eos_id, self.tokenizer = vocab_size, eos_id, tokenizer
        self.dtype = token_dtype(vocab_size)
        self.shard_tokens = shard_tokens
        self.domains: list[str] = []
        self.shards: list[dict] = []
        self._tokens: list[np.ndarray] = []
        self._lengths: list[int] = []
        self._doc_domains: list[int] = []
        self._pending = 0

    def add(self, tokens: Iterable[int] | np.ndarray, domain: str = "default") -> None:
        arr = np.asarray(tokens, dtype=np.int64)
        if arr.size and (arr.min() < 0 or arr.max() >= self.vocab_size):
            raise BessemerError(f"token id out of range [0, {self.vocab_size}) in document {self.num_docs()}")
        if domain not in self.domains:
            self.domains.append(domain)
        self._tokens.append(arr.astype(self.dtype))
        self._lengths.append(arr.size)
        self._doc_domains.append(self.domains.index(domain))
        self._pending += arr.size
        if self._pending >= self.shard_tokens:
            self._flush()

    def num_docs(self) -> int:
        return sum(s["docs"] for s in self.shards) + len(self._lengths)

    def resume(self, domains: list[str], shards: list[dict]) -> None:
        """Continue a dataset whose first shards (as its index lists them) are already on disk: new documents go
        into the shards after them and the existing domain labels keep their numbers."""
        assert not self.shards and not self._lengths, "resume() must come before add()"
        self.domains, self.shards = list(domains), [dict(s) for s in shards]

    def flush(self) -> None:
        """Write the documents added so far as a shard now rather than at the next roll or at close()."""
        self._flush()

    def _flush(self) -> None:
        if not self._lengths:
            return
        name = f"shard_{len(self.shards):05d}"
        self.shards.append(write_shard(self.dir, name, self._tokens, self._doc_domains, self.dtype))
        self._tokens, self._lengths, self._doc_domains, self._pending = [], [], [], 0

    def close(self) -> Path:
        self._flush()
        write_index(self.dir, self.vocab_size, self.eos_id, self.tokenizer, self.domains, self.shards)
        return self.dir


def write_shard(out_dir: Path, name: str, docs: list[np.ndarray], labels: list[int] | np.ndarray,
                dtype: np.dtype) -> dict:
    """Write one shard (`name`.bin and `name`.idx.npz, each atomically) of `docs` (token arrays, in order) with
    their domain labels; returns its index entry."""
    lengths = np.fromiter((d.size for d in docs), dtype=np.int64, count=len(docs))
    tokens = np.concatenate(docs).astype(dtype, copy=False) if docs else np.zeros(0, dtype)
    offsets = np.zeros(len(docs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    _atomic_write(out_dir / f"{name}.bin", tokens.tobytes())
    with open(out_dir / f"{name}.idx.npz.tmp", "wb") as f:
        np.savez(f, offsets=offsets, domains=np.asarray(labels, dtype=np.uint16))
    os.replace(out_dir / f"{name}.idx.npz.tmp", out_dir / f"{name}.idx.npz")
    return {"name": name, "tokens": int(tokens.size), "docs": len(docs)}


def write_index(out_dir: Path, vocab_size: int, eos_id: int, tokenizer: str, domains: list[str],
                shards: list[dict]) -> None:
    """index.json, written last: it makes the directory a dataset (the shards it lists must exist)."""
    index = {"format": FORMAT, "dtype": token_dtype(vocab_size).name, "vocab_size": vocab_size, "eos_id": eos_id,
             "tokenizer": tokenizer, "domains": domains, "shards": shards}
    _atomic_write(Path(out_dir) / INDEX, json.dumps(index, indent=1, ensure_ascii=False).encode())


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_versioned_json(path: Path, fmt: str, hint: str = "") -> dict:
    """A JSON file whose "format" must be `fmt`; a clear error (plus `hint`) when it is not."""
    try:
        obj = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise BessemerError(f"{path}: not valid JSON ({e}){hint}") from None
    if not isinstance(obj, dict) or obj.get("format") != fmt:
        found = obj.get("format") if isinstance(obj, dict) else type(obj).__name__
        raise BessemerError(f"{path}: format {found!r}, expected {fmt!r}{hint}")
    return obj


@dataclass
class Shard:
    name: str
    tokens: np.ndarray  # memmap
    offsets: np.ndarray
    domains: np.ndarray

    @cached_property
    def ends(self) -> np.ndarray:
        """Exclusive end of each document in the shard's stream (its EOS included)."""
        return self.offsets[1:] + np.arange(1, self.offsets.size)

    @property
    def stream_len(self) -> int:
        """Length of this shard's token stream with an EOS after every document."""
        return int(self.tokens.size + self.offsets.size - 1)


class TokenDataset:
    """A shard directory opened read-only as one stream: doc0 EOS doc1 EOS ... (memory-mapped)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        index_path = self.path / INDEX
        if not index_path.is_file():
            raise BessemerError(f"no token shards at {self.path} (missing {INDEX}); write them with the tokenizer "
                                f"encoder or `bessemer demo`")
        index = read_versioned_json(index_path, FORMAT)
        self.vocab_size: int = index["vocab_size"]
        self.eos_id: int = index["eos_id"]
        self.domains: list[str] = index["domains"]
        self.tokenizer: str = index.get("tokenizer", "")
        dtype = np.dtype(index["dtype"])
        self.shards: list[Shard] = []
        for meta in index["shards"]:
            bin_path = self.path / f"{meta['name']}.bin"
            expected = meta["tokens"] * dtype.itemsize
            if not bin_path.is_file() or bin_path.stat().st_size != expected:
                size = bin_path.stat().st_size if bin_path.is_file() else "missing"
                raise BessemerError(f"{bin_path}: expected {expected} bytes ({meta['tokens']} tokens), found {size}")
            with np.load(self.path / f"{meta['name']}.idx.npz", allow_pickle=False) as idx:
                offsets, domains = idx["offsets"], idx["domains"]
            if "domains" in meta:  # labels local to the shard
                lookup = np.array([self.domains.index(d) for d in meta["domains"]] or [0], dtype=np.uint16)
                domains = lookup[domains]
            if offsets[-1] != meta["tokens"] or offsets.size != meta["docs"] + 1:
                raise BessemerError(f"{self.path / meta['name']}.idx.npz does not match index.json")
            tokens = np.memmap(bin_path, dtype=dtype, mode="r") if meta["tokens"] else np.zeros(0, dtype)
            self.shards.append(Shard(meta["name"], tokens, offsets, domains))
        self._starts = np.cumsum([0] + [s.stream_len for s in self.shards])
        if self.stream_len == 0:
            raise BessemerError(f"token shards at {self.path} hold no tokens")

    @property
    def stream_len(self) -> int:
        return int(self._starts[-1])

    @property
    def num_docs(self) -> int:
        return sum(s.offsets.size - 1 for s in self.shards)

    def read(self, start: int, length: int) -> np.ndarray:
        """`length` tokens of the stream from `start`, wrapping around at the end (the next epoch)."""
        out = np.empty(length, dtype=np.int64)
        filled = 0
        while filled < length:
            pos = (start + filled) % self.stream_len
            i = int(np.searchsorted(self._starts, pos, side="right")) - 1
            n = min(length - filled, int(self._starts[i + 1]) - pos)
            out[filled:filled + n] = self._read_shard(self.shards[i], pos - int(self._starts[i]), n)
            filled += n
        return out

    def _read_shard(self, shard: Shard, a: int, n: int) -> np.ndarray:
        # Stream positions of document k are [offsets[k] + k, offsets[k+1] + k]; the last one is its EOS.
        p = np.arange(a, a + n)
        doc = np.searchsorted(shard.ends, p, side="right")
        raw = p - doc  # position in the token file (for EOS positions: the next document's first token)
        is_eos = p == shard.ends[doc] - 1
        lo, hi = int(raw[0]), min(int(raw[-1]) + 1, shard.tokens.size)
        chunk = np.asarray(shard.tokens[lo:hi], dtype=np.int64)  # one contiguous read from the memmap
        if chunk.size == 0:  # only EOS positions (empty documents at the end)
            return np.full(n, self.eos_id, dtype=np.int64)
        return np.where(is_eos, self.eos_id, chunk[np.minimum(raw - lo, chunk.size - 1)])
