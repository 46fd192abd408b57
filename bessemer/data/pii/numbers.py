"""Detectors for PII with a fixed shape: emails, resident IDs, bank cards, IP addresses, passports (phones in
phones.py).

Each detector is `detect_*(text) -> list[Span]`. Shape alone is not enough for numbers: IDs and cards must
pass their checksum (plus a plausible date/region or issuer), IPs must parse, and numbers labelled as
order/tracking/ISBN numbers are left alone, so dates, prices, versions and random long numbers survive.
"""

import datetime
import ipaddress
import re

from bessemer.data.pii.common import NUM_END, NUM_START, Span, not_personal_number

# --- email ----------------------------------------------------------------------------------------------

_EMAIL = re.compile(
    r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9](?:[A-Za-z0-9._%+-]{0,62}[A-Za-z0-9_%+-])?"
    r"@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![A-Za-z0-9-])"
)


def detect_emails(text: str) -> list[Span]:
    return [Span(m.start(), m.end(), "EMAIL", m.group()) for m in _EMAIL.finditer(text)]


# --- CN resident identity card --------------------------------------------------------------------------

ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
ID_CHECK_CHARS = "10X98765432"
# GB/T 2260 provincial prefixes: 11-15 north, 21-23 north-east, 31-37 east, 41-46 south-central,
# 50-54 south-west, 61-65 north-west, 71 Taiwan, 81/82/83 residence permits of Hong Kong, Macau and Taiwan
# residents, 91 (issued to some residents abroad).
PROVINCE_CODES = frozenset(
    [*range(11, 16), *range(21, 24), *range(31, 38), *range(41, 47), *range(50, 55), *range(61, 66), 71, 81, 82, 83, 91]
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
            if not is_resident_id(re.sub(r"[ -]", "", m.group())) or not_personal_number(text, m.start(), m.end()):
                continue
            if pattern is _ID15 and _CARD_CUE.search(text, max(0, m.start() - 16), m.start()):
                continue
            spans.append(Span(m.start(), m.end(), "ID_NUMBER", m.group()))
    return spans


# US Social Security numbers (also ID_NUMBER): area 001-899 but 666, group 01-99, serial 0001-9999 (SSA's
# rules since 2011). Written AAA-GG-SSSS they are taken anywhere; as nine plain digits or with spaces only
# after an SSN label, where a nine-digit number is as likely a zip+4, an account or a routing number.
_SSN_DASHED = re.compile(rf"{NUM_START}(\d{{3}})-(\d{{2}})-(\d{{4}}){NUM_END}")
_SSN_OTHER = re.compile(rf"{NUM_START}(\d{{3}}) ?(\d{{2}}) ?(\d{{4}}){NUM_END}")
_SSN_CUE = re.compile(
    r"\b(?:SSN|SSNs|social\s+security(?:\s+(?:no\.?|number|#))?)\s*(?:is\s*)?[:：#]?\s*$", re.IGNORECASE
)


def _ssn_ok(area: str, group: str, serial: str) -> bool:
    return area not in ("000", "666") and area < "900" and group != "00" and serial != "0000"


def detect_ssns(text: str) -> list[Span]:
    spans = [m for m in _SSN_DASHED.finditer(text) if _ssn_ok(*m.groups())]
    spans += [
        m for m in _SSN_OTHER.finditer(text)
        if _ssn_ok(*m.groups()) and _SSN_CUE.search(text, max(0, m.start() - 28), m.start())
    ]
    return [
        Span(m.start(), m.end(), "ID_NUMBER", m.group())
        for m in spans
        if not not_personal_number(text, m.start(), m.end())
    ]


def detect_id_numbers(text: str) -> list[Span]:
    """Resident identity numbers of China and US Social Security numbers."""
    return sorted(set(detect_resident_ids(text) + detect_ssns(text)))


# --- bank cards -----------------------------------------------------------------------------------------


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, c in enumerate(reversed(digits)):
        d = int(c)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


# Issuer identification number (IIN) ranges and card lengths of the payment networks, from the networks'
# published ranges as tabulated in ISO/IEC 7812 references ("Payment card number", IIN ranges table): each
# row is (network, lowest prefix, highest prefix, lengths); prefixes of one row have the same number of digits.
# The first row that fits names the network, so co-branded ranges (622126-622925 Discover inside UnionPay's 62)
# keep the name listed first.
_ANY = range(16, 20)
IIN_RANGES: tuple[tuple[str, str, str, tuple[int, ...] | range], ...] = (
    ("visa", "4", "4", (13, 16, 19)),
    ("mastercard", "51", "55", (16,)),
    ("mastercard", "2221", "2720", (16,)),
    ("amex", "34", "34", (15,)),
    ("amex", "37", "37", (15,)),
    ("discover", "6011", "6011", _ANY),
    ("discover", "644", "649", _ANY),
    ("discover", "65", "65", _ANY),
    ("unionpay", "62", "62", _ANY),
    ("unionpay", "81", "81", _ANY),
    ("jcb", "35", "35", _ANY),  # JCB's range is 3528-3589; card validators take all of 35 (and so do we)
    ("jcb", "1800", "1800", (15,)),  # the older JCB numbering
    ("jcb", "2131", "2131", (15,)),
    ("diners", "300", "305", range(14, 20)),
    ("diners", "3095", "3095", range(14, 20)),
    ("diners", "36", "36", range(14, 20)),
    ("diners", "38", "39", range(14, 20)),
    ("mir", "2200", "2204", _ANY),
    ("maestro", "50", "50", range(12, 20)),  # Maestro: 50 and 56-69, 12 to 19 digits
    ("maestro", "56", "69", range(12, 20)),
    ("maestro", "0604", "0604", range(12, 20)),
    ("verve", "506099", "506198", (16, 18, 19)),
    ("verve", "507865", "507964", (16, 18, 19)),
    ("troy", "9792", "9792", (16,)),
    ("t-union", "31", "31", (19,)),
)


def card_brand(digits: str) -> str | None:
    """The payment network whose IIN range and card length fit `digits`, or None."""
    for network, lo, hi, lengths in IIN_RANGES:
        if len(digits) in lengths and lo <= digits[: len(lo)] <= hi:
            return network
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
        and 12 <= len(digits) <= 19
        and luhn_ok(digits)
        and card_brand(digits) is not None
        and not _looks_like_resident_id(digits)
    )


# 12-19 digits, or groups of four split by one kind of separator, or Amex's 4-6-5 (Diners' 4-6-4).
_CARD = re.compile(
    rf"{NUM_START}(?:\d{{12,19}}"
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
        and not not_personal_number(text, m.start(), m.end())
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
        if not _VERSION_CUE.search(text, max(0, m.start() - 12), m.start()) and not not_personal_number(
            text, m.start(), m.end()
        ):
            spans.append(Span(m.start(), m.end(), "IP", m.group()))
    v6 = [Span(m.start(), m.end(), "IP", m.group()) for m in _IPV6.finditer(text) if _plausible_ipv6(m.group())]
    # ::ffff:192.0.2.128 is one address, not an IPv6 plus an IPv4
    spans = [s for s in spans if not any(o.start <= s.start and s.end <= o.end for o in v6)]
    return sorted(spans + v6)


# --- passports ------------------------------------------------------------------------------------------

# CN ordinary passports, recognisable without a cue: E or G and 8 digits, or (electronic passports since the
# E-series ran out) E, a letter other than I/O, and 7 digits.
_CN_PASSPORT = re.compile(r"(?<![0-9A-Za-z])(?:[EG]\d{8}|E[A-HJ-NP-Z]\d{7})(?![0-9A-Za-z])")
_PASSPORT_CUE = re.compile(
    r"护照(?:号码|号|编号)?|旅行证件|passport(?:\s*(?:no\.?|number|#|id))?|travel\s+document|"
    r"document\s+(?:no\.?|number)",  # the field name on passports and identity cards
    re.IGNORECASE,
)
# Other formats (EA1234567, US 9 digits, UK 9 digits, two letters + 7 digits ...) only right after a cue.
_CUED_PASSPORT = re.compile(r"(?<![0-9A-Za-z])(?:[A-Z]{1,2}\d{6,9}|\d{8,9}|[A-Z]\d{7}[A-Z0-9])(?![0-9A-Za-z])")


def detect_passports(text: str) -> list[Span]:
    spans = [
        Span(m.start(), m.end(), "PASSPORT", m.group())
        for m in _CN_PASSPORT.finditer(text)
        if not not_personal_number(text, m.start(), m.end())
    ]
    for cue in _PASSPORT_CUE.finditer(text):
        window_end = cue.end() + 40
        stop = re.search(r"[。！？；\n]|[.!?;](?:\s|$)", text[cue.end() : window_end])
        if stop:
            window_end = cue.end() + stop.start()
        m = _CUED_PASSPORT.search(text, cue.end(), window_end)
        if m and not not_personal_number(text, m.start(), m.end()):
            spans.append(Span(m.start(), m.end(), "PASSPORT", m.group()))
    return sorted(set(spans))
