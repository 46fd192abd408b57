"""Lang step on text none of us wrote: accuracy per language and per length, code detection, documents/s.

Three sets, each used when it is there:
- real text: shared/eval/real_text (or `--data DIR`; bench/data/real_text/README.md says where it comes from):
  the JSONL sources one record per document (Wikipedia, Python documentation in four languages, court
  summaries), the statutes one article or section per document (short text) and one chapter per document.
  A file's name starts with its language.
- translation catalogs: the gettext `.mo` files of the operating system's packages (`--locale-dir`, default
  /usr/share/locale), messages of 60-300 characters, `--per-lang` per language for 22 languages and as many
  English source strings: short, real, many languages. Placeholders (`%s`, `{0}`) are removed.
- code: the standard library's `.py` files (expected label "code"), whole files.

Every document goes through the lang step with its defaults (`--option key=value`, Python literals, changes
one). Prints accuracy per set and language, the confusions, and documents/s of the step in this process
(model loaded first, not timed; best of `--repeat`), against the anchor measured in the same run: the model
alone on the first `sample_chars` characters.

    .venv/bin/python bench/lang_eval.py [--data shared/eval] [--per-lang 120] [--option sample_chars=500]
"""

import argparse
import ast
import gettext
import random
import re
import sys
import sysconfig
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.data.eval_data import add_data_argument
from bench.quality_eval import real_sets
from bessemer.data.document import Document
from bessemer.data.text.lang import LangStep, identifier

# Locale directory -> the label the model should give.
CATALOG_LANGS = {"de": "de", "fr": "fr", "es": "es", "it": "it", "pt_BR": "pt", "ru": "ru", "uk": "uk", "ja": "ja",
                 "zh_CN": "zh", "ko": "ko", "nl": "nl", "pl": "pl", "sv": "sv", "tr": "tr", "vi": "vi", "cs": "cs",
                 "el": "el", "fi": "fi", "da": "da", "hu": "hu", "id": "id", "ro": "ro"}
_PLACEHOLDER = re.compile(r"%[-#+ 0-9.*]*[sdiufxXc]|%\([a-z_]+\)[sd]|\{\w*\}|_")


def _clean(msg: str) -> str:
    return " ".join(_PLACEHOLDER.sub(" ", msg).split())


def catalog_sets(locale_dir: Path, per_lang: int, seed: int = 0) -> list[tuple[str, str, list[Document]]]:
    """(set name, expected label, documents) of translated messages, and of their English sources."""
    rng = random.Random(seed)
    sets, english = [], set()
    for loc, label in CATALOG_LANGS.items():
        pool = set()
        for mo in sorted((locale_dir / loc / "LC_MESSAGES").glob("*.mo")):
            try:
                with mo.open("rb") as f:
                    catalog = gettext.GNUTranslations(f)._catalog
            except (OSError, UnicodeDecodeError, ValueError):
                continue
            for src, msg in catalog.items():
                if not isinstance(src, str) or not isinstance(msg, str) or not src or msg == src:
                    continue
                msg, src = _clean(msg), _clean(src)
                if 60 <= len(msg) <= 300 and "\\" not in msg:
                    pool.add(msg)
                if 60 <= len(src) <= 300:
                    english.add(src)
        texts = sorted(pool)
        rng.shuffle(texts)
        if texts:
            sets.append((f"catalog/{loc}", label, [Document(f"{loc}/{i}", t) for i, t in enumerate(texts[:per_lang])]))
    texts = sorted(english)
    rng.shuffle(texts)
    if texts:
        sets.append(("catalog/en", "en", [Document(f"en/{i}", t) for i, t in enumerate(texts[:per_lang])]))
    return sets


def code_set() -> tuple[str, str, list[Document]]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    docs = [Document(p.name, p.read_text(encoding="utf-8", errors="replace")) for p in sorted(stdlib.glob("*.py"))]
    return "stdlib *.py", "code", docs


def judge(step: LangStep, docs: list[Document], label: str, repeat: int) -> tuple[int, Counter, float, float]:
    """(right, labels given, seconds of the step, seconds of the anchor), best of `repeat` timings. The anchor
    is the model alone on the first `sample_chars` characters, whitespace folded: no code detection, no
    sampling of the middle, no clean-up."""
    model, n = identifier(step.languages), step.sample_chars
    seconds = anchor = float("inf")
    for _ in range(repeat):
        got = Counter()
        t = time.perf_counter()
        for doc in docs:
            got[step.classify(doc.text)[0]] += 1
        seconds = min(seconds, time.perf_counter() - t)
        t = time.perf_counter()
        for doc in docs:
            model.classify(" ".join(doc.text[: 2 * n].split())[:n])
        anchor = min(anchor, time.perf_counter() - t)
    return got[label], got, seconds, anchor


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_data_argument(ap)
    ap.add_argument("--locale-dir", default="/usr/share/locale", help="gettext catalogs (default /usr/share/locale)")
    ap.add_argument("--per-lang", type=int, default=120, help="catalog messages per language (default 120)")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="a lang step option")
    ap.add_argument("--repeat", type=int, default=3, help="timings per set; the best is reported (default 3)")
    args = ap.parse_args()
    options = {k: ast.literal_eval(v) for k, _, v in (o.partition("=") for o in args.option)}
    step = LangStep(**options)
    identifier(step.languages)  # load the model before timing

    groups: list[tuple[str, str, list[tuple[str, str, list[Document]]]]] = []
    real = Path(args.data) / "real_text"
    if real.is_dir():
        rows = [(f"{src}/{unit}", lang, docs) for src, lang, unit, docs in real_sets(real)]
        groups.append(("real_long", "real text, documents and chapters", [r for r in rows if not r[0].endswith("/article")]))
        groups.append(("real_articles", "real text, statute articles", [r for r in rows if r[0].endswith("/article")]))
    else:
        print(f"lang_eval: no {real}; real-text rows skipped (bench/data/real_text/README.md builds it)")
    catalogs = catalog_sets(Path(args.locale_dir), args.per_lang)
    if catalogs:
        groups.append(("catalogs", f"translation catalogs ({args.locale_dir}, 60-300 characters)", catalogs))
    else:
        print(f"lang_eval: no gettext catalogs under {args.locale_dir}; short-text rows skipped")
    groups.append(("code", "code", [code_set()]))

    print(f"lang options: {', '.join(args.option) or 'defaults'}")
    for key, title, sets in groups:
        print(f"\n{title}")
        print(f"{'set':<40} {'want':<5} {'docs':>5} {'right':>5} {'acc%':>6} {'docs/s':>8}  other labels")
        total = right = 0
        chars = seconds = anchor = 0.0
        for name, label, docs in sets:
            ok, got, dt, da = judge(step, docs, label, args.repeat)
            total, right, seconds, anchor = total + len(docs), right + ok, seconds + dt, anchor + da
            chars += sum(len(d.text) for d in docs)
            others = ", ".join(f"{k} {v}" for k, v in got.most_common() if k != label)
            print(f"{name:<40} {label:<5} {len(docs):>5} {ok:>5} {100 * ok / len(docs):6.1f} "
                  f"{len(docs) / dt:8.0f}  {others}")
        print(f"{'all':<40} {'':<5} {total:>5} {right:>5} {100 * right / total:6.1f} {total / seconds:8.0f}  "
              f"(mean {chars / total:,.0f} characters a document)")
        print(f"lang_eval {key}_accuracy {right / total:.4f} docs_per_s {total / seconds:.0f} "
              f"model_alone_docs_per_s {total / anchor:.0f} ratio {anchor / seconds:.2f}")


if __name__ == "__main__":
    main()
