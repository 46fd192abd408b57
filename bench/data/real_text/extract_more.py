"""Rebuild the held-out statutes and the Japanese and Korean documentation pages
(into shared/eval/real_text/, never committed).

The same way as extract.py (pinned commits read with `git show`; README.md lists each output and its
licence), for the sources it does not cover:

    python bench/data/real_text/extract_more.py --source LawRefBook/Laws=/tmp/Laws/.git \
        --source usgpo/uslm=/tmp/uslm/.git --source python/python-docs-ja=/tmp/ja/.git \
        --source python/python-docs-ko=/tmp/ko/.git [--out DIR]
"""

import argparse
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from extract import OUT, PY_DOCS, _po_entries, write_jsonl  # noqa: E402  (the sibling script)

SOURCES = {
    "LawRefBook/Laws": "2f4c5c23716267af9dbebbbbd6cbbf732b101981",
    "usgpo/uslm": "100338992150c276aae5544d01d9b821a27eb383",
    "python/python-docs-ja": "7eb90aaa6d3395bcfe01801ceb5e620eedf2356a",  # branch 3.11 (Python 3.13 catalogues)
    "python/python-docs-ko": "d0c58403de225366b23d0cafd8b86508186c8c8a",  # branch 3.13
}
# The Constitution and the General Provisions of the Civil Code: Chinese statutes that were not looked at
# while the quality thresholds were chosen.
ZH_STATUTES = {"zh_statute_constitution.md": "宪法/宪法.md", "zh_statute_civil_code_general.md": "民法典/总则.md"}
_USLM = "{http://schemas.gpo.gov/xml/uslm}"
_LEVELS = {"subsection", "paragraph", "subparagraph", "clause", "subclause", "item", "subitem"}
_SKIP = {"toc", "sidenote", "page", "notes", "note"}


def show(dirs: dict[str, str], repo: str, path: str) -> str:
    out = subprocess.run(["git", "--git-dir", dirs[repo], "show", f"{SOURCES[repo]}:{path}"],
                         capture_output=True, check=True)
    return out.stdout.decode("utf-8")


def _tag(e: ET.Element) -> str:
    return e.tag.removeprefix(_USLM)


def _flat(e: ET.Element) -> str:
    """The element's text, whitespace folded, one line per paragraph (`<p>`), without the page markers
    ("128 STAT. 3097") printed inside it or the centred paragraphs that head the next subdivision."""
    parts: list[str] = []

    def walk(node):
        if _tag(node) in _SKIP or (_tag(node) == "p" and "centered" in node.get("class", "")):
            return
        if _tag(node) == "p":
            parts.append("\n")
        parts.append(node.text or "")
        for child in node:
            walk(child)
            parts.append(child.tail or "")

    walk(e)
    lines = (" ".join(line.split()) for line in "".join(parts).split("\n"))
    return "\n".join(line for line in lines if line)


def _level_lines(e: ET.Element, out: list[str]) -> None:
    """One line per subsection, paragraph, ...: its number, heading and text; a table one line per row."""
    head: list[str] = []
    for child in e:
        tag = _tag(child)
        if tag in ("num", "heading"):
            head.append(_flat(child))
        elif tag in ("content", "chapeau", "continuation"):
            out.append(" ".join(head + [_flat(child)]))
            head = []
        elif tag in _LEVELS or tag == "table":
            if head:
                out.append(" ".join(head))
                head = []
            if tag == "table":
                out.extend("| " + " | ".join(_flat(td) for td in tr) + " |" for tr in child.iter(_USLM + "tr"))
            else:
                _level_lines(child, out)
        elif tag not in _SKIP and _flat(child):
            head.append(_flat(child))
    if head:
        out.append(" ".join(head))


def usc_title(xml: str) -> str:
    """A positive-law title enacted by a public law (USLM XML) as Markdown: `## Chapter` per chapter, `### §`
    per section, one line per subsection or paragraph. Tables of contents and page markers are left out."""
    title = ET.fromstring(xml).find(f".//{_USLM}title")
    md = [f"# {_flat(title.find(_USLM + 'num'))}{_flat(title.find(_USLM + 'heading'))}"]
    for chapter in title.iter(_USLM + "chapter"):
        md.append(f"## {_flat(chapter.find(_USLM + 'num'))}{_flat(chapter.find(_USLM + 'heading'))}")
        for section in chapter.iter(_USLM + "section"):
            lines: list[str] = []
            body = ET.Element("body")
            body.extend(c for c in section if _tag(c) not in ("num", "heading"))
            _level_lines(body, lines)
            md.append(f"### {_flat(section.find(_USLM + 'num'))} {_flat(section.find(_USLM + 'heading'))}")
            md.append("\n".join(line.replace(".— ", ".—") for line in lines if line))
    return "\n\n".join(md) + "\n"


def py_docs(dirs: dict[str, str], repo: str, script: str) -> list[dict]:
    """The translated prose paragraphs (source paragraph of 40+ characters, translation in `script`) of the
    pages extract.py takes from the Chinese catalogues, one document per page."""
    docs = []
    for page in PY_DOCS:
        paras = [b for a, b in _po_entries(show(dirs, repo, f"{page}.po")) if len(a) >= 40 and re.search(script, b)]
        docs.append({"id": f"pydocs/{page}", "title": page, "text": "\n\n".join(paras)})
    return docs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", action="append", default=[], metavar="OWNER/NAME=GITDIR")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    dirs = dict(s.split("=", 1) for s in args.source)
    if missing := [name for name in SOURCES if name not in dirs]:
        raise SystemExit(f"missing --source for {', '.join(missing)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, path in ZH_STATUTES.items():
        (out / name).write_text(show(dirs, "LawRefBook/Laws", path), encoding="utf-8")
    xml = show(dirs, "usgpo/uslm", "previous/sample-files/113publ287-uslm.xml")
    (out / "en_statute_usc_title54.md").write_text(usc_title(xml), encoding="utf-8")
    gh = "https://github.com/"
    write_jsonl(out / "ja_python_docs.jsonl", py_docs(dirs, "python/python-docs-ja", "[\u3040-\u30ff]"),
                gh + "python/python-docs-ja")
    write_jsonl(out / "ko_python_docs.jsonl", py_docs(dirs, "python/python-docs-ko", "[\uac00-\ud7af]"),
                gh + "python/python-docs-ko")


if __name__ == "__main__":
    main()
