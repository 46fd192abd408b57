"""Normalize step: each rule positive and negative (LaTeX and full-width examples included), switches,
per-rule counts and the empty-document rejection."""

import pytest

from bessemer.data.document import Document
from bessemer.data.text.normalize import (
    NormalizeStep,
    fold_whitespace,
    normalize_latex,
    remove_controls,
    to_halfwidth,
)

ONLY = {"encoding": False, "nfc": False, "controls": False, "fullwidth": False, "latex": False, "whitespace": False}


def only(rule: str, text: str, metadata: dict | None = None, **options) -> str:
    """`text` after one rule alone, through the step."""
    step = NormalizeStep(**(ONLY | {rule: True} | options))
    (doc,) = step.run([Document("d", text, metadata or {})])
    return doc.text


# --- encoding and NFC ---------------------------------------------------------------------------------------


def test_encoding_repairs_mojibake():
    pytest.importorskip("ftfy")
    assert only("encoding", "cafÃ© â€” naÃ¯ve") == "café — naïve"
    broken = "中文 text".encode().decode("windows-1252")  # UTF-8 bytes read as Windows-1252
    assert broken != "中文 text" and only("encoding", broken) == "中文 text"


def test_encoding_is_conservative():
    pytest.importorskip("ftfy")
    text = "Use &lt;b&gt; for bold, “smart quotes”, ﬁne ligatures and ＡＢＣ stay."
    assert only("encoding", text) == text
    assert only("encoding", "lone \udcff surrogate") == "lone \ufffd surrogate"


def test_nfc():
    assert only("nfc", "cafe\u0301") == "café"
    assert only("nfc", "café") == "café"


# --- controls -------------------------------------------------------------------------------------------------


def test_controls_removed():
    assert remove_controls("zero\u200bwidth\u200c\u200d\u2060\ufeffs") == "zerowidths"
    assert remove_controls("bell\x07 esc\x1b del\x7f c1\x85\x9f") == "bell esc del c1"
    assert remove_controls("dos\r\nmac\rline") == "dos\nmac\nline"


def test_controls_keep_newline_and_tab():
    assert remove_controls("a\tb\nc") == "a\tb\nc"
    assert remove_controls("plain text, 中文。") == "plain text, 中文。"


# --- fullwidth -----------------------------------------------------------------------------------------------


def test_fullwidth_ascii_to_halfwidth():
    assert to_halfwidth("ＡＢＣｘｙｚ０１２３＃＄％＆＠［］｛｝～") == "ABCxyz0123#$%&@[]{}~"
    assert to_halfwidth("第一\u3000第二") == "第一 第二"


def test_fullwidth_keeps_cjk_punctuation_by_default():
    text = "你好，世界。问：为什么？答：因为（见「附录」）！；"
    assert to_halfwidth(text) == text
    assert to_halfwidth(text, cjk_punctuation=True) == '你好,世界.问:为什么?答:因为(见"附录")!;'
    assert only("fullwidth", "Ｈｉ，ｙｏｕ。", cjk_punctuation=True) == "Hi,you."


def test_fullwidth_leaves_other_text_alone():
    assert to_halfwidth("half-width ASCII, 汉字 and ｶﾀｶﾅ") == "half-width ASCII, 汉字 and ｶﾀｶﾅ"


# --- whitespace ----------------------------------------------------------------------------------------------


def test_whitespace_folding():
    assert fold_whitespace("  a   b\t\tc  \nd \u00a0 e") == "a b c\nd e"
    assert fold_whitespace("\n\npara one\n\n\n\n\npara two\n\n\n") == "para one\n\npara two"
    assert fold_whitespace("one\n\ntwo") == "one\n\ntwo"


def test_whitespace_keeps_code_indentation():
    code = "def f(x):\n    if x:\n\t\treturn  x   # two spaces kept\n\n\n\n    return 0   "
    expected = "def f(x):\n    if x:\n\t\treturn  x   # two spaces kept\n\n    return 0"
    assert only("whitespace", code, {"domain": "code"}) == expected
    assert only("whitespace", code, {"domain": "code"}, keep_code_indent=False).startswith("def f(x):\nif x:\nreturn x")
    assert only("whitespace", code, {"domain": "web"}).startswith("def f(x):\nif x:")


def test_whitespace_keeps_fenced_code_indentation():
    text = "Example:   see\n```python\nfor i in x:\n    print(i)   \n```\n   after"
    assert fold_whitespace(text) == "Example: see\n```python\nfor i in x:\n    print(i)\n```\nafter"


# --- latex ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "before, after",
    [
        (r"where \( x + y \) holds", r"where $x + y$ holds"),
        (r"then \[ a^2 + b^2 = c^2 \] follows", r"then $$a^2 + b^2 = c^2$$ follows"),
        ("\\[\nE = mc^2\n\\]", "$$\nE = mc^2\n$$"),
        (r"\begin{equation*} E = mc^2 \end{equation*}", r"$$E = mc^2$$"),
        (r"\begin{equation}\int f\,dx\end{equation}", r"$$\int f\,dx$$"),
        (r"\begin{displaymath}x\end{displaymath}", r"$$x$$"),
        (r"\begin{math}x\end{math}", r"$x$"),
        (r"$\left( \frac{a}{b} \right)^2$", r"$( \frac{a}{b} )^2$"),
        (r"$\left[ x \right]$ and $\left\{ y \right\}$", r"$[ x ]$ and $\{ y \}$"),
        (r"$\left. \frac{df}{dx} \right|_{x=0}$", r"$ \frac{df}{dx} |_{x=0}$"),
        (r"$x   +    y$", r"$x + y$"),
        (r"$$ a  +   b $$", r"$$a + b$$"),
    ],
)
def test_latex_canonical_form(before, after):
    assert normalize_latex(before) == after


@pytest.mark.parametrize(
    "text",
    [
        r"$\left\langle a \right\rangle$",  # not a plain delimiter: \left/\right kept
        r"$\left( a \right\rangle$",  # a mixed pair: rewriting half of it would break it
        r"$x \leftarrow y$",
        r"a \\[2pt] b",  # a LaTeX line break, not display math
        "It costs $5 and $10 in total.",
        "Plain prose with no math at all.",
        r"\begin{align*} a &= b \\ c &= d \end{align*}",  # alignment needs its environment
        "```\nre.compile(r'\\[(.*?)\\]')\n```",  # a regex in fenced code
    ],
)
def test_latex_left_alone(text):
    assert normalize_latex(text) == text


def test_latex_skips_code_documents():
    code = r"pattern = r'\(\d+\)'"
    assert only("latex", code, {"domain": "code"}) == code
    assert only("latex", code, {"domain": "web"}) == r"pattern = r'$\d+$'"


# --- the step ------------------------------------------------------------------------------------------------


def test_counts_per_rule():
    step = NormalizeStep(encoding=False)
    docs = [
        Document("a", "ＡＢＣ  and \\(x\\)"),  # fullwidth, latex, whitespace
        Document("b", "zero\u200bwidth"),  # controls
        Document("c", "cafe\u0301"),  # nfc
        Document("d", "already clean"),
    ]
    out = list(step.run(docs))
    assert [d.text for d in out] == ["ABC and $x$", "zerowidth", "café", "already clean"]
    assert step.stats() == {
        "docs_in": 4,
        "docs_out": 4,
        "rejected": {},
        "changed": {"nfc": 1, "controls": 1, "fullwidth": 1, "latex": 1, "whitespace": 1},
    }


def test_empty_document_is_rejected():
    seen = []
    step = NormalizeStep(encoding=False, reject=seen.append)
    out = list(step.run([Document("z", "\u200b \ufeff\n\n\t"), Document("ok", "text")]))
    assert [d.id for d in out] == ["ok"]
    assert [(d.id, d.metadata["reason"]) for d in seen] == [("z", "normalize.empty")]
    assert step.stats()["rejected"] == {"normalize.empty": 1}


def test_all_rules_off_is_identity():
    text = "  ＡＢＣ \u200b \\(x\\)  \n\n\n\n"
    (doc,) = NormalizeStep(**ONLY).run([Document("d", text)])
    assert doc.text == text


def test_rejected_without_callback_are_kept_on_the_step():
    step = NormalizeStep(encoding=False)
    assert list(step.run([Document("e", "   ")])) == []
    assert [d.metadata["reason"] for d in step.rejected] == ["normalize.empty"]


def test_no_torch_import():
    import subprocess
    import sys

    code = "import sys, bessemer.data.text.normalize, bessemer.data.quality.filter; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
