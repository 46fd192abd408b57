"""fastText quality classifier: preprocessing, training on a generated labeled set (held-out accuracy),
scoring, the QualityStep integration and the quality-train command."""

import json
import pickle
import random
import time

import pytest

pytest.importorskip("fasttext")

from bessemer.data.document import Document
from bessemer.data.quality.classifier import (
    QualityModel,
    normalize_label,
    preprocess,
    quality_train_main,
    train_quality_model,
)
from bessemer.data.quality.filter import QualityStep
from bessemer.errors import BessemerError

SUBJECTS = ["The committee", "Our research team", "The river", "A local farmer", "The new library", "Engineers",
            "The author", "Most historians", "The old bridge", "Her grandmother", "The orchestra", "Volunteers"]
VERBS = ["described", "studied", "restored", "questioned", "explained", "measured", "celebrated", "documented",
         "reconsidered", "compared", "planted", "translated"]
OBJECTS = ["the effects of the drought on the valley", "a collection of letters from the war",
           "the history of the northern railway", "how the tides shape the coastline",
           "the surprising behaviour of migrating birds", "a careful plan for the harvest",
           "the long argument about the city budget", "several poems written in exile",
           "the design of the wooden roof", "what the children learned that summer"]
TAILS = ["after years of patient work", "in a report published last spring", "with remarkable care",
         "because the records had been lost", "although many people disagreed", "before the winter arrived",
         "during a quiet week in March", "while the town slept"]

KEYWORDS = ["cheap", "viagra", "casino", "loans", "best price", "free download", "crypto", "bonus", "seo", "replica"]
BOILER = ["Home | About Us | Contact | Privacy Policy | Terms of Service", "Copyright 2023 All Rights Reserved",
          "Click here to subscribe to our newsletter", "Login | Register | Forgot password?",
          "Share on Facebook Twitter Pinterest", "Skip to main content", "Page 1 2 3 4 5 Next >>",
          "Add to cart Buy now Free shipping", "Accept cookies"]


def prose(rng: random.Random) -> str:
    sentences = [f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(TAILS)}."
                 for _ in range(rng.randint(3, 6))]
    return " ".join(sentences)


def junk(rng: random.Random) -> str:
    kind = rng.randrange(3)
    if kind == 0:  # keyword stuffing
        return " ".join(rng.choice(KEYWORDS) for _ in range(rng.randint(15, 40)))
    if kind == 1:  # template spam
        kw = rng.choice(KEYWORDS)
        return f"BUY {kw.upper()} NOW!!! {kw} {kw} {kw} best {kw} online cheap {kw} click here >>> {kw} deals"
    return "\n".join(rng.sample(BOILER, rng.randint(3, 6)))  # boilerplate


def labeled_set(path, n: int = 600, seed: int = 0, labels=("hq", "lq")) -> None:
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            good = i % 2 == 0
            f.write(json.dumps({"text": prose(rng) if good else junk(rng), "label": labels[0] if good else labels[1]}) + "\n")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp("qm")
    labeled_set(d / "a.jsonl", 400, seed=1)
    labeled_set(d / "b.jsonl", 400, seed=2, labels=(1, 0))
    t0 = time.perf_counter()
    report = train_quality_model([str(d / "a.jsonl"), str(d / "b.jsonl")], str(d / "model.bin"), epoch=10,
                                 bucket=100_000)
    return report, time.perf_counter() - t0, d


def test_preprocess():
    assert preprocess("Hello,  WORLD!\n\tNew   line") == "hello , world ! new line"
    assert preprocess("城市公园改造，工程启动") == "城 市 公 园 改 造 ， 工 程 启 动"
    assert preprocess("mixed 中文 text") == "mixed 中 文 text"
    assert "__label__" not in preprocess("a __label__hq b")
    assert "\n" not in preprocess("a\r\nb\n\nc")


def test_labels():
    assert [normalize_label(v) for v in ("hq", "HQ", 1, "1", True, "high")] == ["hq"] * 6
    assert [normalize_label(v) for v in ("lq", 0, "0", False, "low")] == ["lq"] * 5
    with pytest.raises(ValueError, match="unknown quality label 'maybe'"):
        normalize_label("maybe")


def test_train_fast_and_accurate(trained):
    report, seconds, _d = trained
    assert seconds < 10, seconds
    assert report.valid_docs == 80 and report.train_docs == 720
    assert report.train_hq + report.train_lq == report.train_docs
    assert report.accuracy > 0.9 and report.precision > 0.9 and report.recall > 0.9, report
    assert "precision" in report.summary()


def test_score_unseen(trained, tmp_path):
    report, _, _d = trained
    model = QualityModel(report.path)
    rng = random.Random(99)  # a seed the training set never used
    good = [model.score(prose(rng)) for _ in range(50)]
    bad = [model.score(junk(rng)) for _ in range(50)]
    assert all(0.0 <= s <= 1.0 for s in good + bad)
    assert sum(s >= 0.5 for s in good) / 50 > 0.9 and sum(s < 0.5 for s in bad) / 50 > 0.9
    assert model.score("") == pytest.approx(model.score("   \n "))  # empty text scores without error
    assert pickle.loads(pickle.dumps(model)).score("The river") == pytest.approx(model.score("The river"))


def test_quality_step_with_model(trained):
    report, _, _d = trained
    off = {"boilerplate": False, "gopher_repetition": False, "gopher": False, "c4": False, "fineweb": False}
    step = QualityStep(**off, model=report.path, threshold=0.5)
    rng = random.Random(7)
    good = [Document(f"g{i}", prose(rng)) for i in range(10)]
    bad = [Document(f"b{i}", " ".join(["cheap casino bonus loans"] * 10)) for i in range(3)]
    out = list(step.run(good + bad))
    assert [d.id for d in out] == [d.id for d in good]
    assert all(d.metadata["quality_score"] >= 0.5 for d in good)
    assert all(d.metadata["reason"] == "quality.classifier.low_score" and d.metadata["quality_score"] < 0.5
               for d in bad)
    assert step.stats()["rejected"] == {"quality.classifier.low_score": 3}

    lenient = QualityStep(**off, model=report.path, threshold=0.0)
    assert len(list(lenient.run(bad))) == 3

    # The step pickles (for worker processes) without the loaded model and reloads it on first use.
    clone = pickle.loads(pickle.dumps(step))
    assert clone._classifier is None and len(list(clone.run([Document("x", prose(rng))]))) == 1


def test_quality_step_classifier_after_heuristics(trained):
    report, _, _d = trained
    step = QualityStep(model=report.path)
    doc = Document("short", "cheap casino")  # the Gopher word count fails first; no score is computed
    assert list(step.run([doc])) == [] and doc.metadata["reason"].startswith("quality.gopher")
    assert "quality_score" not in doc.metadata
    code = Document("c", "def f(): pass", {"domain": "code"})
    assert list(step.run([code])) == [code] and "quality_score" not in code.metadata


def test_quality_step_model_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        QualityStep(model=str(tmp_path / "missing.bin"))
    with pytest.raises(ValueError, match="threshold"):
        QualityStep(threshold=1.5)
    assert QualityStep().model == ""  # off by default: no fastText import


def test_train_errors(tmp_path):
    one_class = tmp_path / "one.jsonl"
    one_class.write_text('{"text": "a b c", "label": "hq"}\n')
    with pytest.raises(BessemerError, match="both hq and lq"):
        train_quality_model(str(one_class), str(tmp_path / "m.bin"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a", "label": "hq"}\n{"body": "b", "label": "lq"}\n')
    with pytest.raises(BessemerError, match=r"bad.jsonl:2: needs fields 'label' and 'text'"):
        train_quality_model(str(bad), str(tmp_path / "m.bin"))


def test_quality_train_command(tmp_path, capsys):
    labeled_set(tmp_path / "l.jsonl", 300, seed=3)
    for rec in [tmp_path / "l.jsonl"]:
        lines = [json.loads(x) for x in rec.read_text().splitlines()]
        rec.write_text("".join(json.dumps({"body": r["text"], "q": r["label"]}) + "\n" for r in lines))
    out = tmp_path / "models" / "q.bin"
    rc = quality_train_main(["--input", str(tmp_path / "l.jsonl"), "--output", str(out), "--text-field", "body",
                             "--label-field", "q", "--epoch", "5", "--bucket", "100000", "--json"])
    assert rc == 0 and out.is_file()
    report = json.loads(capsys.readouterr().out)
    assert report["valid_docs"] == 30 and report["accuracy"] > 0.9

    rc = quality_train_main(["--input", str(tmp_path / "l.jsonl"), "--output", str(out)])
    assert rc == 2 and "needs fields 'label' and 'text'" in capsys.readouterr().err
