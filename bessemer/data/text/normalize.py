"""Text normalization: the `NormalizeStep` pipeline step and one function per rule.

Rules, in the order they run (each switchable, each counted by the documents it changed):
encoding (ftfy mojibake repair), nfc, controls (zero-width and C0/C1 controls), fullwidth (full-width ASCII
to half-width), latex (one canonical math markup), whitespace (folding). A document left empty is
rejected `normalize.empty`. Rules and examples: docs/data-steps.md.
"""

import re
import unicodedata
from collections import Counter

from bessemer.data.document import Document
from bessemer.data.steps import Reject, Step
from bessemer.data.text.measure import code_mask

RULES: tuple[str, ...] = ("encoding", "nfc", "controls", "fullwidth", "latex", "whitespace")

# --- encoding -------------------------------------------------------------------------------------------

_SURROGATE = re.compile("[\ud800-\udfff]")


def _ftfy_config():
    try:
        import ftfy
    except ImportError as e:
        raise ImportError(
            "mojibake repair needs ftfy: pip install 'ftfy>=6.1' (or NormalizeStep(encoding=False))"
        ) from e
    # Conservative: repair encodings only. No HTML unescaping (code quotes &lt; on purpose), no quote
    # uncurling, no ligature or width folding (the fullwidth rule owns width), and no control-character or
    # line-break edits (the controls rule owns those, so each change is counted once, under its rule).
    config = ftfy.TextFixerConfig(
        unescape_html=False,
        fix_latin_ligatures=False,
        fix_character_width=False,
        uncurl_quotes=False,
        fix_line_breaks=False,
        remove_control_chars=False,
        normalization=None,
        explain=False,
    )
    return ftfy.fix_text, config


def fix_encoding(text: str, _fixer=None) -> str:
    """Mojibake repair with ftfy ("cafÃ©" -> "café"); lone surrogates left by a lenient decoder become U+FFFD
    so the text can always be written as UTF-8."""
    fix_text, config = _fixer or _ftfy_config()
    return _SURROGATE.sub("\ufffd", fix_text(text, config))


# --- controls -------------------------------------------------------------------------------------------

# Zero-width space/non-joiner/joiner, word joiner, BOM; C0 controls but \t \n; DEL; C1 controls.
_INVISIBLE = re.compile("[\u200b-\u200d\u2060\ufeff\x00-\x08\x0b-\x1f\x7f-\x9f]")


def remove_controls(text: str) -> str:
    """Drop zero-width and control characters; CR and CRLF line ends become \\n first (a lone CR is a line
    break, not noise)."""
    return _INVISIBLE.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


# --- fullwidth ------------------------------------------------------------------------------------------

# Full-width forms U+FF01-U+FF5E sit exactly 0xFEE0 above ASCII U+0021-U+007E.
_FULLWIDTH = {cp: cp - 0xFEE0 for cp in range(0xFF01, 0xFF5F)} | {0x3000: 0x20}
CJK_PUNCTUATION = "，。：；！？（）「」"
_CJK_TO_ASCII = {ord(k): v for k, v in zip(CJK_PUNCTUATION, ',.:;!?()""')}
_TABLE_KEEP_CJK = {k: v for k, v in _FULLWIDTH.items() if chr(k) not in CJK_PUNCTUATION}
_TABLE_ALL = _FULLWIDTH | _CJK_TO_ASCII


def to_halfwidth(text: str, cjk_punctuation: bool = False) -> str:
    """ＡＢＣ１２３＃ -> ABC123#, ideographic space -> space. The CJK punctuation ，。：；！？（）「」 is
    Chinese typography, not width noise: converted only with `cjk_punctuation=True`."""
    return text.translate(_TABLE_ALL if cjk_punctuation else _TABLE_KEEP_CJK)


# --- latex ----------------------------------------------------------------------------------------------

# An escaped backslash (\\[2pt] is a LaTeX line break) never opens or closes math.
_ENV_DISPLAY = re.compile(r"\\begin\{(equation\*?|displaymath)\}(.*?)\\end\{\1\}", re.DOTALL)
_ENV_INLINE = re.compile(r"\\begin\{math\}(.*?)\\end\{math\}", re.DOTALL)
_BRACKET_DISPLAY = re.compile(r"(?<!\\)\\\[(.+?)(?<!\\)\\\]", re.DOTALL)
_PAREN_INLINE = re.compile(r"(?<!\\)\\\((.+?)(?<!\\)\\\)", re.DOTALL)
# $$..$$, or $..$ by pandoc's rule: no space inside either dollar, closing $ not followed by a digit
# (so "costs $5 and $10" is not math).
_MATH = re.compile(
    r"(?<!\\)\$\$(.+?)(?<!\\)\$\$|(?<![\\$])\$(?![\s$])((?:\\.|[^$\\\n])+?)(?<!\s)\$(?![\d$])", re.DOTALL
)
_LEFT_RIGHT = re.compile(r"\\(?:left|right)(?![A-Za-z])")
_LEFT_RIGHT_PLAIN = re.compile(r"\\(?:left|right)\s*([()\[\].|]|\\[{}])")


def _edge_strip(s: str) -> str:
    return s.strip(" \t")


def _clean_math(body: str) -> str:
    # \left/\right must go in pairs or the formula stops compiling: rewrite only when every one of them in
    # this formula has a plain delimiter ( ) [ ] \{ \} | or the invisible `.`.
    commands = _LEFT_RIGHT.findall(body)
    if commands and len(commands) == len(_LEFT_RIGHT_PLAIN.findall(body)):
        body = _LEFT_RIGHT_PLAIN.sub(lambda m: "" if m.group(1) == "." else m.group(1), body)
    # Spaces only: a newline inside display math may end a % comment.
    return re.sub(r"[ \t]+", " ", body)


def _math_sub(m: re.Match) -> str:
    if m.group(1) is not None:
        return "$$" + _edge_strip(_clean_math(m.group(1))) + "$$"
    return "$" + _clean_math(m.group(2)) + "$"


def normalize_latex_prose(text: str) -> str:
    text = _ENV_DISPLAY.sub(lambda m: "$$" + _edge_strip(m.group(2)) + "$$", text)
    text = _ENV_INLINE.sub(lambda m: "$" + m.group(1).strip() + "$", text)
    text = _BRACKET_DISPLAY.sub(lambda m: "$$" + _edge_strip(m.group(1)) + "$$", text)
    text = _PAREN_INLINE.sub(lambda m: "$" + m.group(1).strip() + "$", text)
    return _MATH.sub(_math_sub, text)


def normalize_latex(text: str) -> str:
    r"""One math markup: \(x\) -> $x$, \[x\] and \begin{equation(*)}/{displaymath} -> $$x$$, \begin{math}
    -> $x$; inside math, \left( \right) and friends -> ( ), runs of spaces -> one. Fenced code is left
    alone (a regex's \[ is not math)."""
    if "\\" not in text and "$" not in text:
        return text
    lines = text.split("\n")
    mask = code_mask(lines)
    out, chunk = [], []
    for line, code in zip(lines, mask):
        if code:
            if chunk:
                out.append(normalize_latex_prose("\n".join(chunk)))
                chunk = []
            out.append(line)
        else:
            chunk.append(line)
    if chunk:
        out.append(normalize_latex_prose("\n".join(chunk)))
    return "\n".join(out)


# --- whitespace -----------------------------------------------------------------------------------------

_INLINE_SPACE = re.compile(r"[^\S\n]+")
_BLANK_RUN = re.compile(r"\n{3,}")


def fold_whitespace(text: str, keep_indent: bool = False) -> str:
    """Runs of spaces/tabs -> one space and lines stripped; 3+ newlines -> 2; no blank lines at either end.
    Lines of fenced code blocks, and every line with `keep_indent`, only lose trailing whitespace."""
    lines = text.split("\n")
    mask = [True] * len(lines) if keep_indent else code_mask(lines)
    lines = [line.rstrip() if code else _INLINE_SPACE.sub(" ", line).strip() for line, code in zip(lines, mask)]
    return _BLANK_RUN.sub("\n\n", "\n".join(lines)).strip("\n")


# --- the step -------------------------------------------------------------------------------------------


class NormalizeStep(Step):
    """Pipeline step: applies the enabled rules to `doc.text`; `stats()["changed"]` counts, per rule, the
    documents it changed. Documents with `metadata["domain"] == "code"` keep their indentation
    (`keep_code_indent`) and their LaTeX-looking text."""

    name = "normalize"

    def __init__(
        self,
        encoding: bool = True,
        nfc: bool = True,
        controls: bool = True,
        fullwidth: bool = True,
        cjk_punctuation: bool = False,
        latex: bool = True,
        whitespace: bool = True,
        keep_code_indent: bool = True,
        reject: Reject | None = None,
    ):
        super().__init__(reject)
        self._fixer = _ftfy_config() if encoding else None  # fail at construction, not on the first doc
        self.enabled = {
            "encoding": encoding,
            "nfc": nfc,
            "controls": controls,
            "fullwidth": fullwidth,
            "latex": latex,
            "whitespace": whitespace,
        }
        self.cjk_punctuation = cjk_punctuation
        self.keep_code_indent = keep_code_indent
        self.changed: Counter[str] = Counter()

    def __repr__(self) -> str:
        on = [r for r in RULES if self.enabled[r]]
        return f"NormalizeStep(rules={on}, cjk_punctuation={self.cjk_punctuation})"

    def _apply(self, rule: str, text: str, is_code: bool) -> str:
        if rule == "encoding":
            return fix_encoding(text, self._fixer)
        if rule == "nfc":
            return unicodedata.normalize("NFC", text)
        if rule == "controls":
            return remove_controls(text)
        if rule == "fullwidth":
            return to_halfwidth(text, self.cjk_punctuation)
        if rule == "latex":
            return text if is_code else normalize_latex(text)
        assert rule == "whitespace", rule
        return fold_whitespace(text, keep_indent=is_code and self.keep_code_indent)

    def process(self, doc: Document) -> str | None:
        is_code = doc.metadata.get("domain") == "code"
        text = doc.text
        for rule in RULES:
            if self.enabled[rule]:
                new = self._apply(rule, text, is_code)
                if new != text:
                    self.changed[rule] += 1
                    text = new
        doc.text = text
        return "empty" if not text.strip() else None

    def stats(self) -> dict:
        return super().stats() | {"changed": {r: self.changed[r] for r in RULES if self.enabled[r]}}
