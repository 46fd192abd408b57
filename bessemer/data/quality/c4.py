"""C4's rules (Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified Text-to-Text
Transformer", section 2.2), with datatrove's `C4QualityFilter` defaults. Line rules drop lines; lorem
ipsum, a curly bracket and too few sentences drop the page.

Markdown awareness (ours, on by default) keeps long-tail pages whole: lines of fenced code blocks are not
judged at all; headings, list items, table rows and a line ending in ":" that introduces one of them or a
code block are exempt from the terminal-punctuation and words-per-line rules; the curly-bracket rule
ignores `inline code` and $math$. Without it the rules are datatrove's, line for line.
"""

import re
from collections import Counter

from bessemer.data.text.measure import (
    CJK_TERMINAL,
    TextView,
    count_sentences,
    is_heading,
    is_list_item,
    is_table_row,
    is_word,
    tokenize,
)
from bessemer.data.text.script import cjk_ratio

CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
END_PUNCTUATION = (".", "?", "!", '"', "'")
POLICY_SUBSTRINGS: tuple[str, ...] = (
    "terms of use",
    "privacy policy",
    "cookie policy",
    "uses cookies",
    "use of cookies",
    "use cookies",
)
_INLINE_CODE = re.compile(r"`[^`\n]+`")
_MATH = re.compile(r"\$\$.+?\$\$|\$[^$\n]+\$", re.DOTALL)


class C4Quality:
    def __init__(
        self,
        filter_no_terminal_punct: bool = False,
        min_words_per_line: int | None = 3,
        cjk_min_chars_per_line: int | None = 5,
        min_num_sentences: int | None = 1,
        max_word_length: int | None = 1000,
        remove_citations: bool = True,
        filter_lorem_ipsum: bool = True,
        filter_javascript: bool = True,
        filter_curly_bracket: bool = False,
        filter_policy: bool = True,
    ):
        """C4: keep only lines ending in terminal punctuation (. ? ! " ', not "...", plus 。！？；… and closing
        CJK quotes on a CJK line) with at least 3 words; drop lines with a word over 1000 characters,
        mentioning "javascript" or a cookie/terms phrase; drop the page on "lorem ipsum", on "{", or when
        fewer than 5 sentences remain.

        Ours: the terminal-punctuation rule is off (FineWeb's setting), so is the curly-bracket rule (it
        drops documentation with unfenced code; JavaScript pages are the extract step's), and one sentence
        must remain, not five (the length floor is Gopher's); a CJK line needs 5 characters (3 words at
        1.56 characters a word). Each line is judged by its own script. docs/data-steps.md has the numbers."""
        self.filter_no_terminal_punct = filter_no_terminal_punct
        self.min_words_per_line = min_words_per_line
        self.cjk_min_chars_per_line = cjk_min_chars_per_line
        self.min_num_sentences = min_num_sentences
        self.max_word_length = max_word_length
        self.remove_citations = remove_citations
        self.filter_lorem_ipsum = filter_lorem_ipsum
        self.filter_javascript = filter_javascript
        self.filter_curly_bracket = filter_curly_bracket
        self.filter_policy = filter_policy

    def _structural(self, lines: list[str], i: int, code: list[bool]) -> bool:
        line = lines[i]
        if is_heading(line) or is_list_item(line) or is_table_row(line):
            return True
        if line.rstrip().endswith((":", "：")):
            following = next((j for j in range(i + 1, len(lines)) if lines[j].strip()), None)
            return following is not None and (
                code[following] or is_list_item(lines[following]) or is_table_row(lines[following])
            )
        return False

    def apply(self, view: TextView, markdown_aware: bool = True) -> tuple[str, str | None, Counter]:
        """(new text, the page-level rule that failed or None, lines removed per rule)."""
        lines = view.lines
        code = view.code if markdown_aware else [False] * len(lines)
        removed: Counter[str] = Counter()
        kept: list[str] = []
        sentences = 0
        for i, raw in enumerate(lines):
            if code[i] or not raw.strip():
                kept.append(raw)
                continue
            line = raw.strip()
            words = line.split()
            if self.max_word_length is not None and any(len(w) > self.max_word_length for w in words):
                removed["too_long_word"] += 1
                continue
            if self.remove_citations:
                line = CITATION.sub("", line)
            structural = markdown_aware and self._structural(lines, i, code)
            # Judged by the line's own script: a Chinese sentence in an English page has no spaces to count
            # and ends in 。
            cjk_line = cjk_ratio(line) >= view.cjk_threshold
            terminal = END_PUNCTUATION + CJK_TERMINAL if cjk_line else END_PUNCTUATION
            if (
                self.filter_no_terminal_punct
                and not structural
                and (not line.endswith(terminal) or line.endswith("..."))
            ):
                removed["no_terminal_punct"] += 1
                continue
            min_words = self.cjk_min_chars_per_line if cjk_line else self.min_words_per_line
            if min_words is not None and not structural:
                n_words = sum(map(is_word, tokenize(line))) if cjk_line else len(words)
                if n_words < min_words:
                    removed["too_few_words"] += 1
                    continue
            lower = line.lower()
            if self.filter_lorem_ipsum and "lorem ipsum" in lower:
                return view.text, "lorem_ipsum", removed
            if self.filter_javascript and "javascript" in lower:
                removed["javascript"] += 1
                continue
            if self.filter_curly_bracket:
                judged = _MATH.sub("", _INLINE_CODE.sub("", line)) if markdown_aware else line
                if "{" in judged:
                    return view.text, "curly_bracket", removed
            if self.filter_policy and any(p in lower for p in POLICY_SUBSTRINGS):
                removed["policy"] += 1
                continue
            if not (structural and (is_heading(line) or is_table_row(line))):
                sentences += count_sentences(line)
            kept.append(line)
        if self.min_num_sentences is not None and sentences < self.min_num_sentences:
            return view.text, "too_few_sentences", removed
        return "\n".join(kept), None, removed
