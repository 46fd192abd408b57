"""Corpora made here (a Chinese legal corpus from templates, Python's own sources and docs, the bundled
Chinese prose) and tokenizers trained on them once per session."""

import json
import random

import pytest

from bessemer.demo.corpus import build_corpus
from bessemer.tokenizer.train import train_tokenizer

DIGITS = "零一二三四五六七八九"
# Numbers the legal corpus never uses, so the tests can check how rare numerals are cut.
RARE = {15, 302, 1001, 2024}


def zh_number(n: int, two: str = "二") -> str:
    """Chinese reading of 0 < n < 10^8: 1179 -> 一千一百七十九, 302 -> 三百零二, 15 -> 十五, 10005 -> 一万零五."""
    def group(m: int, top: bool) -> str:
        out, zero = "", False
        for value, unit in ((1000, "千"), (100, "百"), (10, "十"), (1, "")):
            d = m // value % 10
            if d == 0:
                zero = bool(out)
                continue
            if zero:
                out += "零"
                zero = False
            digit = two if d == 2 and unit in ("千", "百") else DIGITS[d]
            out += "" if (top and not out and d == 1 and unit == "十") else digit
            out += unit
        return out

    if n >= 10000:
        rest = n % 10000
        return group(n // 10000, True) + "万" + (("零" if rest < 1000 else "") + group(rest, False) if rest else "")
    return group(n, True)


ARTICLE = ("根据《民法典》第一千一百七十九条规定，侵害他人造成人身损害的，应当赔偿医疗费、护理费、交通费、营养费、"
           "住院伙食补助费等为治疗和康复支出的合理费用，以及因误工减少的收入。")
LAWS = ["刑法", "民法典", "合同法", "公司法", "劳动法", "行政诉讼法", "民事诉讼法", "著作权法"]
PROSE = ["当事人应当按照约定全面履行自己的义务。", "人民法院审理案件，应当以事实为根据，以法律为准绳。",
         "合同成立后，当事人不得以未签字为由主张合同不成立。", "法律另有规定的，依照其规定。",
         "本法所称的用人单位，包括企业、个体经济组织、民办非企业单位等组织。", "侵权责任由行为人承担。"]


def _numbers(rng: random.Random, hi: int) -> int:
    while True:
        n = rng.randint(1, hi)
        if n not in RARE:
            return n


def legal_texts(n_docs: int = 400, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    docs = []
    for i in range(n_docs):
        parts = [ARTICLE] if i % 2 == 0 else []
        for _ in range(rng.randint(2, 5)):
            law, art, para = rng.choice(LAWS), _numbers(rng, 1260), rng.randint(1, 9)
            y, m, d = rng.choice([1997, 1999, 2008, 2013, 2018, 2020, 2021]), rng.randint(1, 12), rng.randint(1, 28)
            parts.append(rng.choice([
                f"《{law}》第{zh_number(art)}条第{zh_number(para)}款规定：{rng.choice(PROSE)}",
                f"依照《{law}》第{zh_number(art)}条的规定，{rng.choice(PROSE)}",
                f"本院于{zh_number(y // 1000)}{''.join(DIGITS[int(c)] for c in str(y)[1:])}年{zh_number(m)}月"
                f"{zh_number(d)}日作出（{y}）京{_numbers(rng, 99)}民初第{_numbers(rng, 9999)}号判决。",
                f"{rng.choice(PROSE)}第{zh_number(rng.randint(1, 12))}章第{zh_number(rng.randint(1, 9))}节共"
                f"{zh_number(_numbers(rng, 300))}条。",
                rng.choice(PROSE),
            ]))
        docs.append("".join(parts))
    return docs


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> list[dict]:
    """Documents with metadata.domain: code, prose_en, prose_zh (bundled prose) and legal_zh."""
    path = tmp_path_factory.mktemp("corpus") / "demo.jsonl"
    docs = build_corpus(path, code_bytes=200_000, prose_bytes=150_000)
    docs += [{"id": f"legal/{i}", "text": t, "metadata": {"domain": "legal_zh"}} for i, t in enumerate(legal_texts())]
    return docs


@pytest.fixture(scope="session")
def corpus_file(corpus, tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "all.jsonl"
    path.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in corpus), encoding="utf-8")
    return path


TOKENIZERS = {"bpe": ("bpe", False), "bpe_jieba": ("bpe", True), "sentencepiece": ("sentencepiece", False),
              "sentencepiece_jieba": ("sentencepiece", True)}


@pytest.fixture(scope="session")
def trained(corpus, tmp_path_factory) -> dict:
    """name -> tokenizer directory, each trained once on the whole corpus (vocab 3000)."""
    root = tmp_path_factory.mktemp("tokenizers")
    cache: dict = {}

    class Lazy(dict):
        def __missing__(self, name):
            kind, jieba = TOKENIZERS[name]
            docs = ((d["text"], d["metadata"]["domain"]) for d in corpus)
            train_tokenizer(docs, 3000, root / name, kind=kind, use_jieba=jieba, domains=["web"])
            self[name] = root / name
            return self[name]

    return Lazy(cache)
