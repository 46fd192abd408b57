"""The CJK character classes, in one place for bessemer (data steps and tokenizer statistics): which
characters are Han, kana or Hangul, and how much of a text is CJK. Imports nothing, so every step (quality,
PII, segmentation, dedup) and the tokenizer can use it."""

import re

# Han: unified ideographs, extensions A and B, the compatibility block.
HAN_CHARS = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002a6df"
# Kana: hiragana, katakana, half-width katakana.
KANA_CHARS = "\u3040-\u30ff\uff66-\uff9f"
# Hangul: jamo, compatibility jamo, syllables.
HANGUL_CHARS = "\u1100-\u11ff\u3130-\u318f\uac00-\ud7af"
CJK_CHARS = HAN_CHARS + KANA_CHARS + HANGUL_CHARS

HAN = re.compile(f"[{HAN_CHARS}]")
HAN_RUN = re.compile(f"[{HAN_CHARS}]+")
CJK = re.compile(f"[{CJK_CHARS}]")
KANA_HANGUL = re.compile(f"[{KANA_CHARS}{HANGUL_CHARS}]")
_LETTER = re.compile(r"[^\W\d_]")  # a word character that is not a digit or "_": a letter


def cjk_ratio(text: str) -> float:
    """Share of letters that are CJK characters."""
    cjk = len(CJK.findall(text))
    if not cjk:  # most text, answered without counting letters
        return 0.0
    return cjk / len(_LETTER.findall(text))
