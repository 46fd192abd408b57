"""Quality step: every rule positive and negative, gems stay and junk goes (English and Chinese), the
rejection protocol, counts and reasons."""

import itertools

import pytest

from bessemer.data.document import Document
from bessemer.data.quality.boilerplate import BoilerplateRemover
from bessemer.data.quality.c4 import C4Quality
from bessemer.data.quality.filter import QualityStep
from bessemer.data.quality.fineweb import FineWebQuality
from bessemer.data.quality.gopher import GopherQuality, GopherRepetition
from bessemer.data.text.measure import TextView, code_mask, count_sentences
from bessemer.data.text.normalize import NormalizeStep
from bessemer.data.text.script import cjk_ratio

README = """# fastcsv

fastcsv is a small library that reads and writes CSV files with a predictable memory footprint. It was written for data pipelines that have to handle files larger than the memory of the machine, and it keeps the parsing rules of the Python standard library so that existing code can switch without surprises.

## Installation

Install the package from the index with pip:

```bash
pip install fastcsv
```

The wheels are built for Linux and macOS. On other platforms the package builds from source, which needs a C compiler.

## Quick start

Read a file row by row:

```python
import fastcsv

with fastcsv.open("data.csv") as reader:
    for row in reader:
        print(row["name"], row["price"])
```

Each row is a dictionary keyed by the header. Values are strings unless you pass a schema, as shown below.

## Features

- Streaming reader that never holds more than one block in memory.
- Typed columns through an optional schema.
- Writer with atomic replace, so a crash never leaves half a file behind.
- Compatible dialect options: delimiter, quote character and escape rules.

## Schemas

A schema maps column names to types. The reader converts each value and raises a clear error that names the row and the column when a value does not fit:

```python
schema = {"price": float, "count": int}
reader = fastcsv.open("data.csv", schema=schema)
```

## Contributing

Bug reports and pull requests are welcome. Please run the test suite before you open a pull request, and add a test for every bug that you fix. The project follows semantic versioning, and the changelog lists every change that affects users.

## License

The code is released under the MIT license. See the LICENSE file for the full text.
"""

QA = """Short answer: the error means that the two tensors live on different devices, and the fix is to move them to the same one before you combine them.

The longer explanation is that PyTorch never copies data between devices behind your back. When you add a tensor that lives in GPU memory to a tensor that lives in host memory, the library refuses, because a silent copy would hide a large cost in the middle of your training loop. The message names both devices so that you can find the culprit.

In your code the model was moved to the GPU with a call to cuda, but the batch that comes out of the data loader is still on the CPU. The simplest fix is to move each batch as soon as you take it from the loader. If you have several inputs, move all of them, including the labels that the loss function reads.

A second common cause is a tensor that you create inside the forward method. A new tensor is created on the CPU unless you say otherwise, so pass the device of an existing input when you create it. This also keeps the module working when somebody later runs it on a different device.

Finally, check any buffers that you store on the module. Buffers registered with the proper method move together with the model, but plain attributes do not, and they are a frequent source of this error after a refactor. With these three changes the error should go away, and the training loop will run at the same speed as before.
"""

ZH_QA = """这个问题的原因是编码不一致。文件在保存的时候使用了GBK编码，但是程序在读取的时候默认使用了UTF-8编码，所以中文字符就变成了乱码。

解决的方法有两种。第一种是在读取文件的时候明确指定编码，也就是在打开文件的函数里把编码参数设置为GBK，这样程序就能正确地解析每一个字符。第二种是先把文件转换成UTF-8编码再读取，这种方法更适合需要长期维护的项目，因为以后所有的工具都可以使用同一种编码。

需要注意的是，如果文件里同时存在两种编码的内容，单纯指定编码是不够的。这时候可以逐行读取，对每一行尝试不同的编码，并把无法解析的行记录下来，方便以后人工检查。

另外，在团队协作的时候，最好在项目的说明文档里写清楚文件统一使用的编码，并在提交代码之前用工具自动检查。这样可以从根本上避免类似的问题再次出现，也能减少大家排查问题的时间。
"""

ZH_JUNK_LINES = [
    "欢迎访问本站！",
    "点击下载最新版本",
    "上一篇：暂无",
    "下一篇：暂无",
    "分享到：微信 微博 QQ",
    "扫一扫关注我们",
    "版权所有 © 2024 某某网络科技有限公司",
    "点击下载",
    "欢迎访问",
]
ZH_JUNK = "\n".join(ZH_JUNK_LINES * 3)

COOKIE_LINES = [
    "This website uses cookies to improve your experience.",
    "We use cookies to personalise content and ads. Accept all cookies?",
    "Cookie settings",
    "Accept cookies",
    "Click here to read our cookie policy.",
    "Subscribe to our newsletter",
    "Copyright 2024. All rights reserved.",
]
COOKIE = "\n".join(COOKIE_LINES)

STUFFED = " ".join(["cheap shoes online best cheap shoes buy cheap shoes discount cheap shoes sale"] * 12)

ZH_STUFFED = "，".join(["手机壁纸免费下载高清手机壁纸大全最新手机壁纸"] * 15) + "。"

FOOTER = "\nShare this: Click here to subscribe.\nSubscribe\n© 2024 Example Corp. All rights reserved."


def view(text: str) -> TextView:
    return TextView(text)


def run_quality(texts: dict[str, str], **options) -> tuple[dict[str, Document], dict[str, str], QualityStep]:
    step = QualityStep(**options)
    kept = {d.id: d for d in step.run([Document(k, v) for k, v in texts.items()])}
    return kept, {d.id: d.metadata["reason"] for d in step.rejected}, step


# --- gems stay, junk goes ---------------------------------------------------------------------------------


def test_gems_pass_defaults_untouched():
    texts = {"readme": README, "qa": QA, "zh_qa": ZH_QA}
    normalized = list(NormalizeStep(encoding=False).run(Document(k, v) for k, v in texts.items()))
    kept, rejected, step = run_quality({d.id: d.text for d in normalized})
    assert rejected == {}
    # Nothing in them is boilerplate or a dropped C4 line: headings, lists and code blocks all survive.
    assert kept["readme"].text == README.strip()
    assert kept["qa"].text == QA.strip()
    assert kept["zh_qa"].text == ZH_QA.strip()
    assert step.stats()["lines_removed"] == {}


def test_junk_rejected_with_reasons():
    kept, rejected, _ = run_quality(
        {"zh_junk": ZH_JUNK, "cookie": COOKIE, "stuffed": STUFFED, "zh_stuffed": ZH_STUFFED}
    )
    assert kept == {}
    assert rejected == {
        "zh_junk": "quality.boilerplate.empty",
        "cookie": "quality.boilerplate.empty",
        "stuffed": "quality.gopher_repetition.top_2_gram",
        "zh_stuffed": "quality.gopher_repetition.top_3_char_gram",
    }


def test_template_junk_still_goes_without_boilerplate_remover():
    # The cookie page passes the length floor on lines C4 then removes (policy, too few words); what is left
    # is judged again.
    _, rejected, _ = run_quality({"zh_junk": ZH_JUNK, "cookie": COOKIE}, boilerplate=False)
    assert rejected["zh_junk"].startswith("quality.gopher_repetition.")
    assert rejected["cookie"] == "quality.gopher.too_few_words"


def test_junk_with_a_sentence_of_content_is_too_short():
    _, rejected, _ = run_quality({"page": COOKIE + "\nOur shop opens at nine every morning."})
    assert rejected == {"page": "quality.gopher.too_few_words"}


def test_gem_with_template_footer_loses_only_the_footer():
    kept, rejected, step = run_quality({"qa": QA.strip() + FOOTER, "zh": ZH_QA.strip() + "\n上一篇：无\n分享到：微信"})
    assert rejected == {}
    assert kept["qa"].text == QA.strip()
    assert kept["zh"].text == ZH_QA.strip()
    assert step.stats()["lines_removed"] == {"boilerplate": 5}


def test_markdown_awareness_is_what_keeps_the_readme():
    # C4 with its terminal-punctuation rule drops every heading, list item and code line (none ends in
    # terminal punctuation) unless it knows Markdown.
    c4_punct = C4Quality(filter_no_terminal_punct=True)
    kept, rejected, step = run_quality({"readme": README}, c4=c4_punct)
    assert rejected == {} and kept["readme"].text == README
    kept, rejected, step = run_quality({"readme": README}, c4=c4_punct, markdown_aware=False)
    assert rejected == {}
    assert "## Installation" not in kept["readme"].text and "```" not in kept["readme"].text
    assert step.stats()["lines_removed"]["c4.no_terminal_punct"] > 20


# --- boilerplate ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "All rights reserved.",
        "Click here to download the free guide",
        "Subscribe to our newsletter!",
        "Subscribe",
        "This website uses cookies to ensure you get the best experience.",
        "Accept all cookies",
        "点击下载",
        "欢迎访问我的博客",
        "版权所有 © 2024",
        "上一篇：如何学习Python",
        "下一篇：没有了",
        "分享到：",
        "扫一扫，关注公众号",
    ],
)
def test_boilerplate_lines(line):
    assert BoilerplateRemover().is_boilerplate(line)


@pytest.mark.parametrize(
    "line",
    [
        "The subscriber count grew after the launch.",
        "He reserved all the rights to the film before the studio was sold.",
        "We describe what happens when the user clicks the button.",
        "",
        # Long prose that mentions a phrase is the author's, not the template's.
        (
            "If the installer does not start on its own, click here in the list of downloads, then choose the "
            "archive for your platform, unpack it into a folder of your choice and run the setup script from "
            "that folder; the script explains each step it takes and can be stopped at any time."
        ),
    ],
)
def test_not_boilerplate(line):
    assert not BoilerplateRemover().is_boilerplate(line)


def test_boilerplate_inside_code_blocks_is_kept():
    text = "Intro.\n```\nSubscribe\n```\nSubscribe"
    assert BoilerplateRemover().apply(text) == ("Intro.\n```\nSubscribe\n```", 1)


# --- Gopher quality ---------------------------------------------------------------------------------------

SENTENCE = "The river that runs through the old town is wide and slow, and people walk along it with their dogs."


def prose(n_sentences: int = 6) -> str:
    return " ".join([SENTENCE] * n_sentences)


def test_gopher_passes_prose():
    assert GopherQuality().check(view(QA)) is None
    assert GopherQuality().check(view(ZH_QA)) is None


@pytest.mark.parametrize(
    "text, rule",
    [
        ("The cat sat on the mat with the hat.", "too_few_words"),
        ("I am at it; we go to be so. " * 20, "mean_word_length_too_short"),
        ("internationalization characteristically representatives " * 20, "mean_word_length_too_long"),
        (prose() + " #tag" * 20, "too_many_hashes"),
        (prose() + " and so on..." * 30, "too_many_ellipses"),
        ("\n".join(["- " + SENTENCE] * 3 + ["• " + SENTENCE] * 7), "too_many_bullet_lines"),
        ("\n".join([SENTENCE + " Then…"] * 4 + [SENTENCE] * 5), "too_many_ellipsis_lines"),
        ("The values were " + " ".join(str(1000 + i) for i in range(60)) + " in total.", "too_few_alpha_words"),
        ("Quick brown foxes jump over lazy dogs. " * 10, "too_few_stop_words"),
        ("龘靐齉爩鱻麤" * 20, "mean_word_length_too_short"),
        ("苹果香蕉橘子葡萄西瓜草莓菠萝芒果樱桃柠檬" * 5, "too_few_stop_words"),
    ],
)
def test_gopher_rules(text, rule):
    assert GopherQuality().check(view(text)) == rule


def test_gopher_thresholds_are_options():
    assert GopherQuality(max_doc_words=100).check(view(QA)) == "too_many_words"
    short = "The cat sat on the mat with the hat."
    assert GopherQuality(min_doc_words=None).check(view(short)) is None
    assert GopherQuality(min_stop_words=None).check(view("Quick brown foxes jump over lazy dogs. " * 10)) is None


def test_cjk_document_counts_characters_and_segments_for_word_length():
    v = view(ZH_QA)
    assert v.cjk and v.chinese and not view(QA).cjk
    assert "GBK" in v.words and {len(w) for w in v.words if not w.isascii()} == {1}
    assert 1.2 < sum(map(len, v.segmented_words)) / len(v.segmented_words) < 3  # jieba words
    assert cjk_ratio("abc 中文") == pytest.approx(2 / 5)


# --- Gopher repetition ------------------------------------------------------------------------------------

PARAS = [f"Paragraph {w} talks about something different from the others." for w in "ABCDEFG"]


def test_repetition_passes_prose():
    assert GopherRepetition().check(view(QA)) is None
    assert GopherRepetition().check(view(ZH_QA)) is None
    assert GopherRepetition().check(view(README)) is None


@pytest.mark.parametrize(
    "text, rule",
    [
        ("\n\n".join(PARAS[:4] + [PARAS[0]] * 3), "dup_para_frac"),
        ("\n\n".join([QA.split("\n\n")[1]] * 2 + PARAS), "dup_para_char_frac"),
        ("\n".join(PARAS[:6] + ["Read more."] * 5), "dup_line_frac"),
        ("\n".join([QA.split("\n\n")[1]] * 2 + PARAS), "dup_line_char_frac"),
        (STUFFED, "top_2_gram"),
    ],
)
def test_repetition_rules(text, rule):
    # The same page fails both char fractions; turning the paragraph rules off shows the line rule.
    only = {"dup_para_frac": None, "dup_para_char_frac": None} if rule == "dup_line_char_frac" else {}
    assert GopherRepetition(**only).check(view(text)) == rule


def test_repeated_ngrams_across_distinct_lines():
    s = "the quick brown fox jumps over a lazy dog near our old barn today"
    lines = [f"Line number {w}: {s}." for w in ["one", "two", "three", "four", "five", "six", "seven", "eight",
                                                "nine", "ten", "eleven", "twelve", "thirteen", "fourteen"]]
    text = QA + "\n\n" + "\n".join(lines)
    assert GopherRepetition().check(view(text)).startswith("dup_")
    assert GopherRepetition(dup_n_grams=()).check(view(text)) is None


# --- C4 -----------------------------------------------------------------------------------------------------


def c4(text: str, markdown_aware: bool = True, **options):
    return C4Quality(**options).apply(view(text), markdown_aware)


def test_c4_keeps_prose_whole():
    assert c4(QA) == (QA, None, {})


@pytest.mark.parametrize(
    "line, rule",
    [
        ("Next page", "too_few_words"),
        ("Thanks!", "too_few_words"),
        ("Please enable JavaScript to view the comments.", "javascript"),
        ("By using this site you agree to our terms of use.", "policy"),
        ("The token " + "x" * 1001 + " is too long.", "too_long_word"),
    ],
)
def test_c4_line_rules(line, rule):
    text, failed, removed = c4(QA.strip() + "\n" + line)
    assert failed is None
    assert removed == {rule: 1}
    assert text == QA.strip()


@pytest.mark.parametrize("line", ["Home | About | Contact", "Read the next chapter..."])
def test_c4_terminal_punctuation_rule_is_off_by_default(line):
    # FineWeb turns it off: it drops headings, list items and every line a list introduces.
    assert c4(QA.strip() + "\n" + line) == (QA.strip() + "\n" + line, None, {})
    text, failed, removed = c4(QA.strip() + "\n" + line, filter_no_terminal_punct=True)
    assert (text, failed, removed) == (QA.strip(), None, {"no_terminal_punct": 1})


@pytest.mark.parametrize(
    "extra, rule",
    [
        ("Lorem ipsum dolor sit amet, consectetur adipiscing elit.", "lorem_ipsum"),
        ("The config is {name: value} and nothing else.", "curly_bracket"),
    ],
)
def test_c4_page_rules(extra, rule):
    assert c4(QA.strip() + "\n" + extra, filter_curly_bracket=True)[1] == rule


def test_c4_curly_bracket_rule_is_off_by_default():
    # It drops every documentation page with a code sample the extractor did not fence.
    page = QA.strip() + "\nThe config is {name: value} and nothing else."
    assert c4(page) == (page, None, {})


def test_c4_too_few_sentences():
    # C4's five sentences are an option; by default one must be left after the line rules.
    five = {"min_num_sentences": 5}
    four = "One sentence here. Two sentences here.\nThree is here.\nAnd a fourth one."
    assert c4(four, **five)[1] == "too_few_sentences"
    assert c4("One here. Two here. Three here.\nFour is here.\nAnd a fifth one.", **five)[1] is None
    assert c4("一句话。两句话。\n三句话。", **five)[1] == "too_few_sentences"
    assert c4("第三十二条 刑罚分为主刑和附加刑。")[1] is None
    assert c4("Next page\nThanks!")[1] == "too_few_sentences"


def test_c4_removes_citations():
    text, _, _ = c4(QA.strip() + "\nThe river is long.[1] It is also wide.[citation needed]")
    assert text.endswith("The river is long. It is also wide.")


def test_c4_markdown_awareness():
    page = (
        QA.strip()
        + "\n\n## Usage notes\n\nRun it like this:\n\n```js\nconst x = {a: 1}  // javascript\n```\n\n"
        + "- first item\n- second item\n\nUse `{}` for an empty dict, and $\\frac{a}{b}$ for a fraction."
    )
    text, failed, removed = c4(page)
    assert (failed, removed) == (None, {})
    assert text == page
    text, failed, removed = c4(page, markdown_aware=False, filter_curly_bracket=True)
    assert failed == "curly_bracket"


def test_c4_cjk_terminal_punctuation():
    zh = ZH_QA.strip()
    # 。 ends a line, so does …; a CJK line needs five characters.
    text, failed, removed = c4(zh + "\n相关阅读\n那么……\n这是一个很好的例子……", filter_no_terminal_punct=True)
    assert failed is None
    assert text == zh + "\n这是一个很好的例子……"
    assert removed == {"no_terminal_punct": 1, "too_few_words": 1}


def test_c4_rules_switch_off():
    _, failed, removed = c4(QA.strip() + "\nHome", min_words_per_line=None)
    assert (failed, removed) == (None, {})
    assert c4("Short.", min_num_sentences=None)[1] is None


# --- FineWeb ------------------------------------------------------------------------------------------------


def test_fineweb_passes_gems():
    for text in (QA, ZH_QA, README):
        assert FineWebQuality().check(view(text)) is None


WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
WORDS += ["india", "juliet", "kilo", "lima", "mike", "november", "oscar", "papa"]
PAIRS = list(itertools.pairwise(WORDS))


@pytest.mark.parametrize(
    "text, rule",
    [
        ("\n".join(f"{a} {b} and the rest of the story without an end" for a, b in PAIRS), "line_punct_ratio"),
        ("\n".join(f"{a} {b} went home." for a, b in PAIRS), "short_line_ratio"),
        ("\n".join([QA.strip()] + ["The fix works on every machine we tried, old and new."] * 6), "char_dup_ratio"),
        ("\n".join(f"Supercalifragilistic{a} antidisestablishment{b}." for a, b in PAIRS), "newline_ratio"),
    ],
)
def test_fineweb_rules(text, rule):
    assert FineWebQuality().check(view(text)) == rule


def test_fineweb_ignores_code_blocks():
    code = "```\n" + "\n".join(["x = 1", "y = 2", "x = 1"] * 10) + "\n```"
    text = QA.strip() + "\n\n" + code
    assert FineWebQuality().check(view(text)) is None
    assert FineWebQuality().check(view(text), markdown_aware=False) is not None


# --- text helpers -------------------------------------------------------------------------------------------


def test_code_mask_needs_a_closing_fence():
    assert code_mask(["a", "```py", "x", "```", "b"]) == [False, True, True, True, False]
    assert code_mask(["a", "```", "b"]) == [False, False, False]


def test_count_sentences():
    assert count_sentences("One. Two! Three?") == 3
    assert count_sentences("第一句。第二句！第三句") == 3
    assert count_sentences("   ") == 0


# --- the step: protocol, counts, switches -------------------------------------------------------------------


def test_reject_callback_and_run_override():
    seen, seen_run = [], []
    step = QualityStep(reject=seen.append)
    docs = [Document("good", QA), Document("bad", "Too short.")]
    assert [d.id for d in step.run(docs)] == ["good"]
    assert [(d.id, d.metadata["reason"]) for d in seen] == [("bad", "quality.gopher.too_few_words")]
    assert step.rejected == []
    list(step.run([Document("bad2", "Also short.")], reject=seen_run.append))
    assert [d.id for d in seen_run] == ["bad2"] and len(seen) == 1
    assert step.stats()["docs_in"] == 3 and step.stats()["docs_out"] == 1
    assert step.stats()["rejected"] == {"quality.gopher.too_few_words": 2}


def test_filters_switch_off_and_code_is_skipped():
    kept, rejected, step = run_quality(
        {"short": "Too short."}, boilerplate=False, gopher_repetition=False, gopher=False, c4=False, fineweb=False
    )
    assert list(kept) == ["short"] and rejected == {}
    step = QualityStep()
    code = Document("code", "x = 1", {"domain": "code"})
    assert list(step.run([code])) == [code]
    assert step.stats()["skipped"] == 1


def test_custom_filter_instance_and_bad_option():
    _, rejected, _ = run_quality({"qa": QA}, gopher=GopherQuality(min_doc_words=1000))
    assert rejected == {"qa": "quality.gopher.too_few_words"}
    with pytest.raises(TypeError, match="GopherQuality"):
        QualityStep(gopher=3)


def test_filter_options_from_a_pipeline_table():
    from bessemer.data.steps import ConfigError, build_step

    step = build_step({"name": "quality", "gopher": {"min_doc_words": 1000}, "c4": {"min_num_sentences": 5}})
    assert step.gopher.doc_words == (1000, 100_000) and step.c4.min_num_sentences == 5
    with pytest.raises(ConfigError, match="min_doc_wordz.*valid keys: min_doc_words"):
        build_step({"name": "quality", "gopher": {"min_doc_wordz": 50}})


def test_line_removals_are_counted():
    _, _, step = run_quality({"qa": QA.strip() + "\nNext page\nPlease enable JavaScript to continue."})
    assert step.stats()["lines_removed"] == {"c4.javascript": 1, "c4.too_few_words": 1}
