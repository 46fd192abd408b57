"""Rebuild data/debug/: the small token shards that configs/debug.toml and the tests train on.

The same path as the demo (bessemer/demo/corpus.py) at a smaller scale: ~0.5 MB of Python's own
sources and docs plus the bundled Chinese prose, a 1024-entry byte-level BPE, shuffled shards.
Run from the repository root: python scripts/make_debug_data.py
"""

import shutil
import tempfile
from pathlib import Path

from bessemer.demo.corpus import build_token_data

OUT = Path(__file__).resolve().parents[1] / "data" / "debug"

if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        shards = build_token_data(tmp, vocab_size=1024, code_bytes=300_000, prose_bytes=200_000, seed=0)
        shutil.rmtree(OUT, ignore_errors=True)
        shutil.copytree(shards, OUT, ignore=shutil.ignore_patterns("encode_progress.json"))
        shutil.copy(Path(tmp) / "tokenizer" / "tokenizer.json", OUT / "tokenizer.json")
    index = (OUT / "index.json").read_text()
    (OUT / "index.json").write_text(index.replace(str(Path(tmp) / "tokenizer" / "tokenizer.json"), "tokenizer.json"))
    print(f"wrote {OUT}")
