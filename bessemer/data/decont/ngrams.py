"""Text to n-gram hashes, the one computation the benchmark index and the documents share.

Normalisation, as datatrove's `simplify_text` does it (datatrove/utils/text.py) so that a passage is found
whatever its casing, punctuation, accents or numbers: case folded (Python's `casefold`: `lower` plus ß = ss,
ς = σ), accents removed (NFD, then every combining mark, Unicode category Mn, dropped), every run of digits
replaced by "0", punctuation and symbols treated as spaces. (datatrove also takes a decimal separator between
digits into the number: 3.14 is one "0" there, two here; either way, the same on both sides.)

Units, two streams counted separately:

- words: runs of letters and digits (`_` is punctuation, as in datatrove), Korean included (it puts spaces
  between words); an n-gram is `n` consecutive words;
- Han and kana characters (Chinese and Japanese put no spaces between words): one unit per character,
  whatever lies between them; an n-gram is `cjk_n` consecutive characters.

Hashes: a word is hashed by Python's `hash` (SipHash-1-3, in C: the fastest string hash there is from Python;
salted per process, so an index is built and used in the same process and never saved), a character by
splitmix64 of its code point (vectorised). An n-gram's hash is the polynomial sum_k h[i+k] * P^k mod 2^64 of
its units' hashes, computed for every window of a document at once from one cumulative sum (numpy).
"""

import functools
import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from bessemer.data.text.script import HAN_CHARS, KANA_CHARS

CHAR_UNITS = HAN_CHARS + KANA_CHARS
_DIGITS = re.compile(r"\d+")
_WORD = re.compile(rf"[^\W_{CHAR_UNITS}]+")
_CHAR_RUN = re.compile(rf"[{CHAR_UNITS}]+")
_CHAR = re.compile(rf"[{CHAR_UNITS}]")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
# ASCII text, one byte for one character: letters lower-cased, digits to "0", everything else a space.
_ASCII = bytes(c + 32 if 65 <= c <= 90 else 48 if 48 <= c <= 57 else c if 97 <= c <= 122 else 32
               for c in range(256))
_ASCII_WORD = re.compile(rb"[a-z0-9]+")

_P = np.uint64(0x9E3779B97F4A7C15)  # odd: invertible modulo 2^64
_CHUNK = 1 << 16  # windows are hashed in chunks of this many units (the power tables' length)


def _power_table(base: int) -> np.ndarray:
    """base^k mod 2^64 for k < _CHUNK."""
    table = np.full(_CHUNK, base, dtype=np.uint64)
    table[0] = 1
    return np.cumprod(table, dtype=np.uint64)


_POW = _power_table(int(_P))
_INV = _power_table(pow(int(_P), -1, 1 << 64))


@functools.cache
def _marks() -> tuple[re.Pattern, re.Pattern]:
    """Every combining mark (category Mn) as two character classes, the Basic Multilingual Plane's (a bitmap
    to the regex engine: fast) and the rest's (a list of ranges: slow, used only on text that has such
    characters); built on the first non-ASCII text."""
    import sys

    bmp, astral = [], []
    for cp in range(sys.maxunicode + 1):
        if unicodedata.category(chr(cp)) == "Mn":
            (bmp if cp < 0x10000 else astral).append(re.escape(chr(cp)))
    return re.compile(f"[{''.join(bmp)}]"), re.compile(f"[{''.join(astral)}]")


def _fold(text: str) -> str:
    """Case folded, accents removed; numbers not yet replaced. Folding one character at a time gives the same
    text (casefold has no context rules, unlike lower's final sigma)."""
    text = text.casefold()
    if not text.isascii():
        bmp, astral = _marks()
        text = bmp.sub("", unicodedata.normalize("NFD", text))
        if _ASTRAL.search(text):
            text = astral.sub("", text)
    return text


def is_char_unit(c: str) -> bool:
    """A Han or kana character: counted one unit each."""
    return _CHAR.fullmatch(c) is not None


def normalize(text: str) -> str:
    """The text the units are read from (module doc): every run of digits is "0"."""
    return _DIGITS.sub("0", _fold(text))


def _collapse_zeros(b: bytes) -> bytes:
    while b"00" in b:  # each pass halves the longest run of digits
        b = b.replace(b"00", b"0")
    return b


def units(text: str) -> tuple[list, str]:
    """(words, Han and kana characters) of a text. Words of ASCII text come out as bytes (a byte translation
    and a split, several times faster than a regular expression); Python hashes bytes and the str of the same
    ASCII characters alike, so both kinds meet in one index."""
    if text.isascii():
        return _collapse_zeros(text.encode("ascii").translate(_ASCII)).split(), ""
    t = normalize(text)
    return _WORD.findall(t), "".join(_CHAR_RUN.findall(t))


def _mix(codepoints: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a code point to a well-spread 64-bit value (uint64 arithmetic wraps)."""
    z = codepoints.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def word_hashes(words: list) -> np.ndarray:
    return np.fromiter(map(hash, words), dtype=np.int64, count=len(words)).view(np.uint64)


def char_hashes(chars: str) -> np.ndarray:
    return _mix(np.frombuffer(chars.encode("utf-32-le"), dtype=np.uint32))


def window_hashes(h: np.ndarray, n: int) -> np.ndarray:
    """The hash of every window of `n` consecutive units (len(h) - n + 1 of them, as int64)."""
    if len(h) < n:
        return np.empty(0, dtype=np.int64)
    if len(h) > _CHUNK:  # chunks overlapping by n - 1 units: every window lies whole in one
        step = _CHUNK - n + 1
        return np.concatenate([window_hashes(h[s:s + _CHUNK], n) for s in range(0, len(h) - n + 1, step)])
    sums = np.empty(len(h) + 1, dtype=np.uint64)
    sums[0] = 0
    np.cumsum(h * _POW[: len(h)], out=sums[1:])  # sums[j] = sum_{k<j} h[k] P^k
    # window i: (sums[i+n] - sums[i]) = sum_k h[i+k] P^(i+k); times P^-i, the same for the same units anywhere
    return ((sums[n:] - sums[:-n]) * _INV[: len(h) - n + 1]).view(np.int64)


def text_hashes(text: str, n: int, cjk_n: int) -> tuple[np.ndarray, np.ndarray]:
    """The n-gram hashes of a text: (word windows, character windows). The fast path every document takes."""
    words, chars = units(text)
    return window_hashes(word_hashes(words), n), window_hashes(char_hashes(chars), cjk_n)


@dataclass
class Window:
    """One n-gram of a document: its hash, where it lies in the original text, and its normalised units."""

    hash: int
    start: int
    end: int
    ngram: str


class Units:
    """A text's units with where each lies in the original text: the slow path, for the few documents with a
    hit. ASCII text maps one character to one byte; other text is folded one character at a time, so that
    each normalised character knows its source."""

    def __init__(self, text: str):
        # (start, end, unit) of every word and every Han or kana character, in text order
        self.words: list[tuple[int, int, str | bytes]] = []
        self.chars: list[tuple[int, int, str]] = []
        if text.isascii():
            self.words = [(m.start(), m.end(), _collapse_zeros(m.group()))
                          for m in _ASCII_WORD.finditer(text.encode("ascii").translate(_ASCII))]
            return
        starts: list[int] = []
        pieces: list[str] = []
        for i, c in enumerate(text):
            f = _fold(c)
            pieces.append(f)
            starts.extend([i] * len(f))
        folded = "".join(pieces)
        ends = [s + 1 for s in starts]
        # Digit runs to "0": each "0" spans its whole run in the original.
        norm, start, end, last = [], [], [], 0
        for m in _DIGITS.finditer(folded):
            norm.append(folded[last:m.start()] + "0")
            start += starts[last:m.start()] + [starts[m.start()]]
            end += ends[last:m.start()] + [ends[m.end() - 1]]
            last = m.end()
        norm.append(folded[last:])
        start += starts[last:]
        end += ends[last:]
        text = "".join(norm)  # == normalize(original text)
        self.words = [(start[m.start()], end[m.end() - 1], m.group()) for m in _WORD.finditer(text)]
        self.chars = [(start[m.start()], end[m.end() - 1], m.group()) for m in _CHAR.finditer(text)]

    def windows(self, n: int, cjk_n: int, wanted: Callable[[int], bool]) -> Iterator[Window]:
        """The windows whose hash is `wanted`, word windows first (a Window is built only for those)."""
        for units_, size, sep, hashes in (
                (self.words, n, " ", word_hashes([u for _, _, u in self.words])),
                (self.chars, cjk_n, "", char_hashes("".join(u for _, _, u in self.chars)))):
            for i, h in enumerate(window_hashes(hashes, size).tolist()):
                if wanted(h):
                    window = units_[i:i + size]
                    yield Window(h, window[0][0], window[-1][1],
                                 sep.join(u.decode("ascii") if isinstance(u, bytes) else u for _, _, u in window))
