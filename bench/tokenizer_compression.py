"""Compression of the domain-aware BPE on real statutes against a plain byte-level BPE of the same vocabulary,
and whether every statute reference keeps its boundaries.

Both tokenizers are trained on one statute (the Criminal Law of the PRC, split into paragraphs) with the same
vocabulary size; they are measured on statutes they never saw (the Civil Code's General Part and the
Constitution) and on published court-case summaries:
- bytes/token: UTF-8 bytes / tokens (higher is better) of ours, of the plain one (HF's ByteLevel
  pre-tokenizer, GPT-2's regex) and of ours under the previous numeral rule (every numeral character cut
  off, 一些 -> 一|些), and ratio = ours / plain (the claim: >= 0.95);
- references: every `第<numeral>条/款/项` in the held-out text (第一千一百七十九条, 第2款); `crossed` counts
  tokens that span its outer edge (the text before 第 or after 条), `inner` tokens that span 第|numeral or
  numeral|条. The claim: ours crosses none of either, so a reference is a token sequence of its own.

Data: real_text/ under shared/eval (or `--data DIR`), built locally from public repositories and never
committed (bench/data/real_text/README.md). Without it the bench says how to build it and exits 0.

    python bench/tokenizer_compression.py [--data shared/eval] [--vocab-size 8000]

Ends with `ratio tokenizer_statute_bytes_per_token_vs_plain X` (the smallest over the held-out statutes) and
`tokenizer_statute_reference_crossings N` (outer and inner, ours).
"""

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRAIN = "real_text/zh_statute_criminal_law.md"
HELD_OUT = {"civil code (general)": "real_text/zh_statute_civil_code_general.md",
            "constitution": "real_text/zh_statute_constitution.md",
            "court cases": "real_text/zh_court_cases.jsonl"}
STATUTES = ("civil code (general)", "constitution")


def paragraphs(text: str) -> list[str]:
    return [p for p in re.split(r"\n\s*\n", text) if p.strip()]


def read_text(path: Path) -> str:
    if path.suffix == ".jsonl":
        return "\n\n".join(json.loads(line)["text"] for line in path.open(encoding="utf-8") if line.strip())
    return path.read_text(encoding="utf-8")


def plain_bpe(texts: list[str], vocab_size: int):
    import tokenizers as tk

    from bessemer.tokenizer.common import SPECIAL_TOKENS

    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    tok.train_from_iterator(texts, tk.trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                                          initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
                                                          show_progress=False))
    return tok


def previous_rule_pattern() -> str:
    """pretok.PATTERN as it was before numerals could stay inside words: every numeral run cut off."""
    from bessemer.tokenizer.pretok import ATTACH, NUMERALS, ORDINAL, PATTERN

    parts = PATTERN.split("|")
    num = f"[{NUMERALS}\\p{{N}}]"
    new_numeral = f"(?<={ORDINAL})[{NUMERALS}]+|[{NUMERALS}]{{2,}}|[{NUMERALS}](?=[{ATTACH}])"
    new_han = f" ?(?:(?!{ORDINAL}{num}|[{NUMERALS}]{{2}}|[{NUMERALS}][{ATTACH}])\\p{{Han}})+"
    joined = "|".join(parts)
    assert new_numeral in joined and new_han in joined, "pretok.PATTERN changed; update this bench"
    return joined.replace(new_numeral, f"[{NUMERALS}]+").replace(
        new_han, f" ?(?:(?!{ORDINAL}{num})[\\p{{Han}}&&[^{NUMERALS}]])+")


def with_pattern(tokenizer_json: Path, pattern: str, texts: list[str], vocab_size: int):
    """Our tokenizer's recipe with another split pattern, trained the same way."""
    import tokenizers as tk

    spec = json.loads(tokenizer_json.read_text())
    spec["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = pattern
    from bessemer.tokenizer.common import SPECIAL_TOKENS

    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.Tokenizer.from_str(json.dumps(spec)).pre_tokenizer
    tok.decoder = tk.decoders.ByteLevel()
    tok.train_from_iterator(texts, tk.trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                                          initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
                                                          show_progress=False))
    return tok


def reference_edges(text: str) -> tuple[int, set[int], set[int]]:
    """Statute references 第<numeral>条/款/项: how many, their outer edges and their inner edges."""
    from bessemer.tokenizer.pretok import NUMERALS

    outer, inner, n = set(), set(), 0
    for m in re.finditer(f"(第)([{NUMERALS}0-9]+)([条款项])", text):
        n += 1
        outer |= {m.start(), m.end()}
        inner |= {m.start(2), m.end(2)}
    return n, outer, inner


def measure(tok, text: str) -> tuple[float, int, int]:
    """bytes/token, tokens crossing an outer reference edge, tokens crossing an inner one."""
    _, outer, inner = reference_edges(text)
    enc = tok.encode(text, add_special_tokens=False)
    crossed = sum(1 for a, b in enc.offsets if any(a < e < b for e in outer))
    inside = sum(1 for a, b in enc.offsets if any(a < e < b for e in inner))
    return len(text.encode()) / len(enc.ids), crossed, inside


def statute_report(root: Path, vocab_size: int) -> tuple[list[str], float, int]:
    """The table's lines, the smallest held-out statute ratio ours/plain, and our reference crossings."""
    from bessemer.tokenizer.common import load_tokenizer
    from bessemer.tokenizer.train import train_tokenizer

    train = paragraphs(read_text(root / TRAIN))
    with tempfile.TemporaryDirectory() as tmp:
        path = train_tokenizer(((p, None) for p in train), vocab_size, Path(tmp) / "tok")
        ours = load_tokenizer(path)
        previous = with_pattern(path, previous_rule_pattern(), train, vocab_size)
    plain = plain_bpe(train, vocab_size)
    lines = [f"trained on {TRAIN.split('/')[1]} ({sum(len(p.encode()) for p in train) / 1e3:.0f} KB, "
             f"{len(train)} paragraphs), vocabulary {vocab_size} each; held out:",
             f"{'text':<21} {'refs':>5} {'ours':>7} {'plain':>7} {'previous':>9} {'ratio':>6}   "
             f"{'crossed':>7} {'inner':>5} {'plain crossed':>13} {'plain inner':>11}"]
    worst, crossings = float("inf"), 0
    for name, rel in HELD_OUT.items():
        text = read_text(root / rel)
        refs = reference_edges(text)[0]
        (a, ca, ia), (b, cb, ib), (c, _, _) = measure(ours, text), measure(plain, text), measure(previous, text)
        crossings += ca + ia
        if name in STATUTES:
            worst = min(worst, a / b)
        lines.append(f"{name:<21} {refs:>5} {a:>7.3f} {b:>7.3f} {c:>9.3f} {a / b:>6.3f}   {ca:>7} {ia:>5} "
                     f"{cb:>13} {ib:>11}")
    lines.append("bytes/token (higher is better); ratio = ours / plain; previous = ours with every numeral "
                 "character cut off")
    return lines, worst, crossings


NEEDS = [TRAIN, *HELD_OUT.values()]


def print_report(root: Path, vocab_size: int) -> None:
    lines, worst, crossings = statute_report(root, vocab_size)
    print("\n".join(lines))
    print(f"ratio tokenizer_statute_bytes_per_token_vs_plain {worst:.3f}")
    print(f"tokenizer_statute_reference_crossings {crossings}")


def main() -> None:
    sys.path.insert(0, str(REPO))
    from bench.data.eval_data import add_data_argument, find_data

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_data_argument(ap)
    ap.add_argument("--vocab-size", type=int, default=8000)
    args = ap.parse_args()
    if (root := find_data(args.data, NEEDS, "tokenizer_compression")) is None:
        return
    print_report(root, args.vocab_size)


if __name__ == "__main__":
    main()
