"""The normalisation and n-gram hashes the benchmark index and the documents share (bessemer/data/decont/ngrams.py)."""

import numpy as np
import pytest

from bessemer.data.decont.ngrams import (
    Units,
    normalize,
    text_hashes,
    units,
    window_hashes,
)

TEXTS = [
    "Hello, World! 3.14 and 1,000 apples at 12:30; the_end x2024y.",
    "Café naïve ΟΔΟΣ straße İstanbul ﬁne \u0301accent",
    "该物品用气泡包装纸包着，因为它很易碎。Python 3 很好，カタカナも数える。한국어 단어는 띄어 씁니다",
    "𠀀𠀁 Han extension B, 𝒜 math letters and a combining mark from beyond the BMP: a\U0001d167b",
    "",
    "   \n\t ",
]


def all_windows(text: str, n: int, cjk_n: int) -> list[int]:
    return [w.hash for w in Units(text).windows(n, cjk_n, lambda h: True)]


@pytest.mark.parametrize("text", TEXTS)
def test_fast_and_slow_paths_see_the_same_windows(text):
    """The fast path (every document) and the slow one (documents with a hit: positions) hash the same units."""
    words, chars = text_hashes(text, 3, 4)
    assert all_windows(text, 3, 4) == words.tolist() + chars.tolist()
    u = Units(text)
    assert [w for _, _, w in u.words] == list(units(text)[0])
    assert "".join(c for _, _, c in u.chars) == units(text)[1]


def test_normalisation_folds_case_accents_numbers_and_punctuation():
    assert normalize("Café NAÏVE ΟΔΟΣ Straße 2024") == "cafe naive οδοσ strasse 0"
    assert units("Hello,  WORLD!! x12y 3.5")[0] == [b"hello", b"world", b"x0y", b"0", b"0"]
    assert units("Hello,  WÖRLD!! x12y 3.5")[0] == ["hello", "world", "x0y", "0", "0"]
    # ASCII words come out as bytes, others as str: Python hashes both alike, so they meet in one index
    ascii_words, accented = text_hashes("the cafe is open", 3, 3)[0], text_hashes("the café is open", 3, 3)[0]
    assert ascii_words.tolist() == accented.tolist()


def test_han_and_kana_are_units_of_their_own_stream():
    words, chars = units("我们 use Python 写代码，テスト")
    assert words == ["use", "python"]
    assert chars == "我们写代码テスト"
    assert len(text_hashes("我们 use Python 写代码，テスト", 2, 3)[1]) == len(chars) - 2


def test_windows_point_at_the_original_text():
    text = "Intro. The QUICK, brown fox — 1,000 times!"
    found = {w.ngram: text[w.start:w.end] for w in Units(text).windows(3, 3, lambda h: True)}
    assert found["the quick brown"] == "The QUICK, brown"
    assert found["fox 0 0"] == "fox — 1,000"
    zh = "前言：该物品用气泡包装纸包着。"
    found = {w.ngram: zh[w.start:w.end] for w in Units(zh).windows(3, 4, lambda h: True)}
    assert found["言该物品"] == "言：该物品"


def test_a_window_hash_depends_on_its_units_only():
    rng = np.random.default_rng(0)
    h = rng.integers(0, 2**63, size=40, dtype=np.int64).view(np.uint64)
    w = window_hashes(h, 5)
    assert len(w) == 36 and len(set(w.tolist())) == 36
    shifted = window_hashes(np.concatenate([rng.integers(0, 2**63, 7).view(np.uint64), h]), 5)
    assert shifted[7:].tolist() == w.tolist()  # the same units anywhere in a text: the same hash
    assert window_hashes(h[:4], 5).size == 0


def test_long_texts_are_hashed_in_chunks_without_losing_a_window(monkeypatch):
    from bessemer.data.decont import ngrams

    h = np.arange(1, 200, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    whole = window_hashes(h, 13).tolist()
    monkeypatch.setattr(ngrams, "_CHUNK", 50)
    assert window_hashes(h, 13).tolist() == whole
