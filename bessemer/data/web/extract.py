"""Main-content extraction from HTML: the `ExtractStep` pipeline step.

A WARC reader yields raw HTML (`metadata.format = "html"`); this step replaces it with the page's main
text (trafilatura, precision-first: navigation, footers, cookie banners and comments are dropped), keeps
the page title in `metadata["title"]` and sets `metadata["format"] = "text"`. Documents of another format
pass through untouched.

Pages that a browser would fill in with JavaScript hold no text for us, and extracting them yields
either nothing or the "please enable JavaScript" notice. They are caught twice:

- before extraction, from the parsed page (any rule -> `extract.js_rendered`):
  script-dominated (inline script bytes / HTML bytes > `max_script_ratio`, or visible text shorter than
  `shell_max_text_chars` while inline scripts exceed `large_script_bytes`); an SPA shell (visible text
  shorter than `shell_max_text_chars` and a framework mark: an empty mount point `<div id="root|app|
  __next|__nuxt|___gatsby...">`, `<app-root>`, `__NEXT_DATA__`/`__NUXT__` state, a `<noscript>` that asks
  for JavaScript, or a body made only of scripts); little visible text for the markup (visible chars /
  HTML bytes < `min_text_density` on a page over `density_min_html_bytes` with fewer than
  `density_max_text_chars` visible chars). Every rule except the `<noscript>` one needs at least one
  `<script>` on the page: a thin page without scripts is not JS-rendered, just thin.
- after extraction: short text (< `shell_max_text_chars`) that is a JavaScript-required notice ->
  `extract.js_rendered`; nothing, or fewer than `min_text_chars` characters -> `extract.empty`.

Thresholds and why they are where they are: docs/data-extract-quality.md. Every document that reaches the
rules gets `metadata["extract"]` = {html_bytes, script_bytes, script_ratio, visible_chars, text_density,
text_chars}, kept or rejected, so the exclusion sink shows the numbers the rule judged.
"""

import re

from bessemer.data.document import Document
from bessemer.data.steps import Reject, Step

# Mount points the common SPA frameworks render into (React/CRA, Vue, Next.js, Nuxt, Gatsby, Svelte, Ember).
SPA_MOUNT_IDS = frozenset({"root", "app", "__next", "__nuxt", "___gatsby", "gatsby-focus-wrapper", "svelte",
                           "ember-app", "react-root", "vue-app", "main-app", "q-app", "application"})
_STATE_MARKS = ("__NEXT_DATA__", "__NUXT__", "__INITIAL_STATE__", "__APOLLO_STATE__", "__PRELOADED_STATE__")
_JS_NOTICE = re.compile(
    r"(enable|turn on|activate|requires?|need|needs|without|disabled|support)\W+(\w+\W+){0,4}?javascript"
    r"|javascript\W+(\w+\W+){0,3}?(required|disabled|enabled|needed|must be)", re.IGNORECASE)
# Not visible in a browser, or not text: what they hold is not the page's visible text.
_HIDDEN = ("script", "style", "noscript", "template", "svg", "head", "title", "iframe", "object")
_VISIBLE_XPATH = "//text()[not(" + " or ".join(f"ancestor::{t}" for t in _HIDDEN) + ")]"
_OWN_TEXT_XPATH = ".//text()[not(ancestor::script or ancestor::style or ancestor::noscript)]"
# Tags that may fill a body without carrying content.
_INERT = frozenset({"script", "noscript", "link", "style", "meta", "template", "iframe", "svg", "img", "br"})


def _import_trafilatura():
    try:
        import trafilatura
        from trafilatura.utils import load_html
    except ImportError:
        raise ImportError("the extract step needs trafilatura: pip install trafilatura") from None
    return trafilatura, load_html


def _fold(text: str) -> str:
    return " ".join(text.split())


def page_stats(tree, html_bytes: int) -> dict:
    """What the JS-rendered rules look at, from a parsed page (lxml tree)."""
    scripts = list(tree.iter("script"))
    script_bytes = sum(len((s.text or "").encode()) for s in scripts)
    visible = _fold(" ".join(tree.xpath(_VISIBLE_XPATH)))
    return {
        "html_bytes": html_bytes,
        "scripts": len(scripts),
        "script_bytes": script_bytes,
        "script_ratio": round(script_bytes / html_bytes, 4) if html_bytes else 0.0,
        "visible_chars": len(visible),
        "text_density": round(len(visible) / html_bytes, 4) if html_bytes else 0.0,
    }


def _has_text(el) -> bool:
    return bool(_fold(" ".join(el.xpath(_OWN_TEXT_XPATH))))


def spa_marks(tree) -> list[str]:
    """Framework marks of a client-rendered page: empty mount points, hydration state, a JavaScript notice."""
    marks = []
    for el in tree.iter():
        if not isinstance(el.tag, str):
            continue
        if el.get("id") in SPA_MOUNT_IDS and not _has_text(el):
            marks.append(f"mount#{el.get('id')}")
        elif (el.tag == "app-root" or el.get("ng-version") is not None
              or el.get("data-reactroot") is not None) and not _has_text(el):
            marks.append(f"mount<{el.tag}>")
    for s in tree.iter("script"):
        if s.get("id") in _STATE_MARKS or any(m in (s.text or "") for m in _STATE_MARKS):
            marks.append("state")
            break
    for ns in tree.iter("noscript"):
        if _JS_NOTICE.search(ns.text_content()):
            marks.append("noscript")
            break
    body = tree.find(".//body")
    if body is not None:
        children = [c for c in body if isinstance(c.tag, str)]
        if any(c.tag == "script" for c in children) and all(
                c.tag in _INERT or not _has_text(c) for c in children) and not _fold(body.text or ""):
            marks.append("scripts_only")
    return marks


class ExtractStep(Step):
    """Pipeline step: HTML -> main text. Set a threshold to None to turn its rule off.

    `only_html=False` treats every document as HTML, whatever its `metadata["format"]` (input read from
    JSONL/Parquet columns of raw HTML without a format mark)."""

    name = "extract"

    def __init__(
        self,
        only_html: bool = True,
        favor_precision: bool = True,
        include_comments: bool = False,
        include_tables: bool = True,
        min_text_chars: int | None = 50,
        max_script_ratio: float | None = 0.5,
        large_script_bytes: int | None = 2000,
        shell_max_text_chars: int | None = 200,
        min_text_density: float | None = 0.02,
        density_min_html_bytes: int = 5000,
        density_max_text_chars: int = 2000,
        reject: Reject | None = None,
    ):
        super().__init__(reject)
        for key, value in (("max_script_ratio", max_script_ratio), ("min_text_density", min_text_density)):
            if value is not None and not 0.0 <= value <= 1.0:
                raise ValueError(f"{key} must be a fraction in [0, 1] or None, got {value}")
        self.only_html = only_html
        self.options = {"favor_precision": favor_precision, "include_comments": include_comments,
                        "include_tables": include_tables}
        self.min_text_chars = min_text_chars
        self.max_script_ratio = max_script_ratio
        self.large_script_bytes = large_script_bytes
        self.shell_max_text_chars = shell_max_text_chars
        self.min_text_density = min_text_density
        self.density_min_html_bytes = density_min_html_bytes
        self.density_max_text_chars = density_max_text_chars
        self.passed_through = 0
        self.html_bytes = 0
        self.text_chars = 0
        self._trafilatura, self._load_html = _import_trafilatura()

    def __repr__(self) -> str:
        return f"ExtractStep(only_html={self.only_html}, {self.options}, min_text_chars={self.min_text_chars})"

    def js_rule(self, stats: dict, marks: list[str]) -> str | None:
        """The first JS-rendered rule the page breaks, by name (for metadata["extract"]["rule"]), or None."""
        tiny = self.shell_max_text_chars is not None and stats["visible_chars"] < self.shell_max_text_chars
        if tiny and "noscript" in marks:
            return "noscript"
        if not stats["scripts"]:
            return None
        if self.max_script_ratio is not None and stats["script_ratio"] > self.max_script_ratio:
            return "script_ratio"
        if tiny and self.large_script_bytes is not None and stats["script_bytes"] > self.large_script_bytes:
            return "large_scripts"
        if tiny and marks:
            return "spa_shell"
        if (self.min_text_density is not None and stats["html_bytes"] > self.density_min_html_bytes
                and stats["visible_chars"] < self.density_max_text_chars
                and stats["text_density"] < self.min_text_density):
            return "text_density"
        return None

    def process(self, doc: Document) -> str | None:
        if self.only_html and doc.metadata.get("format") != "html":
            self.passed_through += 1
            return None
        html = doc.text
        html_bytes = len(html.encode())
        self.html_bytes += html_bytes
        tree = self._load_html(html) if html.strip() else None
        if tree is None:
            doc.metadata["extract"] = {"html_bytes": html_bytes, "text_chars": 0}
            return "empty"
        stats = page_stats(tree, html_bytes)
        doc.metadata["extract"] = stats
        title = tree.findtext(".//title")
        if title and _fold(title):
            doc.metadata["title"] = _fold(title)
        if rule := self.js_rule(stats, marks := spa_marks(tree)):
            stats["rule"], stats["marks"] = rule, marks
            return "js_rendered"
        text = self._trafilatura.extract(tree, output_format="txt", **self.options) or ""
        text = text.strip()
        stats["text_chars"] = len(text)
        if self.shell_max_text_chars is not None and len(text) < self.shell_max_text_chars and _JS_NOTICE.search(text):
            doc.text, stats["rule"] = text, "notice"
            return "js_rendered"
        if not text or (self.min_text_chars is not None and len(text) < self.min_text_chars):
            doc.text = text
            return "empty"
        doc.text = text
        doc.metadata["format"] = "text"
        self.text_chars += len(text)
        return None

    def stats(self) -> dict:
        return super().stats() | {"passed_through": self.passed_through, "html_bytes": self.html_bytes,
                                  "text_chars": self.text_chars}
