"""Where the benches find the outside evaluation data, and what they say when it is not there.

The data is text taken from public repositories (bench/data/real_text/README.md and
bench/data/pii_eval/README.md list the sources, commits, licences and checksums); it is rebuilt locally
into shared/eval/ and never committed. Only the scripts that rebuild it live in the repository.
"""

import argparse
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "eval"
HOW_TO_BUILD = """\
build it with (each --source is a local clone of the named public repository; README.md beside each script
lists them with their commits):
    python bench/data/real_text/extract.py --source LawRefBook/Laws=/path/Laws/.git ...      # real_text/
    python bench/data/real_text/extract_more.py --source usgpo/uslm=/path/uslm/.git ...      # real_text/
    python bench/data/pii_eval/tables.py --git-dir /path/Administrative-divisions-of-China/.git  # pii_eval/ tables
    python bench/data/pii_eval/build.py                                                       # pii_eval/*.jsonl
or pass --data DIR where a copy already lies."""


def add_data_argument(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--data", default=str(DEFAULT),
                    help=f"the evaluation data directory, holding pii_eval/ and real_text/ (default {DEFAULT})")


def find_data(data: str | Path, needs: list[str], bench: str) -> Path | None:
    """The data directory when every file of `needs` (paths relative to it) is there; otherwise None, after
    printing which files are missing and how to build them."""
    root = Path(data)
    missing = [name for name in needs if not (root / name).exists()]
    if not missing:
        return root
    print(f"{bench}: skipped, the evaluation data is not there: {', '.join(str(root / m) for m in missing)}")
    print(f"expected under {root} (text from public repositories, kept out of the repository);")
    print(HOW_TO_BUILD)
    return None
