"""A fastText quality classifier: training from labeled JSONL, scoring, and the `quality-train` command.

Labels are folded to two classes, `hq` (high quality) and `lq`; the score of a text is the model's
probability of `hq`. Text goes through `preprocess` at training and at scoring alike: lowercase,
punctuation split off words, every CJK character its own token (with wordNgrams=2 the model still sees
character bigrams, which is most of what a word segmenter would add), whitespace folded to one line.
Usage and defaults: docs/data-extract-quality.md.
"""

import argparse
import json
import random
import re
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from bessemer.data.text.script import CJK_CHARS
from bessemer.errors import BessemerError

HQ, LQ = "hq", "lq"
POSITIVE = frozenset({"hq", "high", "1", "true", "pos", "positive", "good", "keep"})
NEGATIVE = frozenset({"lq", "low", "0", "false", "neg", "negative", "bad", "drop"})
_CJK = re.compile(f"([{CJK_CHARS}])")
_PUNCT = re.compile(r"([^\w\s])")


def preprocess(text: str) -> str:
    text = _CJK.sub(r" \1 ", _PUNCT.sub(r" \1 ", text.lower()))
    # fastText reads `__label__` tokens as labels, even at predict time.
    return " ".join(text.split()).replace("__label__", "label")


def normalize_label(value) -> str:
    """hq/lq, 1/0, true/false, high/low... -> "hq" or "lq"."""
    key = str(value).strip().lower()
    if key in POSITIVE:
        return HQ
    if key in NEGATIVE:
        return LQ
    raise ValueError(f"unknown quality label {value!r}; high: {', '.join(sorted(POSITIVE))}; "
                     f"low: {', '.join(sorted(NEGATIVE))}")


def _import_fasttext():
    try:
        import fasttext
        import fasttext.FastText
    except ImportError:
        raise ImportError("the quality classifier needs fastText: pip install fasttext-wheel") from None
    fasttext.FastText.eprint = lambda *a, **k: None  # silences the load_model deprecation notice
    return fasttext


def read_labeled(paths: list[str], label_field: str = "label", text_field: str = "text") -> list[tuple[str, str]]:
    """(label, preprocessed text) pairs from JSONL files; empty texts are skipped."""
    rows = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{path}:{n}"
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as e:
                    raise BessemerError(f"{where}: invalid JSON ({e})") from None
                if label_field not in rec or text_field not in rec:
                    raise BessemerError(f"{where}: needs fields {label_field!r} and {text_field!r}, "
                                        f"has {', '.join(sorted(rec))}")
                try:
                    label = normalize_label(rec[label_field])
                except ValueError as e:
                    raise BessemerError(f"{where}: {e}") from None
                if text := preprocess(str(rec[text_field])):
                    rows.append((label, text))
    return rows


class QualityModel:
    """A trained classifier. `score(text)` is the probability that `text` is high quality, in [0, 1]."""

    def __init__(self, path: str | Path):
        if not Path(path).is_file():
            raise FileNotFoundError(f"quality model {path} does not exist (train one: bessemer data quality-train)")
        self.path = str(path)
        self._model = _import_fasttext().load_model(self.path)
        labels = self._model.get_labels()
        if f"__label__{HQ}" not in labels:
            raise BessemerError(f"{path} is not a quality model: labels {labels}, expected __label__{HQ}")
        self._k = len(labels)

    def score(self, text: str) -> float:
        # The binding directly: FastText.predict() builds arrays with copy=False, which NumPy 2 refuses.
        for prob, label in self._model.f.predict(preprocess(text) + "\n", self._k, 0.0, "replace"):
            if label == f"__label__{HQ}":
                return min(1.0, max(0.0, float(prob)))
        return 0.0

    def __getstate__(self):
        return {"path": self.path}  # workers reload from the file rather than pickling the model

    def __setstate__(self, state):
        self.__init__(state["path"])


@dataclass
class TrainReport:
    path: str
    train_docs: int
    valid_docs: int
    train_hq: int
    train_lq: int
    precision: float  # of the hq predictions (score >= 0.5) on the held-out split
    recall: float
    accuracy: float

    def summary(self) -> str:
        return (f"{self.path}: trained on {self.train_docs} docs ({self.train_hq} hq, {self.train_lq} lq); "
                f"held-out {self.valid_docs}: precision {self.precision:.3f} recall {self.recall:.3f} "
                f"accuracy {self.accuracy:.3f}")


def evaluate(model: QualityModel, rows: list[tuple[str, str]], threshold: float = 0.5) -> dict[str, float]:
    tp = fp = fn = correct = 0
    for label, text in rows:
        pred = model.score(text) >= threshold
        tp += pred and label == HQ
        fp += pred and label == LQ
        fn += (not pred) and label == HQ
        correct += pred == (label == HQ)
    return {"precision": tp / (tp + fp) if tp + fp else 0.0, "recall": tp / (tp + fn) if tp + fn else 0.0,
            "accuracy": correct / len(rows) if rows else 0.0}


def train_quality_model(
    labeled_jsonl_paths: list[str] | str,
    out_path: str,
    label_field: str = "label",
    text_field: str = "text",
    epoch: int = 10,
    lr: float = 0.5,
    wordNgrams: int = 2,
    dim: int = 64,
    minCount: int = 1,
    bucket: int = 2_000_000,
    valid_fraction: float = 0.1,
    seed: int = 0,
    threads: int = 1,
) -> TrainReport:
    """Train on a shuffled (1 - valid_fraction) of the rows, save to `out_path`, report precision/recall of
    `hq` on the rest. `threads=1` makes a run reproducible; raise it for large sets. The model file is
    about (vocabulary + bucket) * dim * 4 bytes: 512 MB at the defaults, mostly the n-gram buckets; a smaller
    `bucket` shrinks it at some cost in n-gram collisions."""
    if isinstance(labeled_jsonl_paths, (str, Path)):
        labeled_jsonl_paths = [str(labeled_jsonl_paths)]
    if not 0.0 <= valid_fraction < 1.0:
        raise ValueError(f"valid_fraction must be in [0, 1), got {valid_fraction}")
    rows = read_labeled(labeled_jsonl_paths, label_field, text_field)
    classes = {label for label, _ in rows}
    if classes != {HQ, LQ}:
        raise BessemerError(f"training needs both hq and lq examples; {', '.join(labeled_jsonl_paths)} has "
                            f"{len(rows)} rows of {sorted(classes) or 'no'} labels")
    random.Random(seed).shuffle(rows)
    n_valid = int(len(rows) * valid_fraction)
    valid, train = rows[:n_valid], rows[n_valid:]

    fasttext = _import_fasttext()
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        train_file = Path(tmp) / "train.txt"
        train_file.write_text("".join(f"__label__{label} {text}\n" for label, text in train), encoding="utf-8")
        model = fasttext.train_supervised(input=str(train_file), epoch=epoch, lr=lr, wordNgrams=wordNgrams, dim=dim,
                                          minCount=minCount, bucket=bucket, seed=seed, thread=threads, verbose=0)
    model.save_model(str(out_path))
    scores = evaluate(QualityModel(out_path), valid) if valid else {"precision": 0.0, "recall": 0.0, "accuracy": 0.0}
    return TrainReport(str(out_path), len(train), len(valid), sum(lab == HQ for lab, _ in train),
                       sum(lab == LQ for lab, _ in train), **scores)


def add_quality_train_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`bessemer data quality-train --input LABELED.jsonl [...] --output model.bin`."""
    parser.add_argument("--input", nargs="+", required=True, metavar="JSONL",
                        help="labeled JSONL files (label: hq/lq, 1/0, true/false, high/low)")
    parser.add_argument("--output", required=True, help="where to write the fastText model (.bin)")
    parser.add_argument("--label-field", default="label")
    parser.add_argument("--text-field", default="text")
    parser.add_argument("--epoch", type=int, default=10)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--word-ngrams", type=int, default=2)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--min-count", type=int, default=1)
    parser.add_argument("--bucket", type=int, default=2_000_000, help="n-gram hash buckets (model size)")
    parser.add_argument("--valid-fraction", type=float, default=0.1, help="held out for precision/recall")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="1 = reproducible")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser


def run_quality_train(args: argparse.Namespace) -> int:
    try:
        report = train_quality_model(
            args.input, args.output, label_field=args.label_field, text_field=args.text_field, epoch=args.epoch,
            lr=args.lr, wordNgrams=args.word_ngrams, dim=args.dim, minCount=args.min_count, bucket=args.bucket,
            valid_fraction=args.valid_fraction, seed=args.seed, threads=args.threads)
    except (BessemerError, ValueError, FileNotFoundError, ImportError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(asdict(report)) if args.json else report.summary())
    return 0


def quality_train_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bessemer data quality-train",
                                     description="Train the fastText quality classifier from labeled JSONL.")
    return run_quality_train(add_quality_train_arguments(parser).parse_args(argv))
