"""PII redaction for Chinese and English text: the `PiiStep` pipeline step and the `redact` function.

Detectors live beside this file (numbers.py: email, resident ID, bank card, IP, passport; phones.py: phone;
names_zh.py and names_en.py: person names; address.py: Chinese addresses). Each returns candidate spans; here
overlapping candidates are resolved (the longest wins, then the most specific type) and the survivors are replaced.
Rules, checksums and the measured leak/damage rates: docs/data-pii.md.
"""

import hashlib
import hmac
import ipaddress
import re
from collections import Counter
from collections.abc import Iterable
from typing import Literal

from bessemer.data.document import Document
from bessemer.data.pii.address import LEVELS, parse_addresses
from bessemer.data.pii.common import HAN, Span
from bessemer.data.pii.names_en import detect_english_names
from bessemer.data.pii.names_zh import detect_chinese_names
from bessemer.data.pii.numbers import (
    detect_bank_cards,
    detect_emails,
    detect_id_numbers,
    detect_ips,
    detect_passports,
)
from bessemer.data.pii.phones import detect_phones
from bessemer.data.steps import Step
from bessemer.data.text import segment

Action = Literal["mask", "hash", "tag"]
ACTIONS: tuple[str, ...] = ("mask", "hash", "tag")
TYPES: tuple[str, ...] = ("EMAIL", "PHONE", "ID_NUMBER", "BANK_CARD", "IP", "PASSPORT", "PERSON", "ADDRESS")

_NUMERIC_DETECTORS = {
    "EMAIL": detect_emails,
    "PHONE": detect_phones,
    "ID_NUMBER": detect_id_numbers,
    "BANK_CARD": detect_bank_cards,
    "IP": detect_ips,
    "PASSPORT": detect_passports,
}
# Tie-break between overlapping candidates of equal length: checksum-validated types are the most certain.
_SPECIFICITY = {
    t: i for i, t in enumerate(("ID_NUMBER", "BANK_CARD", "EMAIL", "IP", "PASSPORT", "PHONE", "ADDRESS", "PERSON"))
}


def check_types(types: Iterable[str] | None) -> tuple[str, ...]:
    if types is None:
        return TYPES
    types = tuple(types)
    unknown = [t for t in types if t not in TYPES]
    if unknown:
        raise ValueError(f"unknown PII type(s) {unknown}; valid types: {', '.join(TYPES)}")
    return types


def _resolve(candidates: list[Span]) -> list[Span]:
    """Non-overlapping spans, left to right: longest first, then most specific type, then leftmost."""
    chosen: list[Span] = []
    for c in sorted(candidates, key=lambda s: (s.start - s.end, _SPECIFICITY[s.type], s.start)):
        if all(c.end <= s.start or s.end <= c.start for s in chosen):
            chosen.append(c)
    return sorted(chosen)


def find_pii(text: str, types: Iterable[str] | None = None) -> tuple[list[Span], int]:
    """Non-overlapping PII spans in `text` (an address appears as its level spans: PROVINCE, CITY,
    DISTRICT, STREET, NUMBER) and the number of addresses among them."""
    wanted = check_types(types)
    candidates = [span for t in wanted if t in _NUMERIC_DETECTORS for span in _NUMERIC_DETECTORS[t](text)]
    levels: dict[tuple[int, int], list[Span]] = {}
    # jieba is the slow part: one segmentation (bessemer/data/text/segment.py) for names and addresses, shared
    # with the quality filters when they look at the same text.
    toks = segment.tokens(text) if ("PERSON" in wanted or "ADDRESS" in wanted) and HAN.search(text) else []
    if "PERSON" in wanted:
        candidates += detect_english_names(text)
        if toks:
            candidates += detect_chinese_names(text, toks)
    if "ADDRESS" in wanted and toks:
        for parts in parse_addresses(text, toks):
            start, end = parts[0].start, parts[-1].end
            levels[(start, end)] = parts
            candidates.append(Span(start, end, "ADDRESS", text[start:end]))
    spans, n_addresses = [], 0
    for s in _resolve(candidates):
        if s.type == "ADDRESS":
            spans += levels[(s.start, s.end)]
            n_addresses += 1
        else:
            spans.append(s)
    return spans, n_addresses


def _normalise(span: Span) -> str:
    """The value a hash token is computed from, so 138-0013-8000 and 13800138000 hash alike."""
    if span.type in ("PHONE", "ID_NUMBER", "BANK_CARD", "PASSPORT"):
        return re.sub(r"[^0-9A-Za-z]", "", span.value).upper()
    if span.type == "EMAIL":
        return span.value.lower()
    if span.type == "IP":
        return str(ipaddress.ip_address(span.value))
    return span.value


def hash_token(span: Span, salt: str) -> str:
    digest = hmac.new(salt.encode(), f"{span.type}\0{_normalise(span)}".encode(), hashlib.sha256).hexdigest()
    return f"[{span.type}:{digest[:6]}]"


def _replace(text: str, spans: list[Span], action: str, salt: str) -> str:
    if action == "tag":
        return text
    out, pos = [], 0
    for s in spans:
        out.append(text[pos : s.start])
        out.append(f"[{s.type}]" if action == "mask" else hash_token(s, salt))
        pos = s.end
    out.append(text[pos:])
    return "".join(out)


def _check_action(action: str) -> None:
    if action not in ACTIONS:
        raise ValueError(f"unknown PII action {action!r}; valid actions: {', '.join(ACTIONS)}")


def redact(
    text: str, action: Action = "mask", types: Iterable[str] | None = None, salt: str = ""
) -> tuple[str, list[Span]]:
    """Replace the PII in `text`: `mask` -> [EMAIL], `hash` -> [EMAIL:3f9a1c] (HMAC-SHA256 with `salt`,
    stable across documents), `tag` -> text unchanged. Returns the new text and the spans found, in
    original-text coordinates."""
    _check_action(action)
    spans, _ = find_pii(text, types)
    return _replace(text, spans, action, salt), spans


class PiiStep(Step):
    """Pipeline step: rewrites `doc.text` and records what was found in `doc.metadata["pii"]`:

        {"action": "mask", "counts": {"ADDRESS": 1, "PHONE": 2},
         "spans": [{"start": 12, "end": 23, "type": "PHONE"}, {"start": 30, "end": 33, "type": "CITY"}, ...]}

    Counts are per PII type (an address counts once); spans are in original-text coordinates, an address
    as its level spans. Raw values are recorded only with action="tag" (the text keeps
    them anyway); with mask/hash they appear nowhere. No document is dropped.
    """

    name = "pii"

    def __init__(self, action: Action = "mask", types: Iterable[str] | None = None, salt: str = ""):
        super().__init__()
        _check_action(action)
        self.action = action
        self.types = check_types(types)
        self._salt = salt
        self._counts: Counter[str] = Counter()
        self._touched = 0

    def __repr__(self) -> str:  # never show the salt
        return f"PiiStep(action={self.action!r}, types={list(self.types)})"

    def redact(self, doc: Document) -> Counter[str]:
        """Rewrite `doc.text`, record `doc.metadata["pii"]` (class docstring) and return the counts per type.
        The step runs this on every document; the exclusion sink on documents rejected before the step."""
        spans, n_addresses = find_pii(doc.text, self.types)
        counts = Counter(s.type for s in spans if s.type not in LEVELS)
        if n_addresses:
            counts["ADDRESS"] = n_addresses
        records = [{"start": s.start, "end": s.end, "type": s.type} for s in spans]
        if self.action == "tag":
            for record, s in zip(records, spans):
                record["value"] = s.value
        doc.metadata["pii"] = {"action": self.action, "counts": dict(sorted(counts.items())), "spans": records}
        doc.text = _replace(doc.text, spans, self.action, self._salt)
        return counts

    def redact_text(self, text: str) -> str:
        """`text` with this step's detectors, action and salt applied; nothing recorded."""
        spans, _ = find_pii(text, self.types)
        return _replace(text, spans, self.action, self._salt)

    def process(self, doc: Document) -> None:
        self._counts.update(self.redact(doc))
        self._touched += bool(doc.metadata["pii"]["spans"])

    def stats(self) -> dict:
        return {"docs": self.docs_in, "docs_touched": self._touched, "counts": dict(sorted(self._counts.items()))}
