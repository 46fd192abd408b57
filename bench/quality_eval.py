"""Quality step on real text from outside the team, and on the planted junk.

Real text: every source in real_text/ under shared/eval/ or `--data DIR` (built locally from public
repositories and never committed; bench/data/real_text/README.md lists each one, its origin, licence and how
to rebuild it; without it the bench says so and exits 0).
A file's name starts with its language (`zh_`, `en_`, `ja_`, `ko_`). Statutes (the `.md` files) are judged
twice, at article granularity (one article or section per document) and at chapter granularity (the
articles of one chapter, or of one section where a chapter has sections, with its heading); JSONL sources
are judged one record per document. Every document goes through the default normalize step first, as in a
pipeline. Junk: the planted junk of the demo (bessemer/demo/planted.py: template pages and keyword
stuffing, both languages) for `--junk-seeds` seeds; short template fragments (navigation lines, a cookie
line, an id-and-number record); and short pages that are whole sentences of template (an error page, a login
wall, a region block) or keyword stuffing in one line or in sentences, which the length floor lets through to
the other rules.

Prints, per source, language and granularity, the documents kept, the reasons of the rejected ones and the
lines the line rules removed; per language the keep rate per granularity and over all its text; per junk
kind the drop rate. The quality step runs with its defaults; `--option key=value` (repeatable, Python
literals) changes one, e.g. the paper's length floor: `--option "gopher={'min_doc_words': 50}"`.

    .venv/bin/python bench/quality_eval.py [--data shared/eval] [--option c4=False] [--json]
"""

import argparse
import ast
import json
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.data.eval_data import add_data_argument, find_data
from bessemer.data.document import Document
from bessemer.data.quality.filter import QualityStep
from bessemer.data.text.normalize import NormalizeStep

_ZH_ARTICLE = re.compile(r"^第[零一二三四五六七八九十百千]+条(?:之[一二三四五六七八九十]+)?[\s　]")
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")


def _blocks(md: str) -> list[tuple[int, str, list[str]]]:
    """(heading level, heading line, content lines) for every heading of a Markdown text; level 0 for text
    before the first heading."""
    blocks: list[tuple[int, str, list[str]]] = [(0, "", [])]
    for line in md.splitlines():
        m = _HEADING.match(line)
        if m:
            blocks.append((len(m.group(1)), line, []))
        else:
            blocks[-1][2].append(line)
    return blocks


def _join(lines: list[str]) -> str:
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def statute_units(md: str, lang: str) -> tuple[list[str], list[str]]:
    """(articles, chapters) of a statute in Markdown.

    Chinese (LawRefBook layout): an article starts at a line `第…条`; a chapter is the text under the lowest
    heading that holds articles (a 节 where the 章 has sections). Other languages: an article is a `###`
    block (or a `##` block without `###` ones) without its `#` marks; a chapter a `##` block with its `###`."""
    body = md.split("<!-- INFO END -->")[-1]
    blocks = _blocks(body)
    articles: list[str] = []
    chapters: list[str] = []
    if lang == "zh":
        for _, heading, content in blocks:
            starts = [i for i, line in enumerate(content) if _ZH_ARTICLE.match(line)]
            if not starts:
                continue
            chapters.append(_join([heading, ""] + content[starts[0]:]))
            for a, b in zip(starts, starts[1:] + [len(content)]):
                articles.append(_join(content[a:b]))
        return articles, chapters
    current: list[str] | None = None
    for level, heading, content in blocks:
        if level == 2:
            current = [heading, ""] + content
            chapters.append(current)  # filled in place by the ### blocks that follow
        elif level >= 3 and current is not None:
            current.extend([heading, ""] + content)
        if level >= 2 and _join(content):
            articles.append(_join([heading.lstrip("#").strip()] + content))
    chapter_texts = [_join(c) for c in chapters]
    return articles, [c for c in chapter_texts if len(c.splitlines()) > 1]


def real_sets(root: Path) -> list[tuple[str, str, str, list[Document]]]:
    """(source, language, granularity, documents) for every source file under `root`."""
    sets = []
    for path in sorted(root.iterdir()):
        lang, _, name = path.stem.partition("_")
        if path.suffix == ".md" and path.name != "README.md":
            articles, chapters = statute_units(path.read_text(encoding="utf-8"), lang)
            for unit, texts in (("article", articles), ("chapter", chapters)):
                docs = [Document(f"{path.stem}/{unit}/{i}", t) for i, t in enumerate(texts)]
                sets.append((path.stem, lang, unit, docs))
        elif path.suffix == ".jsonl":
            with path.open(encoding="utf-8") as f:
                docs = [Document(r.get("id", f"{path.stem}/{i}"), r["text"]) for i, r in
                        enumerate(json.loads(line) for line in f if line.strip())]
            sets.append((path.stem, lang, "document", docs))
    return sets


# Short junk, below or near the length floor: template fragments, and template notices that are whole
# sentences (an error page, a login wall, a region block) long enough to pass the floor.
_FRAGMENTS = {
    "en": ["Home | About | Contact", "Page 2 of 17", "Loading...", "Sign in", "Powered by WordPress",
           "Accept cookies and continue", "plain 3-14", "doc 2-7: write to user7@example.com or call 13800138000."],
    "zh": ["首页 | 关于我们 | 联系方式", "第2页 共17页", "加载中……", "登录", "本站由某某提供技术支持",
           "接受并继续", "相关阅读", "编号 2-7：请联系 13800138000。"],
}
_NOTICES = {
    "en": ["Sorry, the page you are looking for does not exist. It may have been moved or deleted. Please check "
           "the address or go back to the home page.",
           "You must sign in to view this content. Please sign in or create a free account to continue reading "
           "this article and the rest of our archive.",
           "This video is not available in your country because of copyright restrictions. Please try again later "
           "or contact the owner of the site.",
           "cheap flights best hotel deals cheap hotels cheap flights best hotel deals cheap hotels cheap flights "
           "best hotel deals cheap hotels",
           "Cheap flights to Paris. Find cheap flights to Paris and compare cheap flights to Paris from all "
           "airlines. Book cheap flights to Paris today and save on cheap flights to Paris."],
    "zh": ["抱歉，您访问的页面不存在或已被删除，请检查网址是否正确，或者返回首页继续浏览。",
           "本文需要登录后才能查看全部内容，请先登录或者注册一个免费账号。",
           "该视频因版权原因在您所在的地区无法播放，请稍后再试或者联系网站管理员。",
           "免费下载 破解版 最新版 高速下载 免费下载 破解版 最新版 高速下载 免费下载 破解版 最新版",
           "北京租房网为您提供北京租房信息、北京租房价格和北京个人租房。找北京租房就上北京租房网，北京租房信息每天更新。"],
}


def junk_sets(seeds: int) -> list[tuple[str, str, str, list[Document]]]:
    """(kind, language, "document", documents): the demo's planted junk for `seeds` seeds, split by kind
    and language, and short template fragments."""
    from bessemer.demo.planted import plant_problems

    by_kind: dict[tuple[str, str], list[Document]] = {}
    for seed in range(seeds):
        for d in plant_problems([], seed=seed, n_dup=0, n_near=0, n_pii=0, n_junk=12, n_js=0, n_html=0):
            lang = "zh" if d["metadata"]["domain"] == "prose_zh" else "en"
            lines = d["text"].splitlines()
            # Stuffing lines are 12 keyword phrases (24+ tokens); template lines are single phrases (at most 14).
            kind = "planted_stuffing" if all(len(line.split()) >= 20 for line in lines) else "planted_template"
            by_kind.setdefault((kind, lang), []).append(Document(f"{d['id']}/{seed}", d["text"]))
    sets = [(kind, lang, "document", docs) for (kind, lang), docs in sorted(by_kind.items())]
    for kind, texts in (("fragment", _FRAGMENTS), ("notice", _NOTICES)):
        for lang, lines in texts.items():
            sets.append((kind, lang, "document", [Document(f"{kind}/{lang}/{i}", t) for i, t in enumerate(lines)]))
    return sets


def judge(docs: list[Document], options: dict) -> tuple[int, Counter, dict]:
    """(documents kept, rejection reasons, lines removed from kept and rejected documents per rule) after the
    default normalize step and the quality step."""
    normalize = NormalizeStep()
    quality = QualityStep(**options)
    copies = [Document(d.id, d.text, dict(d.metadata)) for d in docs]
    kept = sum(1 for _ in quality.run(normalize.run(copies)))
    reasons = Counter(d.metadata["reason"] for d in normalize.rejected + quality.rejected)
    return kept, reasons, quality.stats()["lines_removed"]


def _reasons(counts: Counter) -> str:
    return ", ".join(f"{r.removeprefix('quality.')} {n}" for r, n in counts.most_common())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--junk-seeds", type=int, default=20, help="seeds of the demo's planted junk")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="a QualityStep option as a Python literal, e.g. c4=False")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    add_data_argument(ap)
    args = ap.parse_args()
    if (data := find_data(args.data, ["real_text"], "quality_eval")) is None:
        return
    options = {k: ast.literal_eval(v) for k, v in (o.split("=", 1) for o in args.option)}

    rows = []
    for kind, sets in (("real", real_sets(data / "real_text")), ("junk", junk_sets(args.junk_seeds))):
        for source, lang, unit, docs in sets:
            kept, reasons, lines = judge(docs, options)
            rows.append({"set": kind, "source": source, "lang": lang, "unit": unit, "docs": len(docs),
                         "kept": kept, "rejected": dict(reasons.most_common()), "lines_removed": lines})
    if args.json:
        print(json.dumps({"options": args.option, "rows": rows}, ensure_ascii=False, indent=1))
        return
    print(f"quality options: {', '.join(args.option) or 'defaults'}")
    print(f"{'source':<26} {'lang':<4} {'unit':<8} {'docs':>5} {'kept':>5} {'keep%':>6}  rejected by")
    for r in rows:
        if r["set"] == "real":
            print(f"{r['source']:<26} {r['lang']:<4} {r['unit']:<8} {r['docs']:>5} {r['kept']:>5} "
                  f"{100 * r['kept'] / r['docs']:>5.1f}%  {_reasons(Counter(r['rejected']))}")
            if r["lines_removed"]:
                print(f"{'':<26} {'':<4} {'':<8} {'':>5} {'':>5} {'':>6}  lines removed: "
                      f"{', '.join(f'{k} {v}' for k, v in r['lines_removed'].items())}")
    for lang in sorted({r["lang"] for r in rows if r["set"] == "real"}):
        # Per unit, then all of the language's text with its statutes cut into articles, or into chapters.
        for label, units in (("article", {"article"}), ("chapter", {"chapter"}), ("document", {"document"}),
                             ("all, statutes by article", {"article", "document"}),
                             ("all, statutes by chapter", {"chapter", "document"})):
            sel = [r for r in rows if r["set"] == "real" and r["lang"] == lang and r["unit"] in units]
            docs, kept = sum(r["docs"] for r in sel), sum(r["kept"] for r in sel)
            if docs and len({r["unit"] for r in sel}) == len(units):
                print(f"keep {lang} {label:<25} {kept:>4}/{docs:<4} = {100 * kept / docs:5.1f}%")
    print(f"{'junk':<26} {'lang':<4} {'':<8} {'docs':>5} {'drop':>5} {'drop%':>6}  rejected by")
    for r in rows:
        if r["set"] == "junk":
            dropped = r["docs"] - r["kept"]
            print(f"{r['source']:<26} {r['lang']:<4} {'':<8} {r['docs']:>5} {dropped:>5} "
                  f"{100 * dropped / r['docs']:>5.1f}%  {_reasons(Counter(r['rejected']))}")
    # The acceptance figures of issue 17, one per line: keep >= 0.95 per language at either granularity,
    # every planted junk document dropped.
    for lang in ("zh", "en"):
        for unit in ("article", "chapter"):
            sel = [r for r in rows if r["set"] == "real" and r["lang"] == lang and r["unit"] in (unit, "document")]
            print(f"quality_eval keep_{lang}_by_{unit} {sum(r['kept'] for r in sel) / sum(r['docs'] for r in sel):.3f}")
    planted = [r for r in rows if r["set"] == "junk" and r["source"].startswith("planted")]
    dropped = sum(r["docs"] - r["kept"] for r in planted) / sum(r["docs"] for r in planted)
    print(f"quality_eval planted_junk_dropped {dropped:.3f}")


if __name__ == "__main__":
    main()
