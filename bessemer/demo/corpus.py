"""The bundled demo corpus, built from text that ships with Python plus Chinese prose kept in this package.

Three domains: `code` (standard-library sources), `prose_en` (the reference-manual topics of pydoc) and
`prose_zh` (zh.txt). Nothing is downloaded; the same Python gives the same corpus. The demo writes it raw,
with planted problems (planted.py), curates it with configs/demo_pipeline.toml, and trains the tokenizer
and encodes the shards from the curated output.
"""

import json
import sysconfig
from pathlib import Path
from typing import Iterator

from bessemer.errors import BessemerError

ZH_FILE = Path(__file__).with_name("zh.txt")
PIPELINE_FILE = Path(__file__).resolve().parents[2] / "configs" / "demo_pipeline.toml"
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


def build_raw_corpus(out_dir: str | Path, code_bytes: int = 2_000_000, prose_bytes: int = 1_000_000,
                     seed: int = 0) -> Path:
    """The corpus plus planted duplicates, PII, junk and HTML pages (planted.py), one JSONL file per domain
    in `out_dir`; returns `out_dir`."""
    from bessemer.demo.planted import plant_problems, write_raw_corpus

    docs = [*_code_docs(code_bytes), *_prose_docs(prose_bytes), *_zh_docs()]
    return write_raw_corpus(plant_problems(docs, seed), out_dir)


def curate(raw_dir: str | Path, out_dir: str | Path, pipeline_file: str | Path = PIPELINE_FILE) -> dict:
    """Run the demo's curation pipeline (configs/demo_pipeline.toml) from `raw_dir` into `out_dir` (kept
    shards, `rejected/`, `stats.json`); returns the stats."""
    from bessemer.data.phases import run_pipeline

    return run_pipeline(demo_pipeline(raw_dir, out_dir, pipeline_file), progress=False)


def demo_pipeline(raw_dir: str | Path, out_dir: str | Path, pipeline_file: str | Path = PIPELINE_FILE):
    """The demo's pipeline, reading `raw_dir` and writing `out_dir`, its decontaminate step pointed at the
    benchmark in this package (bench/), wherever the demo runs from."""
    from bessemer.config import read_toml
    from bessemer.data.pipeline_toml import Pipeline
    from bessemer.demo.planted import BENCH_DIR

    raw = read_toml(pipeline_file, "pipeline")
    raw["input"] = {**raw.get("input", {}), "paths": [str(raw_dir)]}
    raw["output"] = {**raw.get("output", {}), "dir": str(out_dir), "rejected": ""}
    for step in raw.get("steps", []):
        if step.get("name") == "decontaminate":
            step["tasks"] = [str(BENCH_DIR)]
    return Pipeline.from_dict(raw, where=str(pipeline_file))


def read_curated(out_dir: str | Path) -> list[dict]:
    """The kept documents of a curation output directory (its part-* shards, in shard order)."""
    from bessemer.data.pipeline_toml import InputConfig
    from bessemer.data.readers import list_inputs, read_file

    cfg = InputConfig(paths=[str(out_dir)])
    docs = []
    for f in list_inputs([f"{str(out_dir).rstrip('/')}/part-*"], "jsonl"):
        docs.extend({"id": d.id, "text": d.text, "metadata": d.metadata} for d in read_file(f, cfg))
    return docs


def build_token_data(out_dir: str | Path, vocab_size: int, code_bytes: int = 2_000_000,
                     prose_bytes: int = 1_000_000, seed: int = 0, docs: list[dict] | None = None,
                     heldout: float = 0.0) -> Path:
    """Documents (`docs`, e.g. the curated ones; default: the clean corpus) -> byte-level BPE tokenizer ->
    token shards, all under `out_dir`; returns the shard directory.

    The shards are written by `bessemer tokenizer encode`'s code (tokenizer/encode.py), which shuffles the
    documents with `seed`, so a sequential read mixes the domains. With `heldout` that share of the documents
    goes to SHARDS/heldout/ instead (what [eval] validates on).
    """
    from bessemer.tokenizer.encode import EncodeSettings, encode_inputs
    from bessemer.tokenizer.train import train_tokenizer

    out_dir = Path(out_dir)
    if docs is None:
        docs = build_corpus(out_dir / "corpus.jsonl", code_bytes, prose_bytes)
    missing = {"code", "prose_en", "prose_zh"} - {d["metadata"]["domain"] for d in docs}
    if missing:
        raise BessemerError(f"no {', '.join(sorted(missing))} documents left to train on; the demo's mixture "
                            f"needs code, prose_en and prose_zh")
    # The domain-aware byte-level BPE (tokenizer/pretok.py), with a tag token per domain.
    tokenizer = train_tokenizer(((d["text"], d["metadata"]["domain"]) for d in docs), vocab_size,
                                out_dir / "tokenizer", kind="bpe")
    source = out_dir / "encode_input.jsonl"
    with open(source, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": d["text"], "metadata": {"domain": d["metadata"]["domain"]}},
                                ensure_ascii=False) + "\n" for d in docs)
    encode_inputs(tokenizer, source, out_dir / "shards", EncodeSettings(seed=seed, heldout=heldout))
    source.unlink()
    return out_dir / "shards"
