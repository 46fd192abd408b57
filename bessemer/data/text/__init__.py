"""Text itself: the `lang` and `normalize` steps and the text helpers every step shares (docs/data-steps.md).

    lang.py             LangStep (the `lang` step): language identification, code labelling, routes
    normalize.py        NormalizeStep (the `normalize` step): one function per rule
    script.py           the CJK character classes (Han, kana, Hangul), `cjk_ratio`
    segment.py          Chinese word segmentation (jieba), once per document
    measure.py          script-aware tokens, fenced-code mask, sentence counts, `TextView`
"""
