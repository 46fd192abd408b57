"""Detectors for PII with a fixed shape: emails, phones, resident IDs, bank cards, IP addresses, passports.

Each detector is `detect_*(text) -> list[Span]`. Shape alone is not enough for numbers: IDs and cards must
pass their checksum (plus a plausible date/region or issuer), IPs must parse, and numbers labelled as
order/tracking/ISBN numbers are left alone, so dates, prices, versions and random long numbers survive.
"""

import datetime
import ipaddress
import re

from bessemer.data.pii_common import NUM_END, NUM_START, Span, after_business_cue

# --- email ----------------------------------------------------------------------------------------------

_EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9](?:[A-Za-z0-9._%+-]{0,62}[A-Za-z0-9_%+-])?"
    r"@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![A-Za-z0-9-])"
)


def detect_emails(text: str) -> list[Span]:
    return [Span(m.start(), m.end(), "EMAIL", m.group()) for m in _EMAIL.finditer(text)]


# --- phones ---------------------------------------------------------------------------------------------

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
# International E.164 with an explicit "+": country code, then 7-14 more digits in groups separated by
# spaces or dashes ("." would take signed decimals like +35236450.6).
_INTL = re.compile(
    r"(?<![0-9A-Za-z+])\+[1-9]\d{0,2}(?:[ -]?\(\d{1,4}\))?(?:[ -]?\d{1,4}){2,6}(?![0-9A-Za-z])(?![.,-]\d)"
)
# North American numbers without the country code: (415) 555-0132, 415-555-0132, 415.555.0132.
_NANP = re.compile(rf"{NUM_START}(?:\([2-9]\d{{2}}\) ?|[2-9]\d{{2}}[-.])[2-9]\d{{2}}[-.]\d{{4}}{NUM_END}")


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


def detect_phones(text: str) -> list[Span]:
    spans = [Span(m.start(), m.end(), "PHONE", m.group()) for m in _CN_MOBILE.finditer(text)]
    for m in _CN_LANDLINE.finditer(text):
        if _valid_area_code(m.group("area"), m.group().startswith("+86")):
            spans.append(Span(m.start(), m.end(), "PHONE", m.group()))
    for m in _INTL.finditer(text):
        if 8 <= len(re.sub(r"\D", "", m.group())) <= 15:
            spans.append(Span(m.start(), m.end(), "PHONE", m.group()))
    spans += [Span(m.start(), m.end(), "PHONE", m.group()) for m in _NANP.finditer(text)]
    return [s for s in spans if not after_business_cue(text, s.start)]


# --- CN resident identity card --------------------------------------------------------------------------

ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
ID_CHECK_CHARS = "10X98765432"
# GB/T 2260 provincial prefixes: 11-15 north, 21-23 north-east, 31-37 east, 41-46 south-central,
# 50-54 south-west, 61-65 north-west, 71 Taiwan, 81/82 Hong Kong/Macau, 91 (issued to some residents abroad).
PROVINCE_CODES = frozenset(
    [*range(11, 16), *range(21, 24), *range(31, 38), *range(41, 47), *range(50, 55), *range(61, 66), 71, 81, 82, 91]
)


def id_check_char(first17: str) -> str:
    """ISO 7064 MOD 11-2 check character of an 18-character resident ID."""
    return ID_CHECK_CHARS[sum(int(c) * w for c, w in zip(first17, ID_WEIGHTS)) % 11]


def _birth_date_ok(y: int, m: int, d: int, today: datetime.date) -> bool:
    try:
        born = datetime.date(y, m, d)
    except ValueError:
        return False
    return 1900 <= y and born <= today


def is_resident_id(s: str, today: datetime.date | None = None) -> bool:
    """An 18-character ID (region, YYYYMMDD birth date, sequence, MOD 11-2 check char) or a 15-digit legacy
    ID (region, YYMMDD birth date in 19xx, sequence; no check digit)."""
    today = today or datetime.date.today()
    s = s.upper()
    if len(s) == 18 and s[:17].isdigit() and (s[17].isdigit() or s[17] == "X"):
        return (
            int(s[:2]) in PROVINCE_CODES
            and _birth_date_ok(int(s[6:10]), int(s[10:12]), int(s[12:14]), today)
            and id_check_char(s[:17]) == s[17]
        )
    if len(s) == 15 and s.isdigit():
        return int(s[:2]) in PROVINCE_CODES and _birth_date_ok(1900 + int(s[6:8]), int(s[8:10]), int(s[10:12]), today)
    return False


_ID18 = re.compile(rf"{NUM_START}\d{{6}}([ -]?)\d{{8}}\1\d{{3}}[0-9Xx]{NUM_END}")
_ID15 = re.compile(rf"{NUM_START}\d{{15}}{NUM_END}")


# Legacy IDs have no check digit, so a 15-digit number labelled as a card/account (an Amex number with a
# typo: region 37, a 1966 birth date) is not taken as one.
_CARD_CUE = re.compile(
    r"(?:卡号|银行卡|信用卡|账号|帐号|(?<!ID )(?<!identity )\bcard|\baccount)(?:\s*(?:no\.?|number|#))?\s*[:：#]?\s*$",
    re.IGNORECASE,
)


def detect_resident_ids(text: str) -> list[Span]:
    spans = []
    for pattern in (_ID18, _ID15):
        for m in pattern.finditer(text):
            if not is_resident_id(re.sub(r"[ -]", "", m.group())) or after_business_cue(text, m.start()):
                continue
            if pattern is _ID15 and _CARD_CUE.search(text, max(0, m.start() - 16), m.start()):
                continue
            spans.append(Span(m.start(), m.end(), "ID_NUMBER", m.group()))
    return spans


# --- bank cards -----------------------------------------------------------------------------------------


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, c in enumerate(reversed(digits)):
        d = int(c)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def card_brand(digits: str) -> str | None:
    """The issuer network whose IIN range and card length fit `digits`, or None."""
    n = len(digits)
    p2, p4 = int(digits[:2]), int(digits[:4])
    if digits[0] == "4" and n in (13, 16, 19):
        return "visa"
    if (51 <= p2 <= 55 or 2221 <= p4 <= 2720) and n == 16:
        return "mastercard"
    if p2 in (34, 37) and n == 15:
        return "amex"
    if p2 == 62 and 16 <= n <= 19:
        return "unionpay"
    if 3528 <= p4 <= 3589 and 16 <= n <= 19:
        return "jcb"
    if (p4 == 6011 or p2 == 65 or 644 <= int(digits[:3]) <= 649) and 16 <= n <= 19:
        return "discover"
    if (p2 == 36 or 300 <= int(digits[:3]) <= 305) and n == 14:
        return "diners"
    return None


def _looks_like_resident_id(digits: str) -> bool:
    """18 digits with a region code and a real birth date: a resident ID with a wrong check character (or a
    typo), not a card, even when it passes Luhn. Region 62 (Gansu) looks like UnionPay, 35 like JCB, 65
    like Discover; a card number whose digits 7-14 form a birth date is rare."""
    return (
        len(digits) == 18
        and int(digits[:2]) in PROVINCE_CODES
        and _birth_date_ok(int(digits[6:10]), int(digits[10:12]), int(digits[12:14]), datetime.date.today())
    )


def is_bank_card(s: str) -> bool:
    digits = re.sub(r"[ -]", "", s)
    return (
        digits.isdigit()
        and 13 <= len(digits) <= 19
        and luhn_ok(digits)
        and card_brand(digits) is not None
        and not _looks_like_resident_id(digits)
    )


# 13-19 digits, or groups of four split by one kind of separator, or Amex's 4-6-5.
_CARD = re.compile(
    rf"{NUM_START}(?:\d{{13,19}}"
    rf"|\d{{4}}([ -])\d{{4}}(?:\1\d{{4}}){{1,2}}(?:\1\d{{1,4}})?"
    rf"|\d{{4}}([ -])\d{{6}}\2\d{{4,5}}){NUM_END}"
)


# A number labelled as an identity number is not a card, even when it passes Luhn (an ID with a typo).
_ID_CUE = re.compile(
    r"(?:身份证(?:号码|号)?|证件号(?:码)?|\bID(?:\s*(?:no\.?|number|card))?)\s*[:：#]?\s*$", re.IGNORECASE
)


def detect_bank_cards(text: str) -> list[Span]:
    return [
        Span(m.start(), m.end(), "BANK_CARD", m.group())
        for m in _CARD.finditer(text)
        if is_bank_card(m.group())
        and not after_business_cue(text, m.start())
        and not _ID_CUE.search(text, max(0, m.start() - 16), m.start())
    ]


# --- IP addresses ---------------------------------------------------------------------------------------

_IPV4 = re.compile(r"(?<![0-9A-Za-z.])\d{1,3}(?:\.\d{1,3}){3}(?![0-9A-Za-z])(?!\.\d)")
# Four dotted numbers right after a version word are a version, not an address.
_VERSION_CUE = re.compile(
    r"(?:(?<![A-Za-z])(?:v|ver\.?|version|release|build|rev\.?|firmware)|版本号?|固件|内核|升级到|更新到)\s*[:：]?\s*$",
    re.IGNORECASE,
)
_IPV6 = re.compile(
    r"(?<![0-9A-Za-z:.])[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?:(?<=:)\d{1,3}(?:\.\d{1,3}){3})?(?![0-9A-Za-z:])(?!\.\d)"
)


def _plausible_ipv6(candidate: str) -> bool:
    groups = [g for g in re.split(r"[:.]", candidate) if g]
    # "::1", times ("12:30:45") and "a::b" are not worth masking; real addresses have a 3-4 hex digit group
    # or at least four groups.
    if len(groups) < 2 or (len(groups) < 4 and max(len(g) for g in groups) < 3):
        return False
    try:
        ipaddress.IPv6Address(candidate)
    except ValueError:
        return False
    return True


def detect_ips(text: str) -> list[Span]:
    spans = []
    for m in _IPV4.finditer(text):
        try:
            ip = ipaddress.IPv4Address(m.group())  # rejects octets > 255 and leading zeros
        except ValueError:
            continue
        if ip.is_loopback or m.group().startswith(("0.", "255.")):
            continue  # 127.0.0.1, 0.0.0.0, netmasks and broadcast name no machine of anyone's
        if not _VERSION_CUE.search(text, max(0, m.start() - 12), m.start()):
            spans.append(Span(m.start(), m.end(), "IP", m.group()))
    v6 = [Span(m.start(), m.end(), "IP", m.group()) for m in _IPV6.finditer(text) if _plausible_ipv6(m.group())]
    # ::ffff:192.0.2.128 is one address, not an IPv6 plus an IPv4
    spans = [s for s in spans if not any(o.start <= s.start and s.end <= o.end for o in v6)]
    return sorted(spans + v6)


# --- passports ------------------------------------------------------------------------------------------

# CN ordinary passports: E or G followed by 8 digits, recognisable without a cue.
_CN_PASSPORT = re.compile(r"(?<![0-9A-Za-z])[EG]\d{8}(?![0-9A-Za-z])")
_PASSPORT_CUE = re.compile(r"护照(?:号码|号|编号)?|passport(?:\s*(?:no\.?|number|#|id))?", re.IGNORECASE)
# Other formats (EA1234567, US 9 digits, UK 9 digits, two letters + 7 digits ...) only right after a cue.
_CUED_PASSPORT = re.compile(r"(?<![0-9A-Za-z])(?:[A-Z]{1,2}\d{6,9}|\d{9}|[A-Z]\d{7}[A-Z0-9])(?![0-9A-Za-z])")


def detect_passports(text: str) -> list[Span]:
    spans = [Span(m.start(), m.end(), "PASSPORT", m.group()) for m in _CN_PASSPORT.finditer(text)]
    for cue in _PASSPORT_CUE.finditer(text):
        window_end = cue.end() + 24
        stop = re.search(r"[。！？；\n]", text[cue.end() : window_end])
        if stop:
            window_end = cue.end() + stop.start()
        m = _CUED_PASSPORT.search(text, cue.end(), window_end)
        if m and not after_business_cue(text, m.start()):
            spans.append(Span(m.start(), m.end(), "PASSPORT", m.group()))
    return sorted(set(spans))
