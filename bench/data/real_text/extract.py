"""Write the real-text files (into shared/eval/real_text/, never committed) from the public repositories they
were taken from.

Each source is read at a pinned commit with `git show`, so the output is the same on every run. Clone the
repositories listed in SOURCES and pass each clone's git directory:

    git clone https://github.com/LawRefBook/Laws /tmp/Laws   # ... one clone per entry of SOURCES
    python bench/data/real_text/extract.py --source LawRefBook/Laws=/tmp/Laws/.git ... [--out DIR]

Needs `mwparserfromhell` (pip install mwparserfromhell) for the English Wikipedia pages, which are stored
upstream as wikitext. README.md beside this file lists what each output holds and its licence.
"""

import argparse
import hashlib
import json
import re
import subprocess
from pathlib import Path

OUT = Path(__file__).resolve().parents[3] / "shared" / "eval" / "real_text"
SOURCES = {
    "LawRefBook/Laws": "2f4c5c23716267af9dbebbbbd6cbbf732b101981",
    "phoenhome/united-states-constitution": "c17326c764006e305e083cfad92b454ea0fcb1d8",
    "quqixun/ReadWiki-ZH": "6145fc6570ebda58af402dacbcc218cf68eae362",
    "spencermountain/wtf_wikipedia": "015abc2dce21856c2b0640d47e9337a091eaacfe",
    "python/python-docs-zh-cn": "693cf6be2bc17f3d50ee21fe207c6964f3fab130",  # branch 3.13
}

# Chinese Wikipedia articles (zhwiki dump 20200220, as extracted to plain text by ReadWiki-ZH): subject
# articles of several fields plus three biographies; file number -> title.
ZH_WIKI = {
    "100": "农业", "13": "数学", "25": "计算机科学", "130": "Linux内核", "74": "化学", "70": "天文学",
    "76": "地理学", "192": "亳州市", "306": "辽宁省", "235": "上海市", "53": "经济学", "317": "人工智能",
    "86": "中医学", "81": "生物学", "297": "教育", "159": "植物学", "79": "气象学", "87": "海洋学",
    "78": "地质学", "57": "法学", "331": "旅游", "48": "电影", "158": "诺贝尔奖", "210": "计算机网络",
    "106": "统一资源定位符", "114": "数据结构", "258": "高德纳", "133": "林纳斯·托瓦兹", "333": "邓丽君",
}
# English Wikipedia pages kept as wikitext in wtf_wikipedia's test cache (English ones only).
EN_WIKI = [
    "anarchism", "toronto", "Bodmin", "Arts_Club_of_Chicago", "Dollar-Point,-California", "Senate_of_Pakistan",
    "Direct-representation", "raith_rovers", "Elizabeth-Gilbert", "Harry-McPherson", "toronto_star",
    "History-of-rugby-union-matches-between-Scotland-and-Wales", "Alsea-(company)",
    "Routing-and-Remote-Access-Service", "Goryeo-ware", "Canton-of-Etaples", "University-of-Nevada,-Reno-Arboretum",
]
# Python documentation pages: the English source paragraphs (msgid) and their Chinese translation (msgstr).
PY_DOCS = [
    "tutorial/appetite", "tutorial/interpreter", "tutorial/introduction", "tutorial/controlflow",
    "tutorial/datastructures", "tutorial/modules", "tutorial/inputoutput", "tutorial/errors", "tutorial/classes",
    "tutorial/stdlib", "tutorial/stdlib2", "tutorial/venv", "tutorial/whatnow", "tutorial/floatingpoint",
    "faq/general", "howto/ipaddress",
]


class Repos:
    def __init__(self, dirs: dict[str, str]):
        missing = [name for name in SOURCES if name not in dirs]
        if missing:
            raise SystemExit(f"missing --source for {', '.join(missing)}")
        self.dirs = dirs

    def show(self, repo: str, path: str) -> str:
        out = subprocess.run(["git", "--git-dir", self.dirs[repo], "show", f"{SOURCES[repo]}:{path}"],
                             capture_output=True, check=True)
        return out.stdout.decode("utf-8")

    def ls(self, repo: str, path: str) -> list[str]:
        out = subprocess.run(["git", "--git-dir", self.dirs[repo], "ls-tree", "-r", "--name-only", "-z",
                              SOURCES[repo], path], capture_output=True, check=True)
        return sorted(p for p in out.stdout.decode("utf-8").split("\0") if p)


def _md_links(text: str) -> str:
    """[text](url) -> text; **bold** / *italic* markers dropped."""
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)", "", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"\*{1,2}([^*]+)\*{1,2}", r"\1", text)


def constitution(repos: Repos) -> str:
    """The Constitution of the United States and its 27 amendments, links removed. The signature block
    (the names of the delegates under Article VII) is left out: it is a list of persons, not statute text."""
    md = repos.show("phoenhome/united-states-constitution", "United States Constitution.md")
    lines, skip = [], False
    for line in md.splitlines():
        if line.startswith("> [*George Washington*]"):
            skip = True  # the signers' block runs until the amendments heading
        if line.startswith("## Amendments"):
            skip = False
        if skip or line.startswith("![](") or line.strip() == "---":
            continue
        lines.append(_md_links(line))
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip() + "\n"


def zh_wiki(repos: Repos) -> list[dict]:
    docs = []
    for num, title in ZH_WIKI.items():
        text = repos.show("quqixun/ReadWiki-ZH", f"docs/words_txt/{num}.txt").strip()
        assert text.splitlines()[0].strip() == title, (num, text[:20])
        docs.append({"id": f"zhwiki/{title}", "title": title, "text": re.sub(r"\n{3,}", "\n\n", text)})
    return docs


def _strip_wikitext(wikitext: str) -> str:
    import mwparserfromhell

    code = mwparserfromhell.parse(wikitext)
    for tag in code.filter_tags(recursive=False, matches=lambda n: str(n.tag).lower() in ("ref", "gallery")):
        try:
            code.remove(tag)
        except ValueError:
            pass
    text = code.strip_code(normalize=True, collapse=True)
    text = re.sub(r"<ref[^>]*/>|<ref[^>]*>.*?</ref>|<[^>]+>", "", text, flags=re.DOTALL)
    keep = [ln.rstrip() for ln in text.splitlines()
            if not re.match(r"\s*(thumb|mini|left|right|upright)\|", ln) and not ln.strip().startswith("|")]
    text = "\n".join(keep)
    text = re.sub(r"\(\s*[,;]?\s*\)", "", text)  # pronunciation templates leave "( , )"
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def en_wiki(repos: Repos) -> list[dict]:
    return [{"id": f"enwiki/{page}", "title": page.replace("_", " ").replace("-", " "),
             "text": _strip_wikitext(repos.show("spencermountain/wtf_wikipedia", f"tests/cache/{page}.txt"))}
            for page in EN_WIKI]


def _po_entries(po: str) -> list[tuple[str, str]]:
    """(msgid, msgstr) pairs of a gettext catalogue, both unquoted; the header and untranslated entries skipped."""
    entries, cur, field = [], {"msgid": "", "msgstr": ""}, None

    def flush():
        if cur["msgid"] and cur["msgstr"]:
            entries.append((cur["msgid"], cur["msgstr"]))

    for line in po.splitlines():
        if line.startswith("msgid "):
            flush()
            cur, field = {"msgid": "", "msgstr": ""}, "msgid"
            line = line[6:]
        elif line.startswith("msgstr "):
            field = "msgstr"
            line = line[7:]
        elif not line.startswith('"'):
            field = None if not line.strip() or line.startswith("#") else field
            continue
        if field and line.startswith('"'):
            cur[field] += json.loads(line)
    flush()
    return entries


def py_docs(repos: Repos) -> tuple[list[dict], list[dict]]:
    en, zh = [], []
    for page in PY_DOCS:
        pairs = [(a, b) for a, b in _po_entries(repos.show("python/python-docs-zh-cn", f"{page}.po"))
                 if len(a) >= 40 and re.search(r"[\u4e00-\u9fff]", b)]  # prose paragraphs, translated
        en.append({"id": f"pydocs/{page}", "title": page, "text": "\n\n".join(a for a, _ in pairs)})
        zh.append({"id": f"pydocs/{page}", "title": page, "text": "\n\n".join(b for _, b in pairs)})
    return en, zh


def zh_cases(repos: Repos) -> list[dict]:
    docs = []
    for path in repos.ls("LawRefBook/Laws", "案例"):
        if path.endswith(".md") and not path.endswith("_index.md"):
            text = repos.show("LawRefBook/Laws", path).replace("<!-- INFO END -->", "")
            docs.append({"id": f"lawrefbook/{path[:-3]}", "title": Path(path).stem,
                         "text": re.sub(r"\n{3,}", "\n\n", text).strip()})
    return docs


def write_jsonl(path: Path, docs: list[dict], source: str) -> None:
    with path.open("w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({**d, "source": source}, ensure_ascii=False) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", action="append", default=[], metavar="OWNER/NAME=GITDIR")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    repos = Repos(dict(s.split("=", 1) for s in args.source))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    gh = "https://github.com/"
    (out / "zh_statute_criminal_law.md").write_text(repos.show("LawRefBook/Laws", "刑法/刑法.md"), encoding="utf-8")
    (out / "en_us_constitution.md").write_text(constitution(repos), encoding="utf-8")
    write_jsonl(out / "zh_wikipedia.jsonl", zh_wiki(repos), gh + "quqixun/ReadWiki-ZH")
    write_jsonl(out / "en_wikipedia.jsonl", en_wiki(repos), gh + "spencermountain/wtf_wikipedia")
    en, zh = py_docs(repos)
    write_jsonl(out / "en_python_docs.jsonl", en, gh + "python/python-docs-zh-cn")
    write_jsonl(out / "zh_python_docs.jsonl", zh, gh + "python/python-docs-zh-cn")
    write_jsonl(out / "zh_court_cases.jsonl", zh_cases(repos), gh + "LawRefBook/Laws")
    for f in sorted(out.glob("*.md")) + sorted(out.glob("*.jsonl")):
        print(f"{hashlib.sha256(f.read_bytes()).hexdigest()[:16]}  {f.stat().st_size:>8}  {f.name}")


if __name__ == "__main__":
    main()
