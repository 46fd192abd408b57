"""The non-PII set: sentences from the public texts in shared/eval/real_text/ that hold no personal data but
do hold what PII rules trip on — numbers, amounts, dates, section numbers, model and version codes, titles,
words that begin with a surname character — plus statute sentences. A redactor should leave every one alone.

Sentences are chosen by category (a sentence counts in each category it matches) in a fixed hash order, up to
PER_CATEGORY each. Sentences that name a person are not in the set: the sources' biographies are skipped,
sentences with an email or IP address are skipped (those are PII types, judged in pii.jsonl), and each
sentence chosen was read; the person names found that way are in NAMES, and any sentence holding one of them
is dropped.
"""

import hashlib
import ipaddress
import json
import re
from pathlib import Path

REAL = Path(__file__).resolve().parents[3] / "shared" / "eval" / "real_text"  # build.py --data overrides
PER_CATEGORY = {"zh": 45, "en": 45}
STATUTE_SENTENCES = 100

_ZH_TITLES = ("经理|老师|主任|教授|医生|律师|院长|校长|局长|处长|科长|书记|董事长|总经理|先生|女士|主席|总统|部长|"
              "会长|厂长|所长|馆长|编辑|记者|工程师|委员|法官|检察官|警察|审判长|审判员|代理人|辩护人|当事人")


def _surnames() -> str:
    from faker.providers.person.zh_CN import Provider

    return "".join(sorted(k for k in Provider.last_names if len(k) == 1))


CATEGORIES = {
    "zh": {
        "number": r"\d{3,}",
        "amount": r"\d[\d,.]*\s*(?:多)?(?:亿|万|千)?(?:元|美元|港元|欧元|英镑|日元)|\d+(?:\.\d+)?\s*%|百分之",
        "date": r"\d{2,4}\s*年|\d{1,2}\s*月\s*\d{1,2}\s*日|\d{4}-\d{2}-\d{2}",
        "section": r"第\s*[一二三四五六七八九十百千零〇\d]+\s*[条款项章节编]|\d+(?:\.\d+){2,}",
        "code": r"[A-Za-z]+-?\d+[A-Za-z\d]*|\d+[A-Za-z]+",
        "title": _ZH_TITLES,
        "surname_word": None,  # built from Faker's zh_CN surname list in _patterns()
    },
    "en": {
        "number": r"\d{3,}",
        "amount": r"[$£€]\s?\d|\d+(?:\.\d+)?\s?(?:%|percent|per cent|million|billion|dollars|pounds)",
        "date": r"\b(?:January|February|March|April|May|June|July|August|September|October|November|December)\s+\d{1,2}\b"
                r"|\b\d{4}-\d{2}-\d{2}\b|\b(?:1[5-9]|20)\d\d\b",
        "section": r"\b(?:Section|Article|Clause|Amendment|PEP|RFC|§)\s*\d+|\b\d+(?:\.\d+){2,}\b",
        "code": r"\b[A-Z]{1,5}-?\d+[A-Z\d-]*\b|\b\d+[A-Za-z]{1,3}\d*\b",
        "title": r"\b(?:Mr|Mrs|Ms|Dr|Prof|President|Vice President|Judge|Justice|Senator|Governor|Mayor|Secretary|"
                 r"Speaker|Captain|General|Chief|Officer|Director|Manager|Representative|Treasurer)\b",
    },
}
# Person names met while reading the chosen sentences: a sentence holding any of these is left out.
NAMES = {
    "zh": ["梁元生", "张国光", "赵天麟", "习近平", "李克强", "朱镕基", "白吉尔", "王菊", "Stiglitz", "Keiser", "Torvalds",
           "托瓦兹", "Thomas Cook", "波义耳", "张学思", "解沛然", "白坚", "刘惠农", "罗宾斯", "安禄山", "努尔哈赤", "唐玄宗",
           "李强", "蒋卓庆", "应勇", "董云虎", "Thrift", "曾绍山", "张百熙", "吴汝纶", "张之洞", "荣庆", "杜者蘅", "Naur",
           "杜威", "迪奥科里斯", "霍金", "江泽民", "吴邦国", "曾庆红", "黄菊", "Blaug", "张功耀", "李世乭", "蒋中正",
           "孟德斯鸠", "欧阳说", "乌尔比安", "格劳秀斯", "肖华", "江华", "程世才", "刘澜波", "罗舜初", "沃尔什", "Walsh",
           "陈一凡", "高扬", "杨春茂", "鲁迅", "任仲夷", "拓跋圭", "埃拉托斯特尼", "荆志伟", "斯密", "凯恩斯", "菲利普斯",
           "康德", "席勒", "洪博特", "李嘉图", "陈抟", "Lenzen", "叶适", "Georgescu", "牛顿", "黄帝"],
    "en": ["Jefferson", "James Henry Finn", "Heun", "Winterbotham", "Rue Carpenter", "McLaughlin", "Guido", "Jelke",
           "Gordon Wallace", "Atkinson", "Petroc", "Landauer", "Robert Dollar", "Stark", "Laozi", "Zhuangzi",
           "Bao Jingyan", "Richard Gray", "Robert Graham", "David retired", "McAnespie", "Dubuffet", "Anelka", "McGann",
           "Goodspeed", "Godwin", "Volin", "Faure", "Ondaatje", "Adrian Evans", "Karl Marx", "Woodcock", "Simcoe",
           "Prince Frederick", "Brett Elliott", "Hale 1940", "McKinley", "Czolgosz", "Goldman", "Mackenzie", "Gooderham",
           "Mrs.", "James C.", "Winstanley", "Ben Oliver", "Shuster", "John Vinci", "Duno", "Stevie", "Dalziel", "Mike Harris", "Flores Mag", "Gordon Brown"],
}
# Left-overs of citation templates (`* author2=Baschek, B.`) and bibliography entries (ISBN) are not prose.
_TEMPLATE = re.compile(r"^\*?\s*[\w-]+\s*=")
SKIP_DOCS = {"zhwiki/高德纳", "zhwiki/林纳斯·托瓦兹", "zhwiki/邓丽君", "enwiki/Elizabeth-Gilbert", "enwiki/Harry-McPherson"}


def _patterns(lang: str) -> dict[str, re.Pattern]:
    cats = dict(CATEGORIES[lang])
    if lang == "zh":
        cats["surname_word"] = rf"[{_surnames()}][\u4e00-\u9fff]{{1,2}}(?:{_ZH_TITLES}|表示|认为|指出|说)"
    return {k: re.compile(v) for k, v in cats.items()}


def _has_pii_type(s: str) -> bool:
    if re.search(r"[\w.+-]+@[\w-]+\.[\w.-]+", s):
        return True
    for m in re.finditer(r"(?<![\d.])\d{1,3}(?:\.\d{1,3}){3}(?![\d.])|[0-9A-Fa-f:]*::?[0-9A-Fa-f:.]+", s):
        try:
            ipaddress.ip_address(m.group(0))
            if ":" not in m.group(0) or m.group(0).count(":") >= 2 and len(m.group(0)) > 4:
                return True
        except ValueError:
            pass
    return False


def _sentences(lang: str, text: str) -> list[str]:
    if lang == "zh":
        return [s.strip() for s in re.split(r"(?<=[。！？；])|\n", text) if s.strip()]
    return [s.strip() for line in text.splitlines() for s in re.split(r"(?<=[.!?])\s+(?=[A-Z\"'(])", line) if s.strip()]


def _order(s: str) -> str:
    return hashlib.sha256(f"non_pii:{s}".encode()).hexdigest()


def _statute_sentences(lang: str) -> list[tuple[str, str]]:
    if lang == "zh":
        text = (REAL / "zh_statute_criminal_law.md").read_text(encoding="utf-8")
        return [(s, "lawrefbook:刑法") for s in _sentences("zh", re.sub(r"^#+.*$", "", text, flags=re.MULTILINE))]
    text = (REAL / "en_us_constitution.md").read_text(encoding="utf-8")
    return [(s, "us_constitution") for s in _sentences("en", re.sub(r"^#+.*$", "", text, flags=re.MULTILINE))]


def build_non_pii() -> list[dict]:
    items = []
    for lang in ("zh", "en"):
        lo, hi = (8, 150) if lang == "zh" else (25, 300)
        names = NAMES[lang]

        def ok(s: str, lo=lo, hi=hi, names=names, lang=lang) -> bool:
            return (lo <= len(s) <= hi and not _has_pii_type(s) and not any(n in s for n in names)
                    and not _TEMPLATE.match(s) and "ISBN" not in s and (lang == "en" or "·" not in s))

        docs = [json.loads(line) for name in (f"{lang}_wikipedia.jsonl", f"{lang}_python_docs.jsonl")
                for line in (REAL / name).open(encoding="utf-8")]
        pool = {}
        for d in docs:
            if d["id"] in SKIP_DOCS:
                continue
            for s in _sentences(lang, d["text"]):
                if ok(s):
                    pool.setdefault(s, d["id"])
        pats = _patterns(lang)
        chosen: dict[str, dict] = {}
        for pat in pats.values():
            hits = sorted((s for s in pool if pat.search(s)), key=_order)[: PER_CATEGORY[lang]]
            for s in hits:
                chosen.setdefault(s, {"source": pool[s]})
        statute = sorted(((s, src) for s, src in _statute_sentences(lang) if ok(s)), key=lambda x: _order(x[0]))
        for s, src in statute[:STATUTE_SENTENCES]:
            chosen.setdefault(s, {"source": src})
        for s in sorted(chosen, key=_order):
            cats = [c for c, p in pats.items() if p.search(s)]
            if chosen[s]["source"].startswith(("lawrefbook:", "us_constitution")):
                cats.append("statute")
            items.append({"id": f"{lang}-np-{len(items):04d}", "lang": lang, "text": s, "categories": cats,
                          "source": chosen[s]["source"]})
    return items
