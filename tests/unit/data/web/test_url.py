"""The url step: block-list files (sections, plain lists, comments, malformed lines), inline lists, matching
of domains, substrings and words, documents without a URL, rejection reasons and counts."""

import pytest

from bessemer.data.document import Document
from bessemer.data.pipeline_toml import Pipeline
from bessemer.data.steps import build_step
from bessemer.data.web.url import BlockList, UrlStep, normalize_domain, url_host
from bessemer.errors import ConfigError

BLOCK_LIST = """\
# Block list for the web crawl. Comments and blank lines are ignored.

[domains]
spam.example
badsite.com
*.tracker.net
Bücher-Shop.de

[substrings]
/wp-login.php
?utm_source=spam
/ads/

[words]
casino
# a comment inside a section
porn

[soft_words]
free
cheap
pills
"""


@pytest.fixture
def block_file(tmp_path):
    path = tmp_path / "block.txt"
    path.write_text(BLOCK_LIST, encoding="utf-8")
    return str(path)


def doc(url: str | None, **meta) -> Document:
    if url is not None:
        meta["url"] = url
    return Document("d", "some text", meta)


def reason(step: UrlStep, url: str | None) -> str | None:
    d = doc(url)
    kept = list(step.run([d]))
    return None if kept else d.metadata["reason"]


def test_domains_match_subdomains_but_not_lookalikes(block_file):
    step = UrlStep(lists=[block_file])
    assert reason(step, "https://badsite.com/page") == "url.blocked_domain"
    assert reason(step, "http://www.badsite.com/") == "url.blocked_domain"
    assert reason(step, "http://a.b.BADSITE.com:8080/x") == "url.blocked_domain"
    assert reason(step, "http://user:pw@badsite.com./x") == "url.blocked_domain"
    assert reason(step, "badsite.com/no-scheme") == "url.blocked_domain"
    assert reason(step, "https://x.tracker.net/") == "url.blocked_domain"
    assert reason(step, "https://tracker.net/") == "url.blocked_domain"  # *.tracker.net lists the domain
    assert reason(step, "https://xn--bcher-shop-9db.de/") == "url.blocked_domain"  # punycode of the entry
    assert reason(step, "https://bücher-shop.de/") == "url.blocked_domain"
    assert reason(step, "https://notbadsite.com/") is None
    assert reason(step, "https://badsite.com.example.org/") is None
    assert reason(step, "https://example.org/badsite.com") is None  # a domain in the path is not the host


def test_substrings_words_and_soft_words(block_file):
    step = UrlStep(lists=[block_file])
    assert reason(step, "https://blog.example.org/wp-login.php?next=/") == "url.blocked_substring"
    assert reason(step, "https://example.org/a?UTM_SOURCE=spam") == "url.blocked_substring"  # case-insensitive
    assert reason(step, "https://example.org/%61ds/banner") == "url.blocked_substring"  # %61 = a
    assert reason(step, "https://casino.example.org/") == "url.banned_word"
    assert reason(step, "https://example.org/best-casino-bonus") == "url.banned_word"
    assert reason(step, "https://example.org/occasional-notes") is None  # words, not substrings
    assert reason(step, "https://example.org/free-shipping") is None  # one soft word
    assert reason(step, "https://example.org/free-cheap-watches") == "url.soft_banned_words"
    assert reason(step, "https://example.org/free/free") is None  # distinct soft words count


def test_matching_entry_and_counts(block_file):
    rejected = []
    step = UrlStep(lists=[block_file])
    docs = [doc("https://www.badsite.com/"), doc("https://example.org/wp-login.php"), doc("https://example.org/casino"),
            doc("https://example.org/cheap-pills"), doc("https://example.org/fine"), doc(None), doc(""),
            doc("https://example.org/also-fine", title="x")]
    kept = list(step.run(docs, reject=rejected.append))
    assert len(kept) == 4
    assert [(d.metadata["reason"], d.metadata["url_match"]) for d in rejected] == [
        ("url.blocked_domain", "badsite.com"), ("url.blocked_substring", "/wp-login.php"),
        ("url.banned_word", "casino"), ("url.soft_banned_words", "cheap pills")]
    assert step.stats() == {
        "docs_in": 8, "docs_out": 4, "no_url": 2, "no_host": 0,
        "rejected": {"url.banned_word": 1, "url.blocked_domain": 1, "url.blocked_substring": 1,
                     "url.soft_banned_words": 1}}


def test_documents_without_url_pass_and_are_counted():
    step = UrlStep(domains=["badsite.com"])
    docs = [doc(None), doc(None, source="x.jsonl:3"), Document("w", "t", {"url": 42})]
    assert list(step.run(docs)) == docs
    assert step.stats()["no_url"] == 3


def test_url_field_and_warc_metadata():
    # The WARC reader stores the record's WARC-Target-URI as metadata["url"].
    warc = Document("<urn:uuid:1>", "<html>", {"url": "http://badsite.com/", "format": "html", "status": "200"})
    assert list(UrlStep(domains=["badsite.com"]).run([warc])) == []
    other = Document("d", "t", {"source_url": "http://badsite.com/"})
    assert list(UrlStep(domains=["badsite.com"], url_field="source_url").run([other])) == []


def test_soft_word_threshold():
    step = UrlStep(soft_words=["free", "cheap", "pills"], soft_word_threshold=3)
    assert reason(step, "https://example.org/free-cheap") is None
    assert reason(step, "https://example.org/free-cheap-pills") == "url.soft_banned_words"


def test_plain_files_per_kind(tmp_path):
    (tmp_path / "domains").write_text("# UT1 style: one domain a line\nbadsite.com\n\nother.example\n")
    (tmp_path / "words.txt").write_text("casino\n")
    (tmp_path / "subs.txt").write_text("/ads/\n")
    step = UrlStep(domain_files=[str(tmp_path / "domains")], word_files=[str(tmp_path / "words.txt")],
                   substring_files=[str(tmp_path / "subs.txt")])
    assert (len(step.block.domains), len(step.block.words), len(step.block.substrings)) == (2, 1, 1)
    assert reason(step, "http://m.other.example/") == "url.blocked_domain"
    (tmp_path / "bad").write_text("[domains]\nx.com\n")
    with pytest.raises(ValueError, match=r"bad:1: a plain list of domains has no section headers"):
        UrlStep(domain_files=[str(tmp_path / "bad")])


@pytest.mark.parametrize("content, line, message", [
    ("badsite.com\n", 1, r"entry 'badsite.com' before any section header; start the file with one of \[domains\]"),
    ("# c\n[domain]\nx.com\n", 2, r"unknown section \[domain\]; valid sections: \[domains\], \[substrings\]"),
    ("[domains]\nok.com\nhttps://badsite.com/x\n", 3, "a domain, not a URL, is expected"),
    ("[domains]\nbad site.com\n", 2, "not a domain name: 'bad site.com'"),
    ("[domains]\nspam.example  # trailing note\n", 2, "not a domain name"),
    ("[words]\nonline-casino\n", 2, "a word is letters and digits only .* put it under \\[substrings\\]"),
    ("[soft_words]\nfree stuff\n", 2, "a word is letters and digits only"),
    ("[substrings]\n/a b/\n", 2, "a URL substring has no spaces"),
])
def test_malformed_lines_name_file_and_line(tmp_path, content, line, message):
    path = tmp_path / "block.txt"
    path.write_text(content)
    with pytest.raises(ValueError, match=f"{path}:{line}: {message}"):
        UrlStep(lists=[str(path)])
    with pytest.raises(ConfigError, match=rf"steps\[0\] \(url\): {path}:{line}: "):
        build_step({"name": "url", "lists": [str(path)]}, "steps[0]")


def test_missing_file_and_bad_options(tmp_path):
    with pytest.raises(ValueError, match="url block list .*nope.txt does not exist"):
        UrlStep(lists=[str(tmp_path / "nope.txt")])
    with pytest.raises(ValueError, match="lists must be a list of strings"):
        UrlStep(lists=str(tmp_path / "x.txt"))
    with pytest.raises(ValueError, match=r"domains\[1\]: a domain, not a URL"):
        UrlStep(domains=["ok.com", "http://x.com"])
    with pytest.raises(ValueError, match="soft_word_threshold"):
        UrlStep(soft_word_threshold=0)


def test_inline_lists_in_a_pipeline_file(block_file):
    p = Pipeline.from_dict({
        "input": {"paths": ["raw/"]},
        "steps": [{"name": "url", "lists": [block_file], "domains": ["extra.org"], "words": ["warez"]},
                  {"name": "extract"}, {"name": "lang", "keep": ["en"]}],
        "output": {"dir": "out"},
    })
    step = p.build_steps()[0]
    assert isinstance(step, UrlStep)
    assert "extra.org" in step.block.domains and "badsite.com" in step.block.domains
    assert reason(step, "http://dl.example.org/warez/x.zip") == "url.banned_word"


def test_helpers():
    assert url_host("HTTPS://User@WWW.Example.COM.:443/a?b#c") == "www.example.com"
    assert url_host("mailto:someone") == ""
    assert url_host("//cdn.example.com/x") == url_host("cdn.example.com:8080") == "cdn.example.com"
    assert url_host("http://[::1/") == ""
    assert normalize_domain("*.Example.COM.") == "example.com"
    assert normalize_domain("bücher.de") == "xn--bcher-kva.de"
    assert len(BlockList(domains={"a.com"}, words={"x"})) == 2
