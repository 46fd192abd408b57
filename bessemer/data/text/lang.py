"""Language identification: the `lang` step (FineWeb's second filter, after the URL filter and extraction).

Each document gets `metadata["lang"]` (an ISO 639 code from the model, or "code"), `metadata["lang_score"]`
and `metadata["lang_scripts"]` (the share of each script among the letters the model read), and, with
`routes`, `metadata["route"]`: the name of the output that language goes to. The model is py3langid's
(langid.py's naive Bayes over byte n-grams, 140 labels, 4.6 MB inside the package): chosen over fastText's
lid.176, CLD2, CLD3 and lingua for its accuracy on short text at a few MB and a BSD licence — the comparison
on text none of us wrote is in docs/data-steps.md. It loads on first use, once per process (~0.8 s).

Only a bounded sample is classified: up to `sample_chars` characters of prose, half from the start of the
document and half from its middle, with code lines, URLs and e-mail addresses taken out and whitespace folded.
A document that is mostly code is labelled "code" instead (`code_share`, below), so a source file is never
called English because of its identifiers.
"""

import re
from collections import Counter
from collections.abc import Iterable

from bessemer.data.document import Document
from bessemer.data.steps import Reject, Step
from bessemer.data.text.script import HAN_CHARS, HANGUL_CHARS, KANA_CHARS
from bessemer.data.writers import ROUTE_KEY, route_problem

# The labels of py3langid 0.4's model (tests/unit/data/text/test_lang.py checks them against it), so that a keep
# list is validated without loading the model. "zxx": no linguistic content.
LABELS = frozenset(
    "af am an ar arz as az ba be bg bn br bs ca cs cy da de dz el en eo es et eu fa fi fo fr fy ga gd gl gu ha "
    "he hi hr ht hu hy id ig is it ja jv ka kk km kn ko ku ky la lb lg ln lo lt lv mg mk ml mn mr ms mt my ne "
    "nl nn no oc om or pa pl ps pt qu ro ru rw sa se si sk sl sn so sq sr st sv sw ta te tg th tk tl tr tt ug "
    "uk ur uz vi vo wa xh yo zh zu zxx ace ary bcl crh ext fuv gcf gcr gom grc gug guw hbo kab kik lij ltg "
    "nso pcm sdh uzs vec wuu yue".split())
CODE = "code"  # the label of a document that is mostly source code
UNKNOWN = "und"  # the label of a document with no prose to classify (score 0)

# A line of source code (see `is_code_line`): a statement keyword or prompt at its start, ...
_CODE_START = re.compile(
    r"\s*(?:(?:def|class|import|return|yield|raise|assert|elif|except|finally|lambda|async|await|"
    r"public|private|protected|static|void|func|fn|let|const|var|package|namespace|struct|impl|pub|mod|"
    r"function|export|require|module\.exports|console\.\w+|SELECT|INSERT|UPDATE|DELETE|CREATE|DROP)\b"
    r"|from\s+[\w.]+\s+import\b|#(?:include|define|ifn?def|endif|pragma|!)|>>>(?:\s|$)|\.\.\.\s|//|/\*|\*/|@\w"
    r"|(?:if|for|while|with|else|try)\b.*:\s*$|(?:if|for|while|switch|catch)\s*\()")
# ... an opening brace or closing brackets at its end, or a statement ending in `;` ...
_CODE_END = re.compile(r"(?:[{\[(]|^\s*[}\])]+[;,)]*|\)\s*;|=[^=]*;)\s*$")
# ... an assignment (`x = 1`, `self.a += b`) or a bare call (`print(x)`) ...
_ASSIGN_OR_CALL = re.compile(r"\s*[A-Za-z_$][\w.$\[\]'\"]*\s*(?:[-+*/%|&^]|//|\*\*)?=(?!=)\s*\S|\s*[\w.$]+\(.*\)\s*;?\s*$")
# ... or indentation of four spaces or a tab that does not start a list item (Markdown's code block too).
_INDENTED = re.compile(r"(?: {4}|\t)\s*(?![-*+•]\s|\d+[.)]\s)\S")
_SYMBOLS = re.compile(r"[{}\[\]()<>=;:,'\"_\\|&*$@^~`]")
_FENCE = re.compile(r"\s*(?:```|~~~)")
_URL = re.compile(r"(?:https?://|www\.)\S+")
_EMAIL = re.compile(r"[\w.+-]{1,64}@[\w-]+\.[\w.-]+")
# Table rules, box drawing, markup and runs of dashes or dots: byte n-grams of no language that drown short
# prose (a reference table's cells).
_NOISE = re.compile(r"[|+=_*#<>{}\[\]~^`\\@$%&\u2500-\u257f]+|([-.])\1{2,}")
_SCRIPTS: dict[str, re.Pattern] = {
    "Latn": re.compile(r"[A-Za-z\u00c0-\u024f\u1e00-\u1eff]"),
    "Hani": re.compile(f"[{HAN_CHARS}]"),
    "Kana": re.compile(f"[{KANA_CHARS}]"),
    "Hang": re.compile(f"[{HANGUL_CHARS}]"),
    "Cyrl": re.compile(r"[\u0400-\u04ff]"),
    "Grek": re.compile(r"[\u0370-\u03ff]"),
    "Arab": re.compile(r"[\u0600-\u06ff\u0750-\u077f]"),
    "Hebr": re.compile(r"[\u0590-\u05ff]"),
    "Deva": re.compile(r"[\u0900-\u097f]"),
    "Thai": re.compile(r"[\u0e00-\u0e7f]"),
}
_LETTER = re.compile(r"[^\W\d_]")
_MIN_LINES = 3  # a text of fewer judged lines is not called code: one usage line is not a program

_identifiers: dict[frozenset[str], object] = {}  # the model per candidate set, loaded once per process


def identifier(languages: frozenset[str] = frozenset()):
    """py3langid's model with probabilities normalised to [0, 1], restricted to `languages` (empty = all of
    LABELS); loaded on first call."""
    if languages not in _identifiers:
        try:
            from py3langid.langid import MODEL_FILE, LanguageIdentifier
        except ImportError:
            raise ImportError("the lang step needs py3langid: pip install 'py3langid>=0.4,<0.5'") from None
        model = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        if languages:
            model.set_languages(sorted(languages))
        _identifiers[languages] = model
    return _identifiers[languages]


def is_code_line(line: str) -> bool:
    """Whether a (non-blank) line looks like source code rather than prose. The rules, in
    docs/data-steps.md: a statement keyword or interpreter prompt at the start, a brace or a `;`-ended
    statement at the end, an assignment or a bare call, four-space indentation, or a quarter of its
    characters being code symbols."""
    if _CODE_START.match(line) or _CODE_END.search(line) or _ASSIGN_OR_CALL.match(line) or _INDENTED.match(line):
        return True
    stripped = line.strip()
    return len(stripped) >= 4 and len(_SYMBOLS.findall(stripped)) >= 0.25 * len(stripped.replace(" ", ""))


def _windows(text: str, chars: int) -> list[tuple[str, bool]]:
    """The start of `text` and, for a long text, a stretch from its middle, `chars` characters in all, cut at
    line breaks; each with whether it starts inside a triple-quoted string (an odd number of them before it)."""
    if len(text) <= chars:
        return [(text, False)]
    half = chars // 2
    head = text[:half].rpartition("\n")[0] or text[:half]
    start = len(text) // 2
    mid = text[start : start + half]
    if "\n" in mid:
        cut = mid.index("\n") + 1
        start, mid = start + cut, mid[cut:]
    quoted = (text.count('"""', 0, start) + text.count("'''", 0, start)) % 2 == 1
    return [(head, False), (mid.rpartition("\n")[0] or mid, quoted)]


def split_lines(text: str, window_chars: int) -> tuple[list[list[str]], int, int, int]:
    """The prose lines of each sampled window, the characters (spaces not counted) of the code lines and of
    all the lines judged, and the number of lines judged. Not judged: blank lines, `#` comments or headings,
    fence markers and the lines of triple-quoted strings (docstrings: prose inside code, still read as prose);
    lines inside fenced blocks are code."""
    prose: list[list[str]] = []
    code = judged = lines = 0
    for window, docstring in _windows(text, window_chars):
        fenced = False
        prose.append([])
        for line in window.split("\n"):
            if _FENCE.match(line):
                fenced = not fenced
                continue
            stripped = line.strip()
            quotes = stripped.count('"""') + stripped.count("'''")
            if docstring or quotes:
                docstring ^= quotes % 2 == 1
                prose[-1].append(stripped.strip("\"'"))
                continue
            if not stripped or (stripped.startswith("#") and not fenced and not _CODE_START.match(stripped)):
                if stripped.startswith("#"):
                    prose[-1].append(stripped.lstrip("#"))  # a heading is prose; a comment is too, in its way
                continue
            size = len(stripped) - stripped.count(" ")
            judged += size
            lines += 1
            if fenced or is_code_line(line):
                code += size
            else:
                prose[-1].append(stripped)
    return prose, code, judged, lines


def _denoise(text: str) -> str:
    """`text` without URLs and e-mail addresses, which read as English whatever the page's language, and
    without table rules and markup symbols."""
    if "://" in text or "www." in text:
        text = _URL.sub(" ", text)
    if "@" in text:
        text = _EMAIL.sub(" ", text)
    return _NOISE.sub(" ", text)


def script_shares(text: str) -> dict[str, float]:
    """Share of each script among the letters of `text` (ISO 15924 codes; `Kana` = hiragana and katakana,
    "other" = letters of the remaining scripts), largest first, rounded to 3 places; shares under 0.01 are
    left out."""
    letters = len(_LETTER.findall(text))
    if not letters:
        return {}
    counts = Counter({name: len(rx.findall(text)) for name, rx in _SCRIPTS.items()})
    counts["other"] = max(0, letters - sum(counts.values()))
    return {k: round(v / letters, 3) for k, v in counts.most_common() if v / letters >= 0.01}


class LangStep(Step):
    """Pipeline step: label every document with its language and keep the ones asked for.

    `keep`: the languages to keep (model labels such as "en", "zh", plus "code"); empty = every language.
    A document not in it is rejected `lang.not_kept`; one in it whose score is below `threshold` (or its
    language's entry in `thresholds`) is rejected `lang.low_score`. A document is source code
    (`lang = "code"`) when at least `code_share` of the characters of its judged lines are on code lines
    (`is_code_line`; None or False = no code detection); its score is that share and no threshold applies to it.
    Documents whose `metadata["domain"]` is in `code_domains` are code without being looked at. `routes` maps
    languages to output names (`{en = "en", zh = "zh", "*" = "other"}`): the step writes the name into
    `metadata["route"]` for the writer to route on; "*" is every other language, and a language no entry names
    gets no route (the main output). `languages` (empty = all of LABELS) minus `exclude` are the labels the
    model chooses among: Wu and Cantonese (`wuu`, `yue`) are left out by default because they took 15% of short
    Mandarin texts (docs/data-steps.md); a crawl known to hold few languages can name them."""

    name = "lang"

    def __init__(
        self,
        keep: Iterable[str] = (),
        threshold: float = 0.65,
        thresholds: dict[str, float] | None = None,
        sample_chars: int = 1000,
        code_share: float | None = 0.5,
        code_domains: Iterable[str] = ("code",),
        routes: dict[str, str] | None = None,
        languages: Iterable[str] = (),
        exclude: Iterable[str] = ("wuu", "yue"),
        reject: Reject | None = None,
    ):
        super().__init__(reject)
        self.keep = frozenset(keep)
        for key, value in (("languages", languages), ("exclude", exclude)):
            if isinstance(value, str):
                raise ValueError(f"{key} must be a list of labels, got the string {value!r}")
            if unknown := sorted(set(value) - LABELS):
                raise ValueError(f"{key}: unknown {', '.join(map(repr, unknown))}; valid: {', '.join(sorted(LABELS))}")
        # The candidates the model chooses among; stored whole (empty = every label), so it is the cache key.
        self.languages = frozenset(languages or LABELS) - frozenset(exclude)
        if self.languages == LABELS:
            self.languages = frozenset()
        if len(self.languages) == 1 or (not self.languages and set(exclude) >= LABELS):
            raise ValueError("languages/exclude: leave at least two candidate labels")
        self.thresholds = dict(thresholds or {})
        valid = LABELS | {CODE}
        for lang in [*self.keep, *self.thresholds, *(k for k in (routes or {}) if k != "*")]:
            if lang not in valid:
                raise ValueError(f"unknown language {lang!r}; valid: {', '.join(sorted(valid))}")
            if lang in LABELS and self.languages and lang not in self.languages:
                raise ValueError(f"{lang!r} is not among the labels the model may give (languages/exclude)")
        for key, value in [("threshold", threshold), *((f"thresholds.{k}", v) for k, v in self.thresholds.items())]:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise ValueError(f"{key} must be a score in [0, 1], got {value!r}")
        if not isinstance(sample_chars, int) or sample_chars < 50:
            raise ValueError(f"sample_chars must be an integer >= 50, got {sample_chars!r}")
        if code_share is False:  # what a pipeline file can write for None: TOML has no null
            code_share = None
        if code_share is not None and (isinstance(code_share, bool) or not isinstance(code_share, (int, float))
                                       or not 0.0 < code_share <= 1.0):
            raise ValueError(f"code_share must be in (0, 1], or false/None (no code detection), got {code_share!r}")
        for lang, route in (routes or {}).items():
            problem = route_problem(route)
            if problem:
                raise ValueError(f"routes.{lang}: {problem}")
        self.threshold = float(threshold)
        self.sample_chars = sample_chars
        self.code_share = code_share
        self.code_domains = frozenset(code_domains)
        self.routes = dict(routes or {})
        self.langs: Counter[str] = Counter()

    def __repr__(self) -> str:
        return (f"LangStep(keep={sorted(self.keep)}, threshold={self.threshold}, thresholds={self.thresholds}, "
                f"sample_chars={self.sample_chars}, code_share={self.code_share}, routes={self.routes})")

    def classify(self, text: str) -> tuple[str, float, dict[str, float]]:
        """(language, score, script shares) of `text`, from the sample the step reads."""
        prose, code, judged, lines = split_lines(text, 4 * self.sample_chars)
        if self.code_share is not None and lines >= _MIN_LINES and code >= self.code_share * judged:
            return CODE, round(code / judged, 4), {}
        per_window = self.sample_chars // len(prose)
        sample = " ".join(" ".join(_denoise(" ".join(p)).split())[:per_window] for p in prose)
        if not _LETTER.search(sample):  # every line looked like code, too few to call it code: read them all
            sample = " ".join(" ".join(w for w, _ in _windows(text, self.sample_chars)).split())
        if not _LETTER.search(sample):
            return UNKNOWN, 0.0, {}
        lang, score = identifier(self.languages).classify(sample)
        return lang, round(score, 4), script_shares(sample)  # compared as stored, so the two never disagree

    def process(self, doc: Document) -> str | None:
        if doc.metadata.get("domain") in self.code_domains:
            lang, score, scripts = CODE, 1.0, {}
        else:
            lang, score, scripts = self.classify(doc.text)
        doc.metadata.update(lang=lang, lang_score=score, lang_scripts=scripts)
        self.langs[lang] += 1
        route = self.routes.get(lang, self.routes.get("*"))
        if route is not None:
            doc.metadata[ROUTE_KEY] = route
        if self.keep and lang not in self.keep:
            return "not_kept"
        if lang != CODE and score < self.thresholds.get(lang, self.threshold):
            return "low_score"
        return None

    def stats(self) -> dict:
        return super().stats() | {"langs": dict(self.langs.most_common())}
