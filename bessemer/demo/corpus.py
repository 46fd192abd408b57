"""The bundled demo corpus, built from text that ships with Python plus Chinese prose kept in this package.

Three domains: `code` (standard-library sources), `prose_en` (the reference-manual topics of pydoc) and
`prose_zh` (zh.txt). Nothing is downloaded; the same Python gives the same corpus.
"""

import json
import sysconfig
from pathlib import Path
from typing import Iterator

from bessemer.errors import BessemerError

ZH_FILE = Path(__file__).with_name("zh.txt")
CHUNK_CHARS = 2000


def _chunks(text: str, max_chars: int) -> Iterator[str]:
    """Split at line boundaries into pieces of at most ~max_chars, so that a shuffled order mixes domains
    within a batch instead of feeding one long file for many steps."""
    piece, size = [], 0
    for line in text.splitlines(keepends=True):
        if size + len(line) > max_chars and piece:
            yield "".join(piece)
            piece, size = [], 0
        piece.append(line)
        size += len(line)
    if piece:
        yield "".join(piece)


def _code_docs(max_bytes: int) -> Iterator[dict]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    total = 0
    for path in sorted(stdlib.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if total + len(text) > max_bytes:
            continue
        total += len(text)
        for i, chunk in enumerate(_chunks(text, CHUNK_CHARS)):
            yield {"id": f"code/{path.name}/{i}", "text": chunk, "metadata": {"domain": "code", "source": str(path)}}


def _prose_docs(max_bytes: int) -> Iterator[dict]:
    try:
        from pydoc_data.topics import topics
    except ImportError:
        raise BessemerError("this Python lacks pydoc_data (the reference-manual topics the demo corpus uses); "
                            "install a full CPython 3.11") from None
    total = 0
    for name in sorted(topics):
        text = topics[name].strip()
        if total + len(text) > max_bytes:
            break
        total += len(text)
        for i, chunk in enumerate(_chunks(text, CHUNK_CHARS)):
            yield {"id": f"prose_en/{name}/{i}", "text": chunk,
                   "metadata": {"domain": "prose_en", "source": "pydoc_data"}}


def _zh_docs(lines_per_doc: int = 4) -> Iterator[dict]:
    lines = [line for line in ZH_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]
    for i in range(0, len(lines), lines_per_doc):
        yield {"id": f"prose_zh/{i // lines_per_doc:04d}", "text": "\n".join(lines[i:i + lines_per_doc]),
               "metadata": {"domain": "prose_zh", "source": ZH_FILE.name}}


def build_corpus(out_path: str | Path, code_bytes: int = 2_000_000, prose_bytes: int = 1_000_000) -> list[dict]:
    """Write the corpus as JSONL documents (id, text, metadata.domain) and return them."""
    docs = [*_code_docs(code_bytes), *_prose_docs(prose_bytes), *_zh_docs()]
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with open(out_path, "w", encoding="utf-8") as f:
        for doc in docs:
            f.write(json.dumps(doc, ensure_ascii=False) + "\n")
    return docs


def build_token_data(out_dir: str | Path, vocab_size: int, code_bytes: int = 2_000_000,
                     prose_bytes: int = 1_000_000, seed: int = 0) -> Path:
    """Corpus -> byte-level BPE tokenizer -> token shards, all under `out_dir`; returns the shard directory.

    Documents are written in a seeded random order so that a sequential read mixes the domains.
    """
    import random

    from bessemer.tokenizer.bpe import encode_to_shards
    from bessemer.tokenizer.train import train_tokenizer

    out_dir = Path(out_dir)
    docs = build_corpus(out_dir / "corpus.jsonl", code_bytes, prose_bytes)
    # The domain-aware byte-level BPE (tokenizer/pretok.py), with a tag token per domain.
    tokenizer = train_tokenizer(((d["text"], d["metadata"]["domain"]) for d in docs), vocab_size,
                                out_dir / "tokenizer", kind="bpe")
    random.Random(seed).shuffle(docs)
    return encode_to_shards(tokenizer, ((d["text"], d["metadata"]["domain"]) for d in docs), out_dir / "shards")
