"""docs/architecture.md's layout block names every module of bessemer once, under its own folder, and nothing
that is not there: the map stays true to the tree."""

import re
from collections import Counter
from pathlib import Path

import bessemer

ROOT = Path(bessemer.__file__).parent
DOC = ROOT.parent / "docs" / "architecture.md"


def documented(text: str) -> Counter:
    """(folder, file) pairs the layout block names: a line `bessemer/x/y/` opens folder x/y, an indented
    `name.py` starts a module's entry."""
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    named: Counter = Counter()
    folder = None
    for line in block.splitlines():
        header = re.match(r"^bessemer/(\S*)", line)
        if header:
            folder = header.group(1).rstrip("/")
            continue
        entry = re.match(r"^  (\S+\.py)\b", line)
        if entry and folder is not None:
            named[(folder, entry.group(1))] += 1
    return named


def actual() -> set:
    return {(str(p.parent.relative_to(ROOT)).replace(".", ""), p.name) for p in ROOT.rglob("*.py")
            if p.name != "__init__.py"}


def test_every_module_listed_once_and_only_real_ones():
    named = documented(DOC.read_text(encoding="utf-8"))
    listed = {k for k in named if k[1] != "__init__.py"}
    modules = actual()
    missing = sorted(f"{d}/{f}".lstrip("/") for d, f in modules - listed)
    extra = sorted(f"{d}/{f}".lstrip("/") for d, f in listed - modules)
    twice = sorted(f"{d}/{f}".lstrip("/") for (d, f), n in named.items() if n > 1)
    assert not (missing or extra or twice), f"docs/architecture.md layout: missing {missing}, not in the tree " \
                                            f"{extra}, listed more than once {twice}"


def test_the_check_can_fail():
    text = "## Layout\n\n```\nbessemer/\n  cli.py   x\nbessemer/model/\n  llama.py  y\n  llama.py  z\n```\n"
    assert documented(text) == Counter({("", "cli.py"): 1, ("model", "llama.py"): 2})
