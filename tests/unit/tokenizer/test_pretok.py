"""Pre-tokenization: statute / 第 / numeral / 条 boundaries, code whitespace, and what the trained
vocabulary makes of a frequent statute phrase."""

import pytest

from bessemer.tokenizer.common import load_tokenizer
from bessemer.tokenizer.pretok import JiebaSegmenter, split_pretokenizer


def pieces(text: str) -> list[str]:
    return [p for p, _ in split_pretokenizer().pre_tokenize_str(text)]


def test_ordinals_numerals_and_attached_characters_are_their_own_pieces():
    assert pieces("根据《民法典》第一千一百七十九条规定") == ["根据", "《", "民法典", "》", "第", "一千一百七十九", "条", "规定"]
    assert pieces("第2024号文件") == ["第", "202", "4", "号", "文件"]
    assert pieces("二〇二四年三月五日") == ["二〇二四", "年", "三", "月", "五", "日"]
    assert pieces("第十五条第二款") == ["第", "十五", "条", "第", "二", "款"]
    # 第 without a numeral after it, and 条 without one before it, are ordinary characters of a word.
    assert pieces("次第开放的条款") == ["次第开放的条款"]


@pytest.mark.parametrize("word", ["一些", "统一", "十分", "千万", "之一", "一般"])
def test_a_numeral_inside_an_ordinary_word_stays_in_it(word):
    assert pieces(word) == [word]
    assert pieces(f"我们{word}认为") in ([f"我们{word}认为"], ["我们", word, "认为"])  # 千万: a run, kept whole


def test_numbers_stay_whole_and_statute_references_keep_their_boundaries():
    assert pieces("一千一百七十九") == ["一千一百七十九"]
    assert pieces("依照第一千一百七十九条规定") == ["依照", "第", "一千一百七十九", "条", "规定"]
    assert pieces("统一适用第一条第五款第三项") == ["统一适用", "第", "一", "条", "第", "五", "款", "第", "三", "项"]
    assert pieces("第五届全国人民代表大会") == ["第", "五", "届全国人民代表大会"]  # a numeral after 第 is cut off
    assert pieces("共三条") == ["共", "三", "条"]  # one numeral before a counted unit is a number


def test_code_whitespace_symbols_and_words():
    assert pieces("def f(x):\n    return x  \n\tpass") == [
        "def", " f", "(", "x", "):\n", "   ", " return", " x", "  \n", "\t", "pass"]
    assert pieces("It's 12345 dollars.") == ["It", "'s", " ", "123", "45", " dollars", "."]


def test_jieba_cuts_han_runs_only():
    segment = JiebaSegmenter()
    text = "def f():\n    return 1  # 人民法院审理案件，第十五条"
    parts = segment(text)
    assert "".join(parts) == text
    assert len(parts) > 1 and parts[0].startswith("def f():\n    return 1  #")
    # Numerals, 第 and 条 are already their own pieces and stay inside one sequence.
    assert "第十五条" in parts[-1]


@pytest.mark.parametrize("name", ["bpe", "bpe_jieba"])
def test_frequent_statute_phrase_is_four_tokens(trained, name):
    tok = load_tokenizer(trained[name])
    ids = tok.encode("民法典第一千一百七十九条").ids
    assert [tok.decode([i]) for i in ids] == ["民法典", "第", "一千一百七十九", "条"]


RARE = [  # (text, the substrings whose edges no token may cross)
    ("依照第三百零二条规定", ["第", "三百零二", "条"]),
    ("根据《刑法》第十五条第二款", ["《刑法》", "第", "十五", "条", "第", "二", "款"]),
    ("京民初第2024号判决", ["第", "2024", "号"]),
    ("一千零一夜的故事", ["一千零一"]),
    ("于两千零二十四年发布", ["两千零二十四", "年"]),
    ("民法典第一万零五条", ["民法典", "第", "一万零五", "条"]),
]


@pytest.mark.parametrize("name", ["bpe", "bpe_jieba", "sentencepiece", "sentencepiece_jieba"])
def test_no_token_crosses_a_statute_ordinal_numeral_or_article_boundary(trained, name):
    tok = load_tokenizer(trained[name])
    for text, parts in RARE:
        edges, pos = set(), 0
        for part in parts:
            start = text.index(part, pos)
            edges |= {start, start + len(part)}
            pos = start + len(part)
        enc = tok.encode(text)
        assert tok.decode(enc.ids, skip_special_tokens=False) == text
        for token, (a, b) in zip(enc.tokens, enc.offsets):
            crossed = [e for e in edges if a < e < b]
            assert not crossed, f"{name}: token {token!r} spans {text[a:b]!r} across position {crossed} of {text!r}"
