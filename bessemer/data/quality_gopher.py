"""Gopher quality and repetition rules (Rae et al. 2021, "Scaling Language Models: Methods, Analysis &
Insights from Training Gopher", appendix A.1.1 and table A1), with datatrove's defaults
(`GopherQualityFilter`, `GopherRepetitionFilter`). Each `check` returns the failing rule or None;
a threshold of None turns its rule off."""

import re
from collections import Counter

from bessemer.data.quality_text import TextView

STOP_WORDS: tuple[str, ...] = ("the", "be", "to", "of", "and", "that", "have", "with")
# Ours: the commonest function words of written Chinese, in the spirit of Gopher's list.
CJK_STOP_WORDS: tuple[str, ...] = ("的", "了", "是", "在", "和", "有", "我", "不", "这", "也", "就", "都", "与", "对")
_ELLIPSIS = re.compile(r"\.\.\.|…+")  # "……" is one Chinese ellipsis, not two


class GopherQuality:
    def __init__(
        self,
        min_doc_words: int | None = 50,
        max_doc_words: int | None = 100_000,
        min_avg_word_length: float | None = 3,
        max_avg_word_length: float | None = 10,
        # Ours, for jieba words (typical Chinese text averages 1.5-2 characters a word): a mean below 1.2
        # means jieba fell back to single characters (garbled text), above 6 means unsegmentable runs.
        cjk_min_avg_word_length: float | None = 1.2,
        cjk_max_avg_word_length: float | None = 6,
        max_symbol_word_ratio: float | None = 0.1,
        max_bullet_lines_ratio: float | None = 0.9,
        max_ellipsis_lines_ratio: float | None = 0.3,
        min_alpha_words_ratio: float | None = 0.8,
        min_stop_words: int | None = 2,
        stop_words: tuple[str, ...] = STOP_WORDS,
        cjk_stop_words: tuple[str, ...] = CJK_STOP_WORDS,
    ):
        """Paper: keep documents with 50..100,000 words, mean word length 3..10 characters, a "#" or "..."
        to word ratio of at most 0.1, at most 90% of lines starting with a bullet and at most 30% ending
        with an ellipsis, at least 80% of words with an alphabetic character, and at least two of the
        stop words. Words are tokens that are not pure punctuation (jieba words for CJK text)."""
        self.min_doc_words = min_doc_words
        self.max_doc_words = max_doc_words
        self.avg_word_length = (min_avg_word_length, max_avg_word_length)
        self.cjk_avg_word_length = (cjk_min_avg_word_length, cjk_max_avg_word_length)
        self.max_symbol_word_ratio = max_symbol_word_ratio
        self.max_bullet_lines_ratio = max_bullet_lines_ratio
        self.max_ellipsis_lines_ratio = max_ellipsis_lines_ratio
        self.min_alpha_words_ratio = min_alpha_words_ratio
        self.min_stop_words = min_stop_words
        self.stop_words = frozenset(stop_words)
        self.cjk_stop_words = frozenset(cjk_stop_words)

    def check(self, view: TextView) -> str | None:
        words, text = view.words, view.text
        n = len(words)
        if self.min_doc_words is not None and n < self.min_doc_words:
            return "too_few_words"
        if self.max_doc_words is not None and n > self.max_doc_words:
            return "too_many_words"
        if n == 0:  # only reachable with min_doc_words=None; every ratio below divides by n
            return None

        low, high = self.cjk_avg_word_length if view.cjk else self.avg_word_length
        mean_length = sum(map(len, words)) / n
        if low is not None and mean_length < low:
            return "mean_word_length_too_short"
        if high is not None and mean_length > high:
            return "mean_word_length_too_long"

        if self.max_symbol_word_ratio is not None:
            if text.count("#") / n > self.max_symbol_word_ratio:
                return "too_many_hashes"
            if len(_ELLIPSIS.findall(text)) / n > self.max_symbol_word_ratio:
                return "too_many_ellipses"

        lines = text.splitlines() or [""]
        if self.max_bullet_lines_ratio is not None:
            bullets = sum(line.lstrip().startswith(("•", "-")) for line in lines)
            if bullets / len(lines) > self.max_bullet_lines_ratio:
                return "too_many_bullet_lines"
        if self.max_ellipsis_lines_ratio is not None:
            ellipses = sum(line.rstrip().endswith(("...", "…")) for line in lines)
            if ellipses / len(lines) > self.max_ellipsis_lines_ratio:
                return "too_many_ellipsis_lines"

        alpha = sum(any(c.isalpha() for c in w) for w in words) / n
        if self.min_alpha_words_ratio is not None and alpha < self.min_alpha_words_ratio:
            return "too_few_alpha_words"

        if self.min_stop_words is not None:
            stop = self.cjk_stop_words if view.cjk else self.stop_words
            # Occurrences, as datatrove counts them; English compared lower-cased so "The" counts.
            if sum((w if view.cjk else w.lower()) in stop for w in words) < self.min_stop_words:
                return "too_few_stop_words"
        return None


def _duplicates(items: list[str]) -> tuple[int, int]:
    """(number of repeated items, their characters), the first occurrence of each not counted."""
    seen: set[str] = set()
    n = chars = 0
    for item in items:
        if item in seen:
            n += 1
            chars += len(item)
        else:
            seen.add(item)
    return n, chars


def _top_ngram_chars(tokens: list[str], n: int, sep: str) -> int:
    """Characters covered by all occurrences of the most frequent n-gram, 0 when no n-gram repeats.
    datatrove counts a top n-gram seen once too, which rejects every page of a dozen words as repetitive."""
    counts = Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))
    gram, count = counts.most_common(1)[0]
    return len(sep.join(gram)) * count if count > 1 else 0


def _dup_ngram_chars(tokens: list[str], n: int) -> int:
    """Characters in repeated n-grams, scanning left to right and jumping past each repeat so overlapping
    repeats are not counted twice (datatrove's `find_all_duplicate`)."""
    seen: set[tuple[str, ...]] = set()
    chars = i = 0
    while i <= len(tokens) - n:
        gram = tuple(tokens[i : i + n])
        if gram in seen:
            chars += sum(map(len, gram))
            i += n
        else:
            seen.add(gram)
            i += 1
    return chars


class GopherRepetition:
    def __init__(
        self,
        dup_line_frac: float | None = 0.3,
        dup_para_frac: float | None = 0.3,
        dup_line_char_frac: float | None = 0.2,
        dup_para_char_frac: float | None = 0.2,
        top_n_grams: tuple[tuple[int, float], ...] = ((2, 0.2), (3, 0.18), (4, 0.16)),
        dup_n_grams: tuple[tuple[int, float], ...] = (
            (5, 0.15),
            (6, 0.14),
            (7, 0.13),
            (8, 0.12),
            (9, 0.11),
            (10, 0.10),
        ),
    ):
        """Gopher table A1: reject when more than the given fraction of lines/paragraphs (or of their
        characters) are duplicates, when the most frequent 2/3/4-gram covers more than 20/18/16% of the
        characters, or when repeated 5..10-grams cover more than 15..10% of them. Empty `top_n_grams` or
        `dup_n_grams` turns those rules off."""
        self.dup_line_frac = dup_line_frac
        self.dup_para_frac = dup_para_frac
        self.dup_line_char_frac = dup_line_char_frac
        self.dup_para_char_frac = dup_para_char_frac
        self.top_n_grams = tuple(top_n_grams)
        self.dup_n_grams = tuple(dup_n_grams)

    def check(self, view: TextView) -> str | None:
        text = view.text.strip()
        if not text:
            return None
        size = len(text)
        paragraphs = re.split(r"\n{2,}", text)
        n_dup, dup_chars = _duplicates(paragraphs)
        if self.dup_para_frac is not None and n_dup / len(paragraphs) > self.dup_para_frac:
            return "dup_para_frac"
        if self.dup_para_char_frac is not None and dup_chars / size > self.dup_para_char_frac:
            return "dup_para_char_frac"

        lines = re.split(r"\n+", text)  # blank lines are separators, not duplicate lines
        n_dup, dup_chars = _duplicates(lines)
        if self.dup_line_frac is not None and n_dup / len(lines) > self.dup_line_frac:
            return "dup_line_frac"
        if self.dup_line_char_frac is not None and dup_chars / size > self.dup_line_char_frac:
            return "dup_line_char_frac"

        tokens = view.tokens
        sep = "" if view.cjk else " "  # a CJK n-gram's characters are its tokens' characters
        for n, frac in self.top_n_grams:
            if len(tokens) >= n and _top_ngram_chars(tokens, n, sep) / size > frac:
                return f"top_{n}_gram"
        for n, frac in self.dup_n_grams:
            if len(tokens) >= n and _dup_ngram_chars(tokens, n) / size > frac:
                return f"dup_{n}_gram"
        return None
