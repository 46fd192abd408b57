"""Crawled pages: the `url` and `extract` steps (docs/data-steps.md, docs/data-extract-quality.md).

    url.py              UrlStep (the `url` step): the user's block lists of domains, URL substrings and words
    extract.py          ExtractStep (the `extract` step): main text of HTML pages, JavaScript-only pages rejected
"""
