"""Text measurements shared by the normalize and quality steps: CJK detection, word tokens (jieba for
mostly-Chinese text), markdown structure (fenced code, headings, list items), sentence counting."""

import re
from functools import cached_property

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff]")
# Latin-script words (with inner apostrophes, hyphens, dots: don't, state-of-the-art, e.g) or one symbol.
_TOKEN = re.compile(r"\w+(?:[-'’.]\w+)*|[^\w\s]")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^#{1,6}\s+\S")
_LIST_ITEM = re.compile(r"^(?:[-*+•]|\d{1,3}[.)])\s+\S")
_TABLE_ROW = re.compile(r"^\|.*\|$")
_SENTENCE_END = re.compile(r"[.!?](?:[\"'”’)\]]*)(?=\s+\S)|[。！？；]+[”’」』]*(?=\S)")

CJK_TERMINAL = ("。", "！", "？", "；", "…", "”", "’", "」", "』")


def cjk_ratio(text: str) -> float:
    """Share of letters (str.isalpha) that are CJK ideographs or kana."""
    letters = sum(c.isalpha() for c in text)
    return len(_CJK.findall(text)) / letters if letters else 0.0


def _jieba():
    try:
        import jieba
    except ImportError as e:  # pragma: no cover - jieba is a core dependency
        raise ImportError("Chinese word counting needs jieba: pip install 'jieba>=0.42'") from e
    jieba.setLogLevel(60)  # silence "Building prefix dict ..." on every process start
    return jieba


def tokenize(text: str, cjk: bool) -> list[str]:
    """Word and symbol tokens: jieba's for mostly-CJK text, a regex like nltk's word_tokenize otherwise."""
    if cjk:
        return [t for t in _jieba().lcut(text) if not t.isspace()]
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
    """Measurements of one text, computed once and only when a filter asks (jieba is the slow part)."""

    def __init__(self, text: str, cjk_threshold: float = 0.5):
        self.text = text
        self.cjk = cjk_ratio(text) >= cjk_threshold

    @cached_property
    def tokens(self) -> list[str]:
        return tokenize(self.text, self.cjk)

    @cached_property
    def words(self) -> list[str]:
        return [t for t in self.tokens if is_word(t)]

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
