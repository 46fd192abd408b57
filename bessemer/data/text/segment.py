"""Chinese word segmentation, once per document, shared by the PII and quality steps.

jieba is loaded once per process (`load_jieba`: dictionary, no log chatter; the part-of-speech table on first
use of `tokens`), and each
text is segmented once: the results of the last few texts are cached, so the PII step and a quality filter
looking at the same document text pay for one segmentation between them.

    words(text)  -> list[str]    jieba's words (HMM on, as `jieba.lcut`), whitespace tokens included:
                                 "".join(words(text)) == text
    tokens(text) -> list[Token]  the same words with their offsets and a part-of-speech flag

Part-of-speech flags come from jieba's dictionary (`nr` person, `ns` place, `nt` organisation, `n` noun, `v`
verb, ... as in `jieba.posseg`); a Han word that is not in the dictionary, found by jieba's HMM (mostly
names and other new words), is flagged `OOV`; digits `m`, Latin letters `eng`, anything else `x`.
`jieba.posseg.cut` would tag new words with a second, part-of-speech HMM, at a third of the speed; a
dictionary look-up keeps segmentation at jieba's plain speed (~280k characters/s on one core) and the PII
rules that read the flags do not need more.
"""

import re
from functools import lru_cache
from typing import NamedTuple

from bessemer.data.text.script import HAN_RUN

OOV = "oov"
_DIGITS = re.compile(r"[0-9０-９.]+")
_LATIN = re.compile(r"[A-Za-z]+")
# Segmentations kept: a document passes a few steps in a row (quality, then pii), and a step that holds a
# batch of documents (dedup) sits between them only in a global stage, where text is read back anyway.
_CACHE_DOCS = 8


class Token(NamedTuple):
    """One word of `text`: `text[start:end] == word`."""

    start: int
    end: int
    word: str
    flag: str


@lru_cache(maxsize=1)
def load_jieba():
    """jieba with its dictionary loaded and its log quiet; the one place that imports it."""
    try:
        import jieba
    except ImportError as e:  # pragma: no cover - jieba is a core dependency
        raise ImportError("Chinese word segmentation needs jieba: pip install 'jieba>=0.42'") from e
    jieba.setLogLevel(60)  # silence "Building prefix dict ..." on every process start
    jieba.initialize()
    return jieba


@lru_cache(maxsize=1)
def tag_table() -> dict[str, str]:
    """jieba's dictionary: word -> part-of-speech flag."""
    load_jieba()
    import jieba.posseg

    return jieba.posseg.dt.word_tag_tab


def frequency(word: str) -> int:
    """How often `word` occurs in the corpus jieba's dictionary was counted on (0 if it is not a word)."""
    return load_jieba().dt.FREQ.get(word, 0)


@lru_cache(maxsize=_CACHE_DOCS)
def _cut(text: str) -> tuple[str, ...]:
    return tuple(load_jieba().cut(text))


def forget_texts() -> None:
    """Drop the cached segmentations of recent texts; jieba and its tables stay loaded."""
    _cut.cache_clear()
    _tokens.cache_clear()


def words(text: str) -> list[str]:
    """jieba's words of `text` (HMM on), whitespace included; computed once per text (see module doc)."""
    return list(_cut(text))


def _flag(word: str) -> str:
    """The flag of a word jieba's dictionary does not know."""
    if HAN_RUN.fullmatch(word):
        return OOV
    if _DIGITS.fullmatch(word):
        return "m"
    return "eng" if _LATIN.fullmatch(word) else "x"


@lru_cache(maxsize=_CACHE_DOCS)
def _tokens(text: str) -> tuple[Token, ...]:
    get = tag_table().get
    out, pos = [], 0
    for word in _cut(text):
        end = pos + len(word)
        out.append(Token(pos, end, word, get(word) or _flag(word)))
        pos = end
    return tuple(out)


def tokens(text: str) -> list[Token]:
    """`words(text)` with offsets and part-of-speech flags (module doc); computed once per text."""
    return list(_tokens(text))
