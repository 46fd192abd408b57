"""Phone numbers: China's by its numbering plan, every other country's through libphonenumber (Google's
metadata, the `phonenumberslite` package), read with the document's script as the region hint.

`detect_phones(text) -> list[Span]`; numbers with a unit, a code label or an ordinal before them are left
alone (common.not_personal_number), as are pieces of longer tokens.
"""

import re
from functools import lru_cache

from bessemer.data.pii.common import (
    NUM_END,
    NUM_START,
    Span,
    mostly_han,
    not_personal_number,
)

# China's numbers by China's numbering plan (stricter than libphonenumber's metadata, which takes 010-12345678
# and 099-62345678); every other country's through libphonenumber below.
# CN mobile: 1[3-9]x xxxx xxxx, separators space / - / ., optional +86, 0086 or (+86) prefix.
_CN_MOBILE = re.compile(
    rf"(?<!\+){NUM_START}(?:(?:\+|00)86[ -]?|[(（]\+?86[)）][ -]?)?1[3-9]\d(?:[ .-]?\d{{4}}){{2}}{NUM_END}"
)
# CN landline: area code 0xx / 0xxx (parenthesised, or followed by - or space), 7-8 digit local number
# (never starting with 0 or 1), optional extension.
_CN_LANDLINE = re.compile(
    rf"{NUM_START}(?:\+86[ -]?)?(?P<area>[(（]0?\d{{2,3}}[)）]|0?\d{{2,3}}[ -])[ ]?"
    rf"[2-9]\d{{2,3}}[ -]?\d{{4}}(?:(?:-|转)\d{{1,5}})?{NUM_END}"
)
# Seven digits with at most separators between them: the cheap test before libphonenumber is asked.
_PHONE_HINT = re.compile(r"\d(?:[ ().\-]{0,2}\d){6}")
# A phone word shortly before a number: then an unformatted national number counts as well.
_PHONE_CUE = re.compile(
    r"(?:电话|手机|座机|致电|拨打|热线|传真|联系方式|\b(?:phone|tel|telephone|call|cell|mobile|fax|dial|text|sms|"
    r"whatsapp|contact|reach|number)\b)[^\n]{0,16}$",
    re.IGNORECASE,
)
_PHONE_CUE_AFTER = re.compile(r"\s*\((?:cell|mobile|home|work|office|fax|tel)\)", re.IGNORECASE)
_NANP = re.compile(r"[2-9]\d\d[2-9]\d{6}")


def _valid_area_code(area: str, plus86: bool) -> bool:
    digits = re.sub(r"\D", "", area)
    if plus86 and not digits.startswith("0"):
        digits = "0" + digits
    if not digits.startswith("0"):
        return False
    # 3-digit codes are Beijing (010) and the 02x large cities; all others are 4 digits 03xx-09xx.
    return (
        digits == "010" or digits.startswith("02") if len(digits) == 3 else len(digits) == 4 and digits[1] in "3456789"
    )


@lru_cache(maxsize=1)
def _phonenumbers():
    try:
        import phonenumbers
    except ImportError as e:  # pragma: no cover - a core dependency
        raise ImportError("phone number detection needs libphonenumber: pip install phonenumberslite") from e
    return phonenumbers


def _world_phones(text: str, regions: tuple[str, ...] | None) -> list[Span]:
    """Numbers libphonenumber finds, read as national numbers of `regions` in turn (the document's own
    first), kept when valid for their country. A number in a range not (yet) assigned also counts when it
    is written as a phone number: in international form with a possible length (+81 3-0538-0604), or North
    American with separators or a phone word before it ((776)790-7583x0098)."""
    pn = _phonenumbers()
    spans = []
    for lo, hi in _hint_windows(text):  # libphonenumber reads only the stretches around 7+ digit runs
        regions = regions or (("CN", "US") if mostly_han(text) else ("US", "CN"))
        window = text[lo:hi]
        for region in regions:
            for m in pn.PhoneNumberMatcher(window, region, leniency=pn.Leniency.POSSIBLE):
                if s := _world_phone(text, lo + m.start, lo + m.end, m.raw_string, m.number):
                    spans.append(s)
    return spans


def _hint_windows(text: str, margin: int = 32):
    """Merged [start - margin, end + margin] ranges around the phone hints of `text`."""
    lo = hi = -1
    for m in _PHONE_HINT.finditer(text):
        s, e = max(0, m.start() - margin), m.end() + margin
        if s > hi:
            if hi >= 0:
                yield lo, hi
            lo = s
        hi = max(hi, e)
    if hi >= 0:
        yield lo, hi


def _world_phone(text: str, start: int, end: int, raw: str, number) -> Span | None:
    """The libphonenumber match text[start:end] as a PHONE span when the rules of `_world_phones` keep it."""
    pn = _phonenumbers()
    if number.country_code == 86:
        return None  # China: by the rules above
    body = re.split(r"(?i)\s*(?:x|ext\.?|#|转)\s*\d+$", raw)[0]
    plain = body.isdigit()
    if "." in body and min(len(g) for g in re.findall(r"\d+", body)) < 3:
        return None  # a decimal number (+35236450.6), not dotted groups (414.260.0584)
    cued = bool(_PHONE_CUE.search(text, max(0, start - 28), start) or _PHONE_CUE_AFTER.match(text, end))
    nanp = number.country_code == 1 and _NANP.fullmatch(pn.national_significant_number(number))
    international = raw.startswith(("+", "00"))
    if pn.is_valid_number(number):
        ok = not plain or cued or len(body) == 10
    else:  # unassigned ranges: still a phone number when written as one
        ok = (bool(nanp) and (not plain or cued)) or (international and pn.is_possible_number(number))
    return Span(start, end, "PHONE", raw) if ok else None


def detect_phones(text: str, regions: tuple[str, ...] | None = None) -> list[Span]:
    """`regions`: where national numbers are read first (default: CN then US for mostly-Han text, US then
    CN otherwise; CN's "00" prefix also reads 001-561-... as a +1 number)."""
    spans = [Span(m.start(), m.end(), "PHONE", m.group()) for m in _CN_MOBILE.finditer(text)]
    for m in _CN_LANDLINE.finditer(text):
        if _valid_area_code(m.group("area"), m.group().startswith("+86")):
            spans.append(Span(m.start(), m.end(), "PHONE", m.group()))
    spans += _world_phones(text, regions)
    return sorted({s for s in spans if _bounded(text, s) and not not_personal_number(text, s.start, s.end)})


def _bounded(text: str, s: Span) -> bool:
    """Not a piece of a longer token: no letter or digit glued on either side, no decimal continuation."""
    before, after = text[max(0, s.start - 2) : s.start], text[s.end : s.end + 2]
    return not re.search(r"[0-9A-Za-z]$|\d[.,]$", before) and not re.match(r"[0-9A-Za-z]|[.,]\d", after)
