"""URL filtering: the `url` step, FineWeb's first filter (datatrove's URLFilter), with block lists the user
supplies: no list is downloaded or bundled.

A document's URL is `metadata[url_field]` ("url"): the WARC reader puts each record's WARC-Target-URI there,
the JSONL and Parquet readers a `url` field or column (top level or inside `metadata`). A document without one
passes and is counted (`stats()["no_url"]`). Checks, in order, each a rejection reason:

- `url.blocked_domain`: the host or any parent domain of it is listed (`example.com` blocks `example.com`,
  `www.example.com`, `a.b.example.com`; not `notexample.com`).
- `url.blocked_substring`: a listed string occurs in the URL (lower-cased, percent-escapes decoded).
- `url.banned_word`: a listed word is one of the URL's words (the URL split at every character that is not a
  letter or digit): `casino` bans `casino.example.com/x` and `/best-casino-bonus`, not `/occasional`.
- `url.soft_banned_words`: at least `soft_word_threshold` different listed soft words are among its words.

The matching entry goes into `metadata["url_match"]` of a rejected document. File format: docs/data-steps.md.
"""

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from bessemer.data import io
from bessemer.data.document import Document
from bessemer.data.steps import Reject, Step

SECTIONS = ("domains", "substrings", "words", "soft_words")
_SECTION = re.compile(r"\[\s*([^\]]*?)\s*\]")
_DOMAIN = re.compile(r"[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?)*")
_WORD = re.compile(r"[^\W_]+")
_NOT_WORD = re.compile(r"[\W_]+")
_OPAQUE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:(?!\d)")  # mailto:, data:, javascript: (not host:port)


@dataclass
class BlockList:
    """What a url step blocks; `add` and `add_file` check every entry they add."""

    domains: set[str] = field(default_factory=set)
    substrings: set[str] = field(default_factory=set)
    words: set[str] = field(default_factory=set)
    soft_words: set[str] = field(default_factory=set)

    def add(self, kind: str, entry: str, where: str) -> None:
        """Add one entry of `kind` (one of SECTIONS); `where` names it in the error a bad entry raises."""
        entry = entry.strip()
        if kind == "domains":
            self.domains.add(normalize_domain(entry, where))
        elif kind == "substrings":
            if not entry or any(c.isspace() for c in entry):
                raise ValueError(f"{where}: a URL substring has no spaces, got {entry!r}")
            self.substrings.add(unquote(entry).lower())
        else:
            word = entry.lower()
            if not _WORD.fullmatch(word):
                raise ValueError(f"{where}: a word is letters and digits only (URLs are split into words at every "
                                 f"other character), got {entry!r}; put it under [substrings] instead")
            (self.words if kind == "words" else self.soft_words).add(word)

    def add_file(self, path: str, kind: str | None = None) -> None:
        """Read a block-list file: `# comment` lines, blank lines, `[section]` headers (SECTIONS) and one entry
        per line. With `kind`, the file is a plain list of that kind and has no headers."""
        try:
            lines = io.read_bytes(path).decode("utf-8").splitlines()
        except FileNotFoundError:
            raise ValueError(f"url block list {path} does not exist") from None
        except UnicodeDecodeError as e:
            raise ValueError(f"url block list {path} is not UTF-8 text ({e})") from None
        section = kind
        for lineno, raw in enumerate(lines, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            where = f"{path}:{lineno}"
            if m := _SECTION.fullmatch(line):
                if kind is not None:
                    raise ValueError(f"{where}: a plain list of {kind} has no section headers, got {line!r}")
                if m.group(1) not in SECTIONS:
                    raise ValueError(f"{where}: unknown section [{m.group(1)}]; valid sections: "
                                     + ", ".join(f"[{s}]" for s in SECTIONS))
                section = m.group(1)
                continue
            if section is None:
                raise ValueError(f"{where}: entry {line!r} before any section header; start the file with one of "
                                 + ", ".join(f"[{s}]" for s in SECTIONS))
            self.add(section, line, where)

    def __len__(self) -> int:
        return len(self.domains) + len(self.substrings) + len(self.words) + len(self.soft_words)


def normalize_domain(entry: str, where: str = "domain") -> str:
    """`Example.COM.`, `*.example.com`, `.example.com` -> `example.com`; an internationalized name -> its
    punycode (`bücher.de` -> `xn--bcher-kva.de`), as hosts are compared. Raises ValueError on anything else."""
    domain = entry.strip().lower().removeprefix("*.").removeprefix(".").removesuffix(".")
    if "/" in domain or ":" in domain:
        raise ValueError(f"{where}: a domain, not a URL, is expected (write example.com), got {entry!r}")
    domain = _idna(domain)
    if not _DOMAIN.fullmatch(domain):
        raise ValueError(f"{where}: not a domain name: {entry!r}")
    return domain


def _idna(host: str) -> str:
    if host.isascii():
        return host
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return host


def url_host(url: str) -> str:
    """The host of `url`, lower-cased, punycode, without port, credentials or a final dot; "" if it has none
    (`mailto:x`). A URL without a scheme (`example.com/page`, `//example.com/`) is read as http."""
    if "://" not in url:
        if _OPAQUE.match(url):
            return ""
        url = "http:" + url if url.startswith("//") else f"http://{url}"
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:  # e.g. an invalid IPv6 literal
        return ""
    return _idna(host.removesuffix("."))


class UrlStep(Step):
    """Pipeline step: reject documents whose URL is on the block lists.

    `lists`: block-list files with `[domains]`, `[substrings]`, `[words]` and `[soft_words]` sections;
    `domain_files`, `substring_files`, `word_files`: plain files of one kind (a domain list such as UT1's
    `domains` file); `domains`, `substrings`, `words`, `soft_words`: entries inline. Every entry is checked
    when the step is built; a bad one raises ValueError naming the file and line. `url_field`: the metadata
    key that holds the URL."""

    name = "url"

    def __init__(
        self,
        lists: Iterable[str] = (),
        domain_files: Iterable[str] = (),
        substring_files: Iterable[str] = (),
        word_files: Iterable[str] = (),
        domains: Iterable[str] = (),
        substrings: Iterable[str] = (),
        words: Iterable[str] = (),
        soft_words: Iterable[str] = (),
        soft_word_threshold: int = 2,
        url_field: str = "url",
        reject: Reject | None = None,
    ):
        super().__init__(reject)
        for key, value in [("lists", lists), ("domain_files", domain_files), ("substring_files", substring_files),
                           ("word_files", word_files), ("domains", domains), ("substrings", substrings),
                           ("words", words), ("soft_words", soft_words)]:
            if isinstance(value, str):
                raise ValueError(f"{key} must be a list of strings, got the string {value!r} (write [{value!r}])")
        if isinstance(soft_word_threshold, bool) or not isinstance(soft_word_threshold, int) or soft_word_threshold < 1:
            raise ValueError(f"soft_word_threshold must be an integer >= 1, got {soft_word_threshold!r}")
        self.block = BlockList()
        for path in lists:
            self.block.add_file(path)
        for kind, paths in (("domains", domain_files), ("substrings", substring_files), ("words", word_files)):
            for path in paths:
                self.block.add_file(path, kind)
        for kind, entries in (("domains", domains), ("substrings", substrings), ("words", words),
                              ("soft_words", soft_words)):
            for i, entry in enumerate(entries):
                if not isinstance(entry, str):
                    raise ValueError(f"{kind}[{i}]: expected a string, got {entry!r}")
                self.block.add(kind, entry, f"{kind}[{i}]")
        self.soft_word_threshold = soft_word_threshold
        self.url_field = url_field
        self.no_url = 0
        self.no_host = 0
        self._substring_re: re.Pattern | None = None

    def __repr__(self) -> str:
        b = self.block
        return (f"UrlStep(domains={len(b.domains)}, substrings={len(b.substrings)}, words={len(b.words)}, "
                f"soft_words={len(b.soft_words)}, soft_word_threshold={self.soft_word_threshold})")

    def __getstate__(self) -> dict:
        return self.__dict__ | {"_substring_re": None}

    def _substrings(self) -> re.Pattern | None:
        if self._substring_re is None and self.block.substrings:
            # One alternation: re scans the URL once instead of once per entry. Longest first, so where several
            # entries match at the same place the most specific one is reported.
            ordered = sorted(self.block.substrings, key=lambda s: (-len(s), s))
            self._substring_re = re.compile("|".join(map(re.escape, ordered)))
        return self._substring_re

    def check(self, url: str) -> tuple[str, str] | None:
        """(reason, matching entry) for a URL the lists block, None for one they don't."""
        host = url_host(url)
        if not host:
            self.no_host += 1
        labels = host.split(".")
        for i in range(len(labels)):
            parent = ".".join(labels[i:])
            if parent in self.block.domains:
                return "blocked_domain", parent
        text = unquote(url).lower()
        if (rx := self._substrings()) is not None and (m := rx.search(text)):
            return "blocked_substring", m.group(0)
        url_words = set(_NOT_WORD.split(text))
        if banned := sorted(url_words & self.block.words):
            return "banned_word", banned[0]
        soft = sorted(url_words & self.block.soft_words)
        if len(soft) >= self.soft_word_threshold:
            return "soft_banned_words", " ".join(soft)
        return None

    def process(self, doc: Document) -> str | None:
        url = doc.metadata.get(self.url_field)
        if not isinstance(url, str) or not url.strip():
            self.no_url += 1
            return None
        found = self.check(url.strip())
        if found is None:
            return None
        doc.metadata["url_match"] = found[1]
        return found[0]

    def stats(self) -> dict:
        return super().stats() | {"no_url": self.no_url, "no_host": self.no_host}
