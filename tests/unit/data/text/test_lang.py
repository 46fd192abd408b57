"""The lang step: labels, code detection, mixed documents, keep lists, thresholds, routes, rejection."""

import pickle
import subprocess
import sys

import pytest

from bessemer.data.document import Document
from bessemer.data.steps import build_step
from bessemer.data.text.lang import (
    CODE,
    LABELS,
    UNKNOWN,
    LangStep,
    identifier,
    is_code_line,
    script_shares,
)
from bessemer.errors import ConfigError

EN = """The river rises in the hills north of the town and runs for about forty miles before it reaches the sea.
For most of the year it is shallow enough to wade across, but after the spring rains it floods the low fields
on both banks. Farmers there have learned to plant late and to keep their animals on higher ground until the
water goes down. The old stone bridge, built in the eighteenth century, is the only crossing for several miles."""

ZH = """这条河发源于城北的丘陵，流经大约六十公里后注入大海。一年中的大部分时间里，河水很浅，可以蹚水而过；
但春雨过后，河水会漫过两岸的低洼田地。那里的农民已经学会推迟播种，并在水退之前把牲畜留在高处。
十八世纪修建的那座古老石桥，是方圆数公里内唯一的渡口。每到夏天，附近村子的孩子们都会来桥下游泳。"""

PYTHON = '''import json
from pathlib import Path


def load_config(path: str) -> dict:
    """Read a JSON config file and fill in the defaults."""
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    config.setdefault("workers", 4)
    for key, value in config.items():
        if value is None:
            raise ValueError(f"{key} is not set")
    return config


class Cache:
    def __init__(self, root: Path):
        self.root = root
        self.hits = 0

    def get(self, key):
        path = self.root / key
        return path.read_text() if path.exists() else None
'''

JS = """const express = require('express');
const app = express();

app.get('/api/items', async (req, res) => {
  const items = await db.query('SELECT * FROM items WHERE owner = ?', [req.user.id]);
  res.json(items);
});

function total(items) {
  let sum = 0;
  for (const item of items) {
    sum += item.price * item.quantity;
  }
  return sum;
}

app.listen(3000);
"""

README = """# fastcsv

fastcsv reads large comma-separated files quickly and keeps memory use low by streaming rows instead of
loading the whole file. It works with any file-like object and understands quoted fields and escaped quotes.

## Installation

Install it from the package index and import it in your program. The example below counts the rows of a
file and prints the sum of one column.

```python
import fastcsv

with open("sales.csv") as f:
    rows = fastcsv.reader(f)
    total = sum(float(row["amount"]) for row in rows)
print(total)
```

The reader yields one dictionary per row. Missing values become empty strings, and a malformed line raises
an error that names its line number, so that you can fix the input and run the program again.
"""

# A Chinese tutorial that quotes English identifiers and a code sample: Chinese prose, Latin letters in the
# code (per-script shares say both).
MIXED = """在开始之前，请先确认已经安装了 Python 3.11 或更高版本。我们将用标准库中的 json 模块读取配置文件，
然后把结果保存到数据库中。下面的例子展示了最基本的用法：

```python
import json
config = json.load(open("config.json"))
print(config["name"])
```

如果配置文件不存在，程序会抛出 FileNotFoundError 异常。你可以用 try 语句捕获这个异常，并给出一条更友好的提示信息，
告诉用户应该把配置文件放在哪个目录下。Settings such as the database URL and the log level are read from this file too."""

OTHER = {
    "de": "Der Zug nach Hamburg fährt heute wegen Bauarbeiten etwa zwanzig Minuten später ab. Bitte achten Sie "
          "auf die Durchsagen am Bahnsteig und entschuldigen Sie die Unannehmlichkeiten.",
    "fr": "La bibliothèque municipale sera fermée pendant les vacances d'été pour des travaux de rénovation. Les "
          "livres empruntés pourront être rendus à la mairie jusqu'à la fin du mois.",
    "es": "El mercado del barrio abre todos los sábados por la mañana y ofrece frutas, verduras y pan recién "
          "hecho de los productores de la comarca.",
    "ru": "В следующем году в городе откроют новую линию метро, которая соединит северные районы с центром и "
          "сократит время в пути почти вдвое.",
    "ja": "明日の午後から雨が降る予報なので、出かけるときは傘を持っていったほうがいいでしょう。電車が遅れる可能性もあります。",
    "ko": "이번 주말에는 도서관이 정기 점검으로 문을 닫습니다. 빌린 책은 월요일부터 다시 반납하실 수 있습니다.",
}


def doc(text: str, **meta) -> Document:
    return Document("d", text, dict(meta))


def run(step: LangStep, *docs: Document) -> list[Document]:
    return list(step.run(docs))


def test_labels_are_the_models():
    assert set(identifier().labels) == LABELS


def test_model_loads_lazily_and_pickles():
    code = "import sys; import bessemer.data.text.lang; assert 'py3langid' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)
    step = LangStep(keep=["en"])
    run(step, doc(EN))
    clone = pickle.loads(pickle.dumps(step))
    assert clone.keep == {"en"}


def test_english_and_chinese():
    step = LangStep()
    en, zh = doc(EN), doc(ZH)
    assert run(step, en, zh) == [en, zh]
    assert en.metadata["lang"] == "en" and en.metadata["lang_score"] > 0.9
    assert zh.metadata["lang"] == "zh" and zh.metadata["lang_score"] > 0.9
    assert list(en.metadata["lang_scripts"]) == ["Latn"]
    assert list(zh.metadata["lang_scripts"]) == ["Hani"]
    assert "route" not in en.metadata
    assert step.stats() == {"docs_in": 2, "docs_out": 2, "rejected": {}, "langs": {"en": 1, "zh": 1}}


@pytest.mark.parametrize("lang", sorted(OTHER))
def test_other_languages(lang):
    d = doc(OTHER[lang])
    run(LangStep(), d)
    assert d.metadata["lang"] == lang, d.metadata


@pytest.mark.parametrize("text", [PYTHON, JS], ids=["python", "javascript"])
def test_source_code_is_code(text):
    d = doc(text)
    assert run(LangStep(threshold=0.99), d) == [d]  # code is judged by its code share, not the threshold
    assert d.metadata["lang"] == CODE and d.metadata["lang_score"] >= 0.5


def test_code_detection_can_be_switched_off():
    for off in (None, False):  # False: what a pipeline file writes
        d = doc(PYTHON)
        run(LangStep(code_share=off), d)
        assert d.metadata["lang"] != CODE


def test_readme_with_a_code_block_is_its_prose_language():
    d = doc(README)
    run(LangStep(), d)
    assert d.metadata["lang"] == "en" and d.metadata["lang_score"] > 0.9


def test_mixed_document_gets_the_majority_language_and_script_shares():
    d = doc(MIXED)
    run(LangStep(), d)
    assert d.metadata["lang"] == "zh"
    scripts = d.metadata["lang_scripts"]
    assert set(scripts) == {"Hani", "Latn"} and scripts["Hani"] > scripts["Latn"] > 0.05


def test_long_document_reads_start_and_middle():
    # English for the first half, Chinese for the second: the sample has both.
    text = "\n".join([EN] * 10 + [ZH] * 60)
    d = doc(text)
    run(LangStep(), d)
    assert {"Latn", "Hani"} <= set(d.metadata["lang_scripts"])


def test_code_domain_is_code_without_detection():
    d = doc(EN, domain="code")
    run(LangStep(), d)
    assert d.metadata["lang"] == CODE and d.metadata["lang_score"] == 1.0


def test_keep_list_rejects_with_reason():
    rejected = []
    step = LangStep(keep=["en", "zh"])
    docs = [doc(EN), doc(ZH), doc(OTHER["de"]), doc(PYTHON), doc(OTHER["fr"])]
    kept = list(step.run(docs, reject=rejected.append))
    assert [d.metadata["lang"] for d in kept] == ["en", "zh"]
    assert [(d.metadata["lang"], d.metadata["reason"]) for d in rejected] == [
        ("de", "lang.not_kept"), (CODE, "lang.not_kept"), ("fr", "lang.not_kept")]
    st = step.stats()
    assert (st["docs_in"], st["docs_out"], st["rejected"]) == (5, 2, {"lang.not_kept": 3})
    assert st["langs"] == {"en": 1, "zh": 1, "de": 1, CODE: 1, "fr": 1}


def test_keep_code():
    kept = run(LangStep(keep=["en", "code"]), doc(PYTHON), doc(EN), doc(ZH))
    assert [d.metadata["lang"] for d in kept] == [CODE, "en"]


def test_threshold_and_per_language_thresholds():
    short = "Bug fixes and small improvements to the importer."
    d = doc(short)
    run(LangStep(threshold=0.0), d)
    score = d.metadata["lang_score"]
    assert d.metadata["lang"] == "en" and 0.0 < score < 1.0
    step = LangStep(threshold=score + 0.0001 if score < 0.9999 else 1.0)
    assert run(step, doc(short)) == [] and step.rejected[0].metadata["reason"] == "lang.low_score"
    assert step.rejected[0].metadata["lang_score"] == score  # the stored score is the one compared
    assert len(run(LangStep(threshold=score), doc(short))) == 1  # a score equal to the threshold passes
    per_lang = LangStep(threshold=0.0, thresholds={"en": 1.0})
    assert run(per_lang, doc(ZH)) and not run(per_lang, doc(short))
    assert per_lang.stats()["rejected"] == {"lang.low_score": 1}


def test_text_without_letters_is_unknown_and_low_score():
    step = LangStep()
    assert run(step, doc("12 345 678 ... 9.0 -- 42")) == []
    d = step.rejected[0]
    assert (d.metadata["lang"], d.metadata["lang_score"], d.metadata["reason"]) == (UNKNOWN, 0.0, "lang.low_score")


def test_routes():
    step = LangStep(routes={"en": "english", "code": "code", "*": "other"})
    en, zh, py = doc(EN), doc(ZH), doc(PYTHON)
    run(step, en, zh, py)
    assert [d.metadata["route"] for d in (en, zh, py)] == ["english", "other", "code"]
    no_default = doc(ZH)
    run(LangStep(routes={"en": "english"}), no_default)
    assert "route" not in no_default.metadata


def test_bad_options():
    with pytest.raises(ValueError, match="unknown language 'eng'; valid: .*\\ben\\b"):
        LangStep(keep=["eng"])
    with pytest.raises(ValueError, match="threshold"):
        LangStep(threshold=1.5)
    with pytest.raises(ValueError, match="thresholds.en"):
        LangStep(thresholds={"en": -1})
    with pytest.raises(ValueError, match="routes.en"):
        LangStep(routes={"en": "../x"})
    with pytest.raises(ValueError, match="routes.zh: 'stats' is reserved"):
        LangStep(routes={"zh": "stats"})
    with pytest.raises(ValueError, match="sample_chars"):
        LangStep(sample_chars=10)
    with pytest.raises(ConfigError, match=r"steps\[0\] \(lang\): unknown language 'english'"):
        build_step({"name": "lang", "keep": ["english"]}, "steps[0]")


def test_built_from_a_pipeline_table():
    step = build_step({"name": "lang", "keep": ["en"], "threshold": 0.65, "routes": {"en": "en"}})
    assert isinstance(step, LangStep) and step.keep == {"en"} and step.threshold == 0.65


def test_code_lines():
    for line in ["def f(x):", "    return x + 1", "}", "int main(void) {", "x = compute(a, b)", "print(total)",
                 ">>> import os", "#include <stdio.h>", "SELECT name FROM users;", "const y = 2;"]:
        assert is_code_line(line), line
    for line in ["The river rises in the hills north of the town.", "- a list item in a README",
                 "这条河发源于城北的丘陵。", "Section 3 (a) applies to every member state."]:
        assert not is_code_line(line), line


def test_script_shares():
    assert script_shares("abc 中文字") == {"Latn": 0.5, "Hani": 0.5}
    assert script_shares("Привет, мир") == {"Cyrl": 1.0}
    assert script_shares("123 !!!") == {}


def test_languages_restrict_the_candidates():
    d = doc(OTHER["de"])
    run(LangStep(languages=["en", "zh"]), d)
    assert d.metadata["lang"] in ("en", "zh")
    with pytest.raises(ValueError, match="languages: unknown 'xx'"):
        LangStep(languages=["en", "xx"])


def test_excluded_labels():
    assert LangStep().languages == LABELS - {"wuu", "yue"}
    assert LangStep(exclude=[]).languages == frozenset()  # every label: the full model
    with pytest.raises(ValueError, match="'yue' is not among the labels"):
        LangStep(keep=["zh", "yue"])
    assert LangStep(keep=["zh", "yue"], exclude=["wuu"]).keep == {"zh", "yue"}
