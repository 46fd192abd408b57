"""Gopher quality and repetition rules (Rae et al. 2021, "Scaling Language Models: Methods, Analysis &
Insights from Training Gopher", appendix A.1.1 and table A1), with datatrove's defaults
(`GopherQualityFilter`, `GopherRepetitionFilter`). Each `check` returns the failing rule or None;
a threshold of None turns its rule off."""

import re
from collections import Counter

from bessemer.data.text.measure import TextView
from bessemer.data.text.script import CJK

STOP_WORDS: tuple[str, ...] = ("the", "be", "to", "of", "and", "that", "have", "with")
# Ours, in the spirit of Gopher's list and counted as characters (no segmenter): the commonest function
# characters of written Chinese, formal and legal Chinese included (或 为 以 其 及 之 于 而 所 由 并 被 将 向 可 等
# 应 依: 或者, 应当, 依法...), Japanese particles and auxiliaries, Korean particles and endings. A
# function character inside a compound counts too (都 of 成都): the rule catches keyword lists and
# character soup, not every list of nouns.
CJK_STOP_CHARS: str = (
    "的了是在和有我不这也就都与对或为以其及之于而所由并被将向可等应依"
    "のにはをたがでてとしもな"
    "이의는을를에가은고다하도로"
)
_ELLIPSIS = re.compile(r"\.\.\.|…+")  # "……" is one Chinese ellipsis, not two


class GopherQuality:
    def __init__(
        self,
        min_doc_words: int | None = 15,
        max_doc_words: int | None = 100_000,
        cjk_min_doc_chars: int | None = 20,
        cjk_max_doc_chars: int | None = 150_000,
        min_avg_word_length: float | None = 3,
        max_avg_word_length: float | None = 10,
        cjk_min_avg_word_length: float | None = 1.2,
        cjk_max_avg_word_length: float | None = 6,
        max_symbol_word_ratio: float | None = 0.1,
        max_bullet_lines_ratio: float | None = 0.9,
        max_ellipsis_lines_ratio: float | None = 0.3,
        min_alpha_words_ratio: float | None = 0.8,
        min_stop_words: int | None = 2,
        stop_words: tuple[str, ...] = STOP_WORDS,
        cjk_stop_chars: str = CJK_STOP_CHARS,
    ):
        """Paper: keep documents with 50..100,000 words, mean word length 3..10 characters, a "#" or "..."
        to word ratio of at most 0.1, at most 90% of lines starting with a bullet and at most 30% ending
        with an ellipsis, at least 80% of words with an alphabetic character, and at least two of the
        stop words. Words are tokens that are not pure punctuation.

        Ours: the length floor is one short sentence, 15 words (the paper's 50 rejects most articles of a
        statute: docs/data-steps.md); a CJK text counts characters instead of words (each other word
        counting as one), 20..150,000 of them, its stop words are `cjk_stop_chars` (occurrences of any),
        and the mean word length of a Chinese text is taken over jieba's words: 1.2..6 characters (real
        Chinese averages 1.9-2.3; mojibake and character soup fall to 1.0-1.1). Japanese and Korean texts
        are not judged on word length (no segmenter for them here)."""
        self.doc_words = (min_doc_words, max_doc_words)
        self.cjk_doc_chars = (cjk_min_doc_chars, cjk_max_doc_chars)
        self.avg_word_length = (min_avg_word_length, max_avg_word_length)
        self.cjk_avg_word_length = (cjk_min_avg_word_length, cjk_max_avg_word_length)
        self.max_symbol_word_ratio = max_symbol_word_ratio
        self.max_bullet_lines_ratio = max_bullet_lines_ratio
        self.max_ellipsis_lines_ratio = max_ellipsis_lines_ratio
        self.min_alpha_words_ratio = min_alpha_words_ratio
        self.min_stop_words = min_stop_words
        self.stop_words = frozenset(stop_words)
        self.cjk_stop_chars = frozenset(cjk_stop_chars)

    def check_length(self, view: TextView) -> str | None:
        """The length rules alone (the quality step asks again after C4 has removed lines)."""
        n = len(view.words)
        low, high = self.cjk_doc_chars if view.cjk else self.doc_words
        if low is not None and n < low:
            return "too_few_words"
        if high is not None and n > high:
            return "too_many_words"
        return None

    def check(self, view: TextView) -> str | None:
        if rule := self.check_length(view):
            return rule
        words, text = view.words, view.text
        n = len(words)
        if n == 0:  # only reachable without a floor; every ratio below divides by n
            return None

        if view.cjk:
            measured = view.segmented_words if view.chinese else []
            low, high = self.cjk_avg_word_length
        else:  # the words of a mixed text's Latin part: its CJK characters are one-character tokens
            measured = [w for w in words if not CJK.match(w)]
            low, high = self.avg_word_length
        if measured:
            mean_length = sum(map(len, measured)) / len(measured)
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
            # Occurrences, as datatrove counts them, of both lists: a mixed text's stop words may be in
            # either. English compared lower-cased so "The" counts.
            found = sum(w.lower() in self.stop_words for w in words) + sum(c in self.cjk_stop_chars for c in text)
            if found < self.min_stop_words:
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


def _ngrams(tokens: list[str], n: int) -> list[tuple[str, ...]]:
    return list(zip(*(tokens[k:] for k in range(n))))


def _top_ngram_chars(tokens: list[str], n: int, sep: str) -> int:
    """Characters covered by all occurrences of the most frequent n-gram, 0 when no n-gram repeats.
    datatrove counts a top n-gram seen once too, which rejects every page of a dozen words as repetitive."""
    gram, count = Counter(_ngrams(tokens, n)).most_common(1)[0]
    return len(sep.join(gram)) * count if count > 1 else 0


def _dup_ngram_chars(tokens: list[str], n: int) -> int:
    """Characters in repeated n-grams, scanning left to right and jumping past each repeat so overlapping
    repeats are not counted twice (datatrove's `find_all_duplicate`)."""
    grams = _ngrams(tokens, n)
    seen: set[tuple[str, ...]] = set()
    chars = i = 0
    while i < len(grams):
        if grams[i] in seen:
            chars += sum(map(len, grams[i]))
            i += n
        else:
            seen.add(grams[i])
            i += 1
    return chars


NGrams = tuple[tuple[int, float], ...]


class GopherRepetition:
    def __init__(
        self,
        dup_line_frac: float | None = 0.3,
        dup_para_frac: float | None = 0.3,
        dup_line_char_frac: float | None = 0.2,
        dup_para_char_frac: float | None = 0.2,
        top_n_grams: NGrams = ((2, 0.2), (3, 0.18), (4, 0.16)),
        dup_n_grams: NGrams = ((5, 0.30), (6, 0.28), (7, 0.26), (8, 0.24), (9, 0.22), (10, 0.20)),
        cjk_top_n_grams: NGrams = ((3, 0.30), (5, 0.27), (6, 0.24)),
        cjk_dup_n_grams: NGrams = ((8, 0.60), (9, 0.56), (11, 0.52), (12, 0.48), (14, 0.44), (16, 0.40)),
        min_ngram_words: int | None = 50,
        cjk_min_ngram_chars: int | None = 75,
    ):
        """Gopher table A1: reject when more than the given fraction of lines/paragraphs (or of their
        characters) are duplicates, when the most frequent 2/3/4-gram covers more than 20/18/16% of the
        characters, or when repeated 5..10-grams cover more than 15..10% of them. Empty `top_n_grams` or
        `dup_n_grams` turns those rules off.

        Ours: repeated n-grams may cover twice the paper's share (0.30..0.20): statutes repeat their
        formulas. A CJK text's n-grams are of characters, n the paper's times 1.56 characters a word
        (`cjk_top_n_grams` 3, 5, 6 at 1.5 times the paper's shares, `cjk_dup_n_grams` 8..16 at 4 times:
        legal Chinese repeats whole sentencing formulas). The n-gram rules judge only texts of at least
        `min_ngram_words` words (`cjk_min_ngram_chars` characters), the length the paper fitted them on.
        Validation: docs/data-steps.md."""
        self.dup_line_frac = dup_line_frac
        self.dup_para_frac = dup_para_frac
        self.dup_line_char_frac = dup_line_char_frac
        self.dup_para_char_frac = dup_para_char_frac
        self.n_grams = (tuple(top_n_grams), tuple(dup_n_grams))
        self.cjk_n_grams = (tuple(cjk_top_n_grams), tuple(cjk_dup_n_grams))
        self.min_ngram_words = min_ngram_words
        self.cjk_min_ngram_chars = cjk_min_ngram_chars

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

        floor = self.cjk_min_ngram_chars if view.cjk else self.min_ngram_words
        if floor is not None and len(view.words) < floor:
            return None
        tokens = view.tokens
        top_n_grams, dup_n_grams = self.cjk_n_grams if view.cjk else self.n_grams
        # A CJK n-gram's characters are its tokens' characters; its rules are named for what they count.
        sep, unit = ("", "_char") if view.cjk else (" ", "")
        for n, frac in top_n_grams:
            if len(tokens) >= n and _top_ngram_chars(tokens, n, sep) / size > frac:
                return f"top_{n}{unit}_gram"
        for n, frac in dup_n_grams:
            if len(tokens) >= n and _dup_ngram_chars(tokens, n) / size > frac:
                return f"dup_{n}{unit}_gram"
        return None
