"""Text measurements shared by the normalize and quality steps: a text's script (CJK or not), its tokens,
markdown structure (fenced code, headings, list items), sentence counting.

Tokens are script-aware without a segmenter: a Latin-script (or any space-separated) word is one token, a CJK
character is one token, a symbol is one token. CJK word segmentation (jieba, through bessemer/data/text/segment.py,
once per document) is used only where a rule is about words themselves: the mean word length of Chinese.
"""

import re
from functools import cached_property

from bessemer.data.text import segment
from bessemer.data.text.script import CJK, CJK_CHARS, KANA_HANGUL, cjk_ratio

# One CJK character; or a word of other letters and digits with inner apostrophes, hyphens, dots (don't,
# state-of-the-art, e.g); or one symbol.
_WORD = rf"[{CJK_CHARS}]|[^\W{CJK_CHARS}]+(?:[-'’.][^\W{CJK_CHARS}]+)*"
_TOKEN = re.compile(rf"{_WORD}|[^\w\s]")
_WORD_TOKEN = re.compile(_WORD)
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^#{1,6}\s+\S")
# Bullets and numbered items, with the enumerators of legal and official text: (a) (1) (iv), （一）, 一、, 1、, ①.
_LIST_ITEM = re.compile(
    r"^(?:(?:[-*+•]|\d{1,3}[.)]|\([0-9A-Za-z]{1,4}\))\s+\S"
    r"|(?:（[0-9一二三四五六七八九十百]{1,4}）|[一二三四五六七八九十百]{1,4}、|\d{1,3}、|[①-⑳])\s*\S)"
)
_TABLE_ROW = re.compile(r"^\|.*\|$")
_SENTENCE_END = re.compile(r"[.!?](?:[\"'”’)\]]*)(?=\s+\S)|[。！？；]+[”’」』]*(?=\S)")

CJK_TERMINAL = ("。", "！", "？", "；", "…", "”", "’", "」", "』")


def tokenize(text: str) -> list[str]:
    """Word, CJK-character and symbol tokens (module doc); for Latin-script text the words and symbols of
    nltk's word_tokenize, near enough."""
    return _TOKEN.findall(text)


def is_word(token: str) -> bool:
    """A token that is not pure punctuation or symbols (datatrove's `non_symbol_words`)."""
    return any(c.isalnum() for c in token)


def code_mask(lines: list[str]) -> list[bool]:
    """True for the lines of closed fenced code blocks (``` or ~~~), fences included. An unclosed fence
    opens nothing: a stray ``` must not exempt the rest of a page from the filters."""
    mask = [False] * len(lines)
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m:
            fence = m.group(1)
            for j in range(i + 1, len(lines)):
                close = _FENCE.match(lines[j])
                closes = close and close.group(1)[0] == fence[0] and len(close.group(1)) >= len(fence)
                if closes and not lines[j].strip().strip(fence[0]):  # a closing fence has no info string
                    mask[i : j + 1] = [True] * (j + 1 - i)
                    i = j
                    break
        i += 1
    return mask


def is_heading(line: str) -> bool:
    return bool(_HEADING.match(line))


def is_list_item(line: str) -> bool:
    return bool(_LIST_ITEM.match(line.lstrip()))


def is_table_row(line: str) -> bool:
    return bool(_TABLE_ROW.match(line.strip()))


def count_sentences(line: str) -> int:
    """Sentences in one line: 1 + the sentence ends followed by more text (no abbreviation list, unlike
    nltk's punkt, so "e.g. this" counts two)."""
    return 1 + len(_SENTENCE_END.findall(line)) if line.strip() else 0


class TextView:
    """Measurements of one text, computed once and only when a filter asks.

    `cjk`: at least `cjk_threshold` of the letters are CJK characters; such a text is measured in characters
    (`words` holds one per CJK character, plus its other words) and judged by the filters' `cjk_` thresholds.
    `chinese`: a CJK text with (almost) no kana or Hangul, the only one a segmenter is run on."""

    def __init__(self, text: str, cjk_threshold: float = 0.5):
        self.text = text
        self.cjk_threshold = cjk_threshold
        self.cjk = cjk_ratio(text) >= cjk_threshold

    @cached_property
    def tokens(self) -> list[str]:
        return tokenize(self.text)

    @cached_property
    def words(self) -> list[str]:
        """The tokens that are not symbols (`is_word`)."""
        # A word token starts with a letter or a digit, unless it starts with "_" or is the katakana middle
        # dot, the one symbol inside the CJK ranges.
        return [t for t in _WORD_TOKEN.findall(self.text) if t[0].isalnum() or is_word(t)]

    @cached_property
    def chinese(self) -> bool:
        # Japanese prose is a third to two thirds kana, Korean nearly all Hangul; a Chinese text quoting a
        # Japanese title stays well under a tenth.
        return self.cjk and len(KANA_HANGUL.findall(self.text)) < 0.1 * len(CJK.findall(self.text))

    @cached_property
    def segmented_words(self) -> list[str]:
        """jieba's words of the text, symbols and whitespace left out (the segmentation PII reuses)."""
        return [w for w in segment.words(self.text) if is_word(w)]

    @cached_property
    def lines(self) -> list[str]:
        return self.text.split("\n")

    @cached_property
    def code(self) -> list[bool]:
        return code_mask(self.lines)

    def prose_lines(self, markdown_aware: bool) -> list[str]:
        """Non-empty lines outside fenced code (all non-empty lines without markdown awareness)."""
        mask = self.code if markdown_aware else [False] * len(self.lines)
        return [line for line, code in zip(self.lines, mask) if not code and line.strip()]
