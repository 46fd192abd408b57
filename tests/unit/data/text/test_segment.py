"""segment.py: one jieba loader, one segmentation per text shared by the PII step and the quality filters."""

import pytest

from bessemer.data.pii.redact import redact
from bessemer.data.text import segment


@pytest.fixture
def counted_cuts(monkeypatch):
    """Count jieba segmentations, starting from empty caches."""
    jieba = segment.load_jieba()
    calls = []
    cut = jieba.cut

    def counting(text, *args, **kwargs):
        calls.append(text)
        return cut(text, *args, **kwargs)

    monkeypatch.setattr(jieba, "cut", counting)
    segment._cut.cache_clear()
    segment._tokens.cache_clear()
    yield calls
    segment._cut.cache_clear()
    segment._tokens.cache_clear()


def test_words_and_tokens_cover_the_text():
    text = "患者董娜住在北京市朝阳区，电话 13800138000, see you"
    assert "".join(segment.words(text)) == text
    toks = segment.tokens(text)
    assert [t.word for t in toks] == segment.words(text)
    assert all(text[t.start : t.end] == t.word for t in toks)
    flags = {t.word: t.flag for t in toks}
    assert flags["北京市"] == "ns" and flags["董娜"] == segment.OOV and flags["13800138000"] == "m"
    assert flags["see"] == "eng"


def test_one_segmentation_per_text(counted_cuts):
    text = "患者董娜今日复诊，地址：北京市朝阳区建国路88号。"
    redact(text)
    segment.words(text)
    segment.tokens(text)
    redact(text, action="hash")
    assert counted_cuts == [text]
    segment.words("另一篇文档")
    assert len(counted_cuts) == 2


def test_returned_lists_are_copies():
    words = segment.words("我们去北京")
    words.append("x")
    assert segment.words("我们去北京") == ["我们", "去", "北京"]


def test_one_loader():
    assert segment.load_jieba() is segment.load_jieba()
    assert segment.tag_table()["北京"] == "ns" and segment.frequency("北京") > 0 == segment.frequency("董娜")
