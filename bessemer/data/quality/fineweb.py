"""FineWeb's own rules (Penedo et al. 2024, "The FineWeb Datasets", section 3.3.3), with datatrove's
`FineWebQualityFilter` defaults: they target list-like pages, pages of short lines and pages whose lines
repeat, which the Gopher and C4 rules let through."""

from bessemer.data.text.measure import CJK_TERMINAL, TextView, tokenize

# Ours: ";" too, which ends the items of a list that is one sentence (statutes, specifications), as "；" does
# in CJK text.
STOP_CHARS = (".", "'", '"', "!", "?", ";") + CJK_TERMINAL


class FineWebQuality:
    def __init__(
        self,
        line_punct_thr: float | None = 0.12,
        line_punct_exclude_zero: bool = False,
        short_line_thr: float | None = 0.67,
        short_line_length: int = 30,
        cjk_short_line_length: int = 8,
        char_duplicates_ratio: float | None = 0.1,
        new_line_ratio: float | None = 0.3,
    ):
        """Reject when at most 12% of lines end in punctuation (. ' " ! ? and CJK 。！？；… ” ’ 」 』), when at
        least 67% of lines are at most 30 characters, when duplicated lines hold at least 1% of the
        characters, or when there are more than 0.3 line breaks per word. Lines are the non-empty lines;
        with markdown awareness, those outside fenced code.

        Ours: ";" ends a line too; a CJK document's short line is at most 8 characters (30 Latin
        characters ≈ 5.3 English words ≈ 8.2 Chinese characters); duplicated lines may hold up to 10% of
        the characters (a statute repeats whole provisions). docs/data-steps.md has the numbers."""
        self.line_punct_thr = line_punct_thr
        self.line_punct_exclude_zero = line_punct_exclude_zero
        self.short_line_thr = short_line_thr
        self.short_line_length = short_line_length
        self.cjk_short_line_length = cjk_short_line_length
        self.char_duplicates_ratio = char_duplicates_ratio
        self.new_line_ratio = new_line_ratio

    def check(self, view: TextView, markdown_aware: bool = True) -> str | None:
        lines = [line.strip() for line in view.prose_lines(markdown_aware)]
        if not lines:  # nothing but code: these rules have nothing to judge
            return None
        n = len(lines)
        if self.line_punct_thr is not None:
            ratio = sum(line.endswith(STOP_CHARS) for line in lines) / n
            if ratio <= self.line_punct_thr and not (ratio == 0 and self.line_punct_exclude_zero):
                return "line_punct_ratio"
        short_length = self.cjk_short_line_length if view.cjk else self.short_line_length
        short = sum(len(line) <= short_length for line in lines) / n
        if self.short_line_thr is not None and short >= self.short_line_thr:
            return "short_line_ratio"
        if self.char_duplicates_ratio is not None:
            seen: set[str] = set()
            dup_chars = 0
            for line in lines:
                if line in seen:
                    dup_chars += len(line)
                seen.add(line)
            if dup_chars / sum(map(len, lines)) >= self.char_duplicates_ratio:
                return "char_dup_ratio"
        if self.new_line_ratio is not None:
            # Line breaks between non-empty lines: normalize leaves one blank line between paragraphs,
            # which says nothing about list-likeness.
            tokens = tokenize("\n".join(lines))
            if tokens and (n - 1) / len(tokens) > self.new_line_ratio:
                return "newline_ratio"
        return None
