"""Boilerplate line removal: navigation, sharing, cookie and copyright lines that templates stamp on every
page. Runs before the quality filters so that a good article is not judged by its footer, and a page that
is nothing but template is left empty (rejected `quality.boilerplate.empty`)."""

import re

from bessemer.data.text.measure import code_mask

# A line is boilerplate when it is short and matches one of these. Short matters: "click here" inside a
# paragraph of real prose is the author's, a 40-character line saying it is the template's.
PATTERNS: tuple[str, ...] = (
    # English
    r"\ball rights reserved\b",
    r"\bclick here\b",
    r"^\W*subscribe\b|\bsubscribe (?:now|today|to our|for free)\b",
    (
        r"\b(?:this|our) (?:web)?site uses cookies\b|\bwe use cookies\b|\baccept (?:all )?cookies\b"
        r"|\bcookie (?:settings|preferences|policy)\b"
    ),
    # Error pages, login walls and region blocks: whole pages that are one or two template sentences, long
    # enough to pass the length floor of the quality filters.
    (
        r"\bpage (?:you (?:are|were) looking for|you requested)\b|\bpage (?:was )?not found\b"
        r"|\b404 (?:error|not found)\b"
        r"|\b(?:log|sign) in to (?:view|continue|read|access)\b|\bnot available in your (?:country|region)\b"
    ),
    # Chinese
    r"点击下载|欢迎访问|版权所有|上一篇|下一篇|分享到|扫一扫",
    r"页面不存在|页面已被删除|找不到该页面|登录后(?:才能)?(?:查看|阅读|继续)|请先登录|在您所在的地区无法",
)


class BoilerplateRemover:
    """Removes boilerplate lines (outside fenced code) no longer than `max_line_chars`."""

    def __init__(self, patterns: tuple[str, ...] = PATTERNS, max_line_chars: int = 200):
        self.pattern = re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE)
        self.max_line_chars = max_line_chars

    def is_boilerplate(self, line: str) -> bool:
        line = line.strip()
        return 0 < len(line) <= self.max_line_chars and self.pattern.search(line) is not None

    def apply(self, text: str) -> tuple[str, int]:
        """The text without its boilerplate lines, and how many lines went."""
        lines = text.split("\n")
        kept = [line for line, code in zip(lines, code_mask(lines)) if code or not self.is_boilerplate(line)]
        removed = len(lines) - len(kept)
        return ("\n".join(kept) if removed else text), removed
