"""The demo's raw corpus: the clean documents of corpus.py plus the problems a curation pipeline exists for,
planted deterministically from the seed so that the demo can show (and its test can check) each one caught.

| planted | what | caught by |
| --- | --- | --- |
| exact duplicates | copies with case and whitespace edits | `dedup.exact_duplicate` |
| near duplicates | copies with about one word in 30 dropped or replaced | `dedup.near_duplicate` |
| PII | emails, CN mobiles, resident IDs (MOD 11-2), UnionPay cards (Luhn), addresses, in prose | `pii` masks |
| template junk | download/welcome lines, cookie banners, keyword stuffing | `quality.*` |
| JavaScript-only pages | SPA shells, script-only bodies (HTML) | `extract.js_rendered` |
| HTML articles | real prose inside navigation and footer (HTML) | kept: `extract` keeps the text |
| benchmark items | bench/'s items, each once: alone, or quoted inside a prose document | `decontaminate` |

Each domain is one input file, and a copy lands in its original's file, so dedup catches it whether it runs
across shards or within one.

Every planted document's `metadata.planted` names its kind (and `copy_of` the original of a copy), so the
rejected and kept output can be checked against what went in; the planted PII values are listed in
`planted_pii.json` beside the raw directory.
"""

import html
import json
import random
from pathlib import Path

PII_MANIFEST = "planted_pii.json"
PLANTED_KINDS = ("exact_duplicate", "near_duplicate", "pii", "junk", "js_only", "html_article", "benchmark")
BENCH_DIR = Path(__file__).with_name("bench")  # the demo's benchmark task files (the decontaminate step's)


def resident_id(rng: random.Random) -> str:
    """An 18-character resident ID: Beijing Chaoyang region, a 1970-1999 birth date, MOD 11-2 check character."""
    body = f"110105{rng.randint(1970, 1999)}{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}{rng.randint(0, 999):03d}"
    weights = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
    return body + "10X98765432"[sum(int(c) * w for c, w in zip(body, weights)) % 11]


def bank_card(rng: random.Random) -> str:
    """A 16-digit UnionPay (62...) number whose last digit makes the Luhn sum a multiple of 10."""
    body = "622202" + "".join(str(rng.randint(0, 9)) for _ in range(9))
    total = 0
    for i, c in enumerate(reversed(body)):  # the check digit will sit right of body: double every other from here
        d = int(c) * (2 if i % 2 == 0 else 1)
        total += d - 9 if d > 9 else d
    return body + str((10 - total % 10) % 10)


def _pii(rng: random.Random, n: int, zh: bool) -> tuple[str, dict]:
    email = f"user{n:03d}.{rng.choice(['wang', 'li', 'zhang', 'chen'])}@example{n % 7}.com"
    phone = f"1{rng.choice('3589')}{rng.randint(0, 9)}{rng.randint(0, 99_999_999):08d}"
    rid, card = resident_id(rng), bank_card(rng)
    street = rng.choice(["建国路", "长安街", "中关村大街", "望京街"])
    address = f"北京市朝阳区{street}{rng.randint(1, 200)}号"
    if zh:
        text = (f"如有疑问请联系经办人，邮箱 {email}，手机 {phone}，身份证号 {rid}，"
                f"退款银行卡号 {card}，通讯地址{address}。")
    else:
        text = (f"Questions about this section go to {email} or call {phone}; reviewer ID {rid}, "
                f"refund card {card}, office at {address}.")
    return text, {"EMAIL": email, "PHONE": phone, "ID_NUMBER": rid, "BANK_CARD": card, "ADDRESS": address}


def _near_copy(text: str, rng: random.Random) -> str:
    """About one word in 60 dropped and one in 60 replaced by "x": a near duplicate (estimated Jaccard of word
    5-grams around 0.8), shorter than its original so that dedup keeps the original."""
    words = text.split(" ")
    for _ in range(max(1, len(words) // 60)):
        del words[rng.randrange(len(words))]
        words[rng.randrange(len(words))] = "x"
    return " ".join(words)


_JUNK_ZH = ["点击下载", "欢迎访问本站", "免费下载最新版", "点击这里立即注册", "欢迎访问官方网站",
            "下载客户端领取红包", "本站所有资源均来自网络"]
_JUNK_EN = ["This website uses cookies to ensure you get the best experience. Accept all cookies",
            "Click here to download now", "Welcome to our website", "Subscribe to our newsletter",
            "Sign up for free today", "Accept cookies"]


def _junk(rng: random.Random, zh: bool) -> str:
    kind = rng.choice(["template", "stuffing"])
    if kind == "stuffing":  # one keyword phrase repeated: the Gopher repetition rules' target
        words = ["免费下载 破解版 最新版 高速下载"] if zh else ["cheap flights", "best hotel deals", "cheap hotels"]
        return "\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(rng.randint(6, 12)))
    lines = _JUNK_ZH if zh else _JUNK_EN
    return "\n".join(rng.choice(lines) for _ in range(rng.randint(8, 16)))


def _js_page(rng: random.Random, n: int) -> str:
    bundle = "".join(f"function f{i}(a,b){{return a*{i}+b}};" for i in range(rng.randint(150, 300)))
    if n % 2 == 0:  # an SPA shell: an empty mount point, a bundle and a noscript notice
        return (f"<!doctype html><html><head><title>App {n}</title></head><body>"
                f"<noscript>You need to enable JavaScript to run this app.</noscript><div id=\"root\"></div>"
                f"<script>{bundle}</script><script src=\"/static/js/main.{n:04x}.js\"></script></body></html>")
    return f"<html><head><title>Page {n}</title></head><body><script>{bundle}</script></body></html>"


def _html_article(title: str, text: str) -> str:
    paras = "".join(f"<p>{html.escape(p)}</p>" for p in text.split("\n") if p.strip())
    return (f"<!doctype html><html><head><title>{html.escape(title)}</title></head><body>"
            f"<nav><a href=\"/\">Home</a> | <a href=\"/docs\">Docs</a> | <a href=\"/about\">About</a></nav>"
            f"<article><h1>{html.escape(title)}</h1>{paras}</article>"
            f"<footer>Copyright 2024 Example Docs. All rights reserved. <a href=\"/privacy\">Privacy</a></footer>"
            f"</body></html>")


def _article_texts(n: int) -> list[tuple[str, str]]:
    """Long module docstrings of standard-library packages (not in the corpus, which reads only top-level
    modules): English prose for the HTML articles that duplicates nothing."""
    import ast
    import sysconfig

    found = []
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*/*.py")):
        if "test" in path.parts[-2] or len(found) >= n:
            continue
        try:
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        if doc and 1000 < len(doc) < 6000 and doc.count(">>>") == 0:
            found.append((f"{path.parent.name}/{path.name}", doc))
    return found


def benchmark_passages() -> list[tuple[str, str, str, str]]:
    """(benchmark, item id, the item as its benchmark prints it, the item as prose quotes it: its fields alone)
    for every item of the task files in bench/."""
    from bessemer.benchmarks.tasks import expand
    from bessemer.data.decont.index import item_texts

    return [(task.name, item, texts[0], texts[-1]) for task in expand([BENCH_DIR])
            for item, texts in item_texts(task)]


def _plant_benchmark(out: list[dict], taken: set[str], rng: random.Random) -> list[dict]:
    """Every benchmark item once: the even ones alone (new documents), the odd ones quoted at a line boundary of
    a prose document of their language that no other planted problem touches (`taken`)."""
    hosts = {domain: [d for d in out if d["metadata"]["domain"] == domain and len(d["text"]) > 100
                      and "planted" not in d["metadata"] and d["id"] not in taken]
             for domain in ("prose_en", "prose_zh")}
    new = []
    for k, (bench, item, printed, quoted) in enumerate(benchmark_passages()):
        domain = "prose_zh" if bench == "demo_zh" else "prose_en"
        meta = {"planted": "benchmark", "benchmark": bench, "item": item}
        if k % 2 == 0:
            new.append({"id": f"web/benchmark/{k:03d}", "text": printed,
                        "metadata": {"domain": domain, "source": "planted", **meta, "passage": printed}})
        else:
            host = hosts[domain].pop(rng.randrange(len(hosts[domain])))
            lines = host["text"].split("\n")
            lines.insert(rng.randint(1, len(lines)), quoted)
            host["text"] = "\n".join(lines)
            host["metadata"].update(meta, passage=quoted)
    return new


def plant_problems(docs: list[dict], seed: int = 0, n_dup: int = 12, n_near: int = 12, n_pii: int = 12,
                   n_junk: int = 12, n_js: int = 6, n_html: int = 6) -> list[dict]:
    """The clean `docs` plus planted problems (new documents, and PII written into some of the originals);
    the same docs and seed give the same result. Counts are per kind, spread over the prose domains."""
    rng = random.Random(seed)
    out = [dict(d, metadata=dict(d["metadata"])) for d in docs]
    prose = [d for d in out if d["metadata"]["domain"] != "code"]
    zh = [d for d in prose if d["metadata"]["domain"] == "prose_zh" and len(d["text"]) > 100]
    en = [d for d in prose if d["metadata"]["domain"] == "prose_en" and len(d["text"]) > 800]
    code = [d for d in out if d["metadata"]["domain"] == "code" and len(d["text"]) > 800]

    def new(kind: str, i: int, text: str, domain: str, **meta) -> dict:
        return {"id": f"web/{kind}/{i:03d}", "text": text,
                "metadata": {"domain": domain, "source": "planted", "planted": kind, **meta}}

    planted = []
    originals = rng.sample(en, n_dup // 2 + n_near + n_pii // 2)  # disjoint: a copy of a document with PII would differ
    n_en_dup = n_dup // 2
    dup_en, near_en, pii_en = originals[:n_en_dup], originals[n_en_dup:n_en_dup + n_near], originals[-(n_pii // 2):]
    zh_picks = rng.sample(zh, n_dup // 4 + n_pii // 2)
    dup_zh, pii_zh = zh_picks[:n_dup // 4], zh_picks[n_dup // 4:]
    for i, d in enumerate(dup_en + dup_zh + rng.sample(code, n_dup // 4)):
        # Same normalized text (case and whitespace differ), same length: dedup keeps the smaller id, the original.
        first, _, rest = d["text"].partition("\n")
        text = first.swapcase() + "\n" + rest.replace("  ", "\t")
        planted.append(new("exact_duplicate", i, text, d["metadata"]["domain"], copy_of=d["id"]))
    for i, d in enumerate(near_en):
        planted.append(new("near_duplicate", i, _near_copy(d["text"], rng), "prose_en", copy_of=d["id"]))
    for i, d in enumerate(pii_en + pii_zh):
        sentence, values = _pii(rng, i, d["metadata"]["domain"] == "prose_zh")
        lines = d["text"].split("\n")
        lines.insert(rng.randint(1, len(lines)), sentence)
        d["text"] = "\n".join(lines)
        d["metadata"].update(planted="pii", pii_values=values)
    for i in range(n_junk):
        is_zh = i % 2 == 0
        planted.append(new("junk", i, _junk(rng, is_zh), "prose_zh" if is_zh else "prose_en"))
    for i in range(n_js):
        planted.append(new("js_only", i, _js_page(rng, i), "prose_en", format="html"))
    for i, (title, text) in enumerate(_article_texts(n_html)):
        planted.append(new("html_article", i, _html_article(title, text), "prose_en", format="html"))
    # Last, from a generator of its own: the problems above are the same with or without it.
    taken = {d["metadata"]["copy_of"] for d in planted if "copy_of" in d["metadata"]}
    planted += _plant_benchmark(out, taken, random.Random(seed + 1))
    return out + planted


def write_raw_corpus(docs: list[dict], out_dir: str | Path) -> Path:
    """One JSONL file per domain (a copy lands in its original's file). The
    planted PII values go to `planted_pii.json` beside `out_dir`, not into the documents' metadata, where
    they would travel into the clean output."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, list[str]] = {}
    pii = {}
    for d in docs:
        meta = dict(d["metadata"])
        if "pii_values" in meta:
            pii[d["id"]] = meta.pop("pii_values")
        files.setdefault(meta["domain"], []).append(json.dumps({**d, "metadata": meta}, ensure_ascii=False))
    out_dir.with_name(PII_MANIFEST).write_text(json.dumps(pii, ensure_ascii=False, indent=1), encoding="utf-8")
    for domain, lines in sorted(files.items()):
        (out_dir / f"{domain}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out_dir
