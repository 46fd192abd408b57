"""Extract step: main text of article pages (news, blog, docs, Chinese) without the page furniture, and
JS-rendered / empty pages rejected with the right reason."""

from pathlib import Path

import pytest

pytest.importorskip("trafilatura")

from bessemer.data.document import Document
from bessemer.data.web.extract import ExtractStep

FIXTURES = Path(__file__).parent / "fixtures" / "html"


def html_doc(html: str, id: str = "d") -> Document:
    return Document(id, html, {"format": "html", "url": f"https://example.com/{id}"})


def fixture(name: str) -> Document:
    return html_doc((FIXTURES / f"{name}.html").read_text(encoding="utf-8"), name)


def extract(doc: Document, **kwargs) -> tuple[ExtractStep, list[Document]]:
    step = ExtractStep(**kwargs)
    return step, list(step.run([doc]))


@pytest.mark.parametrize("name, present, absent, title", [
    ("news",
     ["The city council voted nine to two on Tuesday night", "operational before the end of the decade"],
     ["We use cookies", "Subscribe now", "Advertisement", "All rights reserved", "Related stories",
      "Sign up for our newsletter", "Privacy Policy"],
     "Harbor city approves flood barrier after decade of debate | The Coastal Ledger"),
    ("blog",
     ["The real culprit turned out to be the starter.", "A cheap thermometer taught me more"],
     ["Popular posts", "Shop my favourite tools", "Check out my channel", "First!", "Powered by"],
     "Why my sourdough stopped rising (and how I fixed it) - Crumb Notes"),
    ("docs",
     ["Hoplite retries a request when the connection fails", "hoplite.Retry(total=5, backoff=0.25)",
      "are never retried automatically"],
     ["This site uses cookies", "Search docs", "Sponsored", "CloudThing", "Changelog", "Was this page helpful",
      "Copyright"],
     "Configuring retries - Hoplite HTTP client documentation"),
    ("chinese",
     ["本市中心公园的改造工程于昨日正式启动", "不要进入围挡范围"],
     ["首页", "登录", "版权所有", "广告服务"],
     "城市公园改造工程正式启动 - 本地新闻网"),
])
def test_article_main_text(name, present, absent, title):
    doc = fixture(name)
    step, out = extract(doc)
    assert out == [doc] and not step.rejected
    for sentence in present:
        assert sentence in doc.text, (sentence, doc.text)
    for junk in absent:
        assert junk not in doc.text, (junk, doc.text)
    assert "<" not in doc.text and "</p>" not in doc.text
    assert doc.metadata["title"] == title
    assert doc.metadata["format"] == "text"
    stats = doc.metadata["extract"]
    assert stats["text_chars"] == len(doc.text) and stats["html_bytes"] > stats["text_chars"]
    assert 0.0 <= stats["script_ratio"] < 0.5
    assert doc.metadata["url"].endswith(name)  # the reader's metadata is kept


BUNDLE = "<script>" + "var a=function(){return window.x};" * 200 + "</script>"

JS_PAGES = {
    "script_only_body": """<html><head><title>Shop</title></head><body>
        <script src="/static/js/vendor.3f2a.js"></script><script src="/static/js/main.8c1d.js"></script>
        </body></html>""",
    "react_shell": """<!doctype html><html><head><meta charset="utf-8"><title>React App</title>
        <link href="/static/css/main.css" rel="stylesheet"></head>
        <body><noscript>You need to enable JavaScript to run this app.</noscript><div id="root"></div>
        <script src="/static/js/main.js"></script></body></html>""",
    "vue_shell": """<!DOCTYPE html><html><head><title>dashboard</title></head>
        <body><div id="app"></div><script type="module" src="/assets/index.4d2c.js"></script></body></html>""",
    "next_shell": """<!DOCTYPE html><html><head><title>Next</title></head><body><div id="__next"></div>
        <script id="__NEXT_DATA__" type="application/json">{"props":{"pageProps":{}},"page":"/","query":{},
        "buildId":"x1","runtimeConfig":{}}</script><script src="/_next/static/chunks/main.js" async></script>
        </body></html>""",
    "noscript_only": """<html><head><title>Portal</title></head><body>
        <noscript>This site requires JavaScript. Please enable JavaScript in your browser settings.</noscript>
        </body></html>""",
    "script_dominated": "<html><head><title>App</title>" + BUNDLE + "</head><body><p>Loading the page</p></body></html>",
    "big_scripts_tiny_text": "<html><head><title>App</title>" + BUNDLE + """</head><body>
        <div class="wrap">""" + '<div class="x"><span class="y"></span></div>' * 300 + "<p>Welcome</p></div></body></html>",
    "low_density": """<html><head><title>Widget</title><script src="/w.js"></script></head><body>"""
        + '<div class="grid-cell col-md-4 col-sm-12 hidden-xs" data-track="cell"><span class="icon"></span></div>' * 300
        + "<p>" + "Product loading, one moment please. " * 12 + "</p></body></html>",
}


@pytest.mark.parametrize("name", sorted(JS_PAGES))
def test_js_rendered_rejected(name):
    doc = html_doc(JS_PAGES[name], name)
    step, out = extract(doc)
    assert out == [] and step.rejected == [doc]
    assert doc.metadata["reason"] == "extract.js_rendered", doc.metadata
    assert doc.metadata["extract"]["rule"]
    assert step.stats()["rejected"] == {"extract.js_rendered": 1}


def test_js_rules_name_what_fired():
    rules = {}
    for name, html in JS_PAGES.items():
        doc = html_doc(html, name)
        extract(doc)
        rules[name] = doc.metadata["extract"]["rule"]
    assert rules["script_dominated"] == "script_ratio"
    assert rules["big_scripts_tiny_text"] in ("script_ratio", "large_scripts")
    assert rules["react_shell"] == "noscript"
    assert rules["vue_shell"] == rules["next_shell"] == rules["script_only_body"] == "spa_shell"
    assert rules["low_density"] == "text_density"


def test_js_notice_after_extraction():
    # No script on the page (the rules before extraction need one), but the only text is the notice.
    doc = html_doc("<html><body><div><p>Please enable JavaScript to continue using this website.</p></div></body></html>")
    _step, out = extract(doc)
    assert out == [] and doc.metadata["reason"] == "extract.js_rendered"
    assert doc.metadata["extract"]["rule"] == "notice"


@pytest.mark.parametrize("html", ["", "   \n", "<html><head><title>t</title></head><body></body></html>",
                                  "<html><body><div class='nav'><a href='/'>Home</a></div></body></html>",
                                  "<html><body><p>Too short to keep.</p></body></html>"])
def test_empty_rejected(html):
    doc = html_doc(html)
    _step, out = extract(doc)
    assert out == [] and doc.metadata["reason"] == "extract.empty"


def test_min_text_chars_option():
    html = "<html><body><article><p>A short but complete sentence stands here.</p></article></body></html>"
    assert extract(html_doc(html))[1] == []
    doc = html_doc(html)
    assert extract(doc, min_text_chars=10)[1] == [doc]
    assert doc.text == "A short but complete sentence stands here."


def test_rules_turn_off_with_none():
    doc = html_doc(JS_PAGES["script_dominated"])
    _step, _out = extract(doc, max_script_ratio=None, large_script_bytes=None, min_text_density=None,
                        min_text_chars=5)
    assert doc.metadata.get("reason") != "extract.js_rendered"


def test_article_with_scripts_is_kept():
    # A real article whose page also carries analytics and an empty #app widget: the text is there.
    html = (FIXTURES / "news.html").read_text(encoding="utf-8").replace(
        "</main>", '<div id="app"></div><script>' + "track();" * 100 + "</script></main>")
    doc = html_doc(html)
    assert extract(doc)[1] == [doc]


def test_non_html_passes_through():
    text = "<p>a document that merely mentions HTML tags</p>"
    docs = [Document("a", text, {"format": "text"}), Document("b", text)]
    step = ExtractStep()
    assert list(step.run(docs)) == docs
    assert [d.text for d in docs] == [text, text] and "extract" not in docs[0].metadata
    assert step.stats()["passed_through"] == 2

    doc = Document("c", (FIXTURES / "blog.html").read_text(encoding="utf-8"))
    assert extract(doc, only_html=False)[1] == [doc] and doc.text.startswith("Why my sourdough")


def test_stats_and_reject_callback():
    sink = []
    step = ExtractStep(reject=sink.append)
    docs = [fixture("news"), html_doc(JS_PAGES["vue_shell"], "vue"), html_doc("", "empty"),
            Document("t", "plain", {"format": "text"})]
    out = list(step.run(docs))
    assert [d.id for d in out] == ["news", "t"]
    assert [d.metadata["reason"] for d in sink] == ["extract.js_rendered", "extract.empty"]
    s = step.stats()
    assert s["docs_in"] == 4 and s["docs_out"] == 2 and s["passed_through"] == 1
    assert s["text_chars"] == len(out[0].text) and s["html_bytes"] > s["text_chars"]


def test_bad_threshold():
    with pytest.raises(ValueError, match="max_script_ratio"):
        ExtractStep(max_script_ratio=2.0)


def test_registered_in_pipeline():
    from bessemer.data.steps import build_step

    step = build_step({"name": "extract", "min_text_chars": 100})
    assert isinstance(step, ExtractStep) and step.min_text_chars == 100
