"""Tokenizer encode throughput and compression, each against an anchor measured in the same run.

- throughput: `bessemer tokenizer encode` (encode_inputs: read JSONL, encode, write shards + progress) with 1 and
  2 processes, in MB of text per second, against raw HF `Tokenizer.encode_batch` (ids fetched as Python lists,
  which any consumer needs) on the same tokenizer and the same texts already in memory (no reading, no
  writing, using all cores through the library's own threads) -> ratio ours / raw (higher is better; 1.0 = no
  overhead over the bare Rust encoder);
- compression: bytes/token of the domain-aware BPE against a plain byte-level BPE (HF's ByteLevel
  pre-tokenizer, GPT-2's regex), same vocabulary size, same training text, on held-out code, English prose,
  Chinese prose and Chinese legal text (per domain; higher is better). The domain-aware rules trade a little
  compression for boundaries (numerals, 第/条, whitespace runs); this shows how much.

Corpus: Python's standard-library sources (code), pydoc topics (English), the bundled Chinese prose and
generated legal text; every 10th document is held out. Ends with `ratio tokenizer_encode_2proc_vs_hf X`.
"""

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bessemer.demo.corpus import build_corpus  # noqa: E402
from bessemer.tokenizer.common import SPECIAL_TOKENS, load_tokenizer  # noqa: E402
from bessemer.tokenizer.encode import encode_inputs  # noqa: E402
from bessemer.tokenizer.train import train_tokenizer  # noqa: E402

LAWS = ["刑法", "民法典", "合同法", "公司法", "劳动法", "行政诉讼法"]
CLAUSES = ["当事人应当按照约定全面履行自己的义务", "人民法院审理案件，应当以事实为根据，以法律为准绳",
           "侵害他人造成人身损害的，应当赔偿医疗费、护理费、交通费等合理费用", "法律另有规定的，依照其规定",
           "用人单位应当依法建立和完善劳动规章制度", "合同成立后，当事人不得以未签字为由主张合同不成立"]
DIGITS = "零一二三四五六七八九"


def zh(n: int) -> str:
    """Chinese numerals for 0 < n < 10000."""
    out, zero = "", False
    for value, unit in ((1000, "千"), (100, "百"), (10, "十"), (1, "")):
        d = n // value % 10
        if d == 0:
            zero = bool(out)
            continue
        out += ("零" if zero else "") + ("" if (not out and d == 1 and unit == "十") else DIGITS[d]) + unit
        zero = False
    return out


def legal_docs(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    docs = []
    for i in range(n):
        text = "".join(rng.choice([
            f"根据《{rng.choice(LAWS)}》第{zh(rng.randint(1, 1260))}条第{zh(rng.randint(1, 9))}款规定，"
            f"{rng.choice(CLAUSES)}。",
            f"本院于{zh(rng.randint(1, 12))}月{zh(rng.randint(1, 28))}日作出（20{rng.randint(10, 24)}）"
            f"京{rng.randint(1, 99)}民初第{rng.randint(1, 9999)}号判决书。",
            f"{rng.choice(CLAUSES)}，但第{zh(rng.randint(1, 30))}章另有规定的除外。",
        ]) for _ in range(rng.randint(3, 12)))
        docs.append({"id": f"legal/{i}", "text": text, "metadata": {"domain": "legal_zh"}})
    return docs


def plain_bpe(texts: list[str], vocab_size: int, out: Path):
    import tokenizers as tk

    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    tok.train_from_iterator(texts, tk.trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                                          initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
                                                          show_progress=False))
    return tok


def bytes_per_token(tok, docs: list[dict]) -> dict[str, float]:
    per: dict[str, list[int]] = {}
    encs = tok.encode_batch([d["text"] for d in docs])
    for d, e in zip(docs, encs):
        acc = per.setdefault(d["metadata"]["domain"], [0, 0])
        acc[0] += len(d["text"].encode())
        acc[1] += len(e.ids)
    return {name: b / t for name, (b, t) in sorted(per.items())}


def best_time(fn, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--code-mb", type=float, default=2.5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        docs = build_corpus(tmp / "demo.jsonl", code_bytes=int(args.code_mb * 1e6), prose_bytes=1_500_000)
        docs += legal_docs(3000, seed=0)
        train = [d for i, d in enumerate(docs) if i % 10]
        held = [d for i, d in enumerate(docs) if i % 10 == 0]
        mb = sum(len(d["text"].encode()) for d in train) / 1e6
        print(f"corpus: {mb:.1f} MB training text ({len(train):,} documents), {len(held):,} held out; "
              f"vocab {args.vocab_size}")

        t0 = time.perf_counter()
        train_tokenizer(((d["text"], d["metadata"]["domain"]) for d in train), args.vocab_size, tmp / "tok")
        print(f"train domain-aware BPE: {time.perf_counter() - t0:.1f} s")
        ours = load_tokenizer(tmp / "tok")
        plain = plain_bpe([d["text"] for d in train], args.vocab_size, tmp / "plain")

        a, b = bytes_per_token(ours, held), bytes_per_token(plain, held)
        print(f"\n{'held-out domain':<16} {'domain-aware':>13} {'plain byte-level':>17} {'ratio':>7}   (bytes/token)")
        for name in a:
            print(f"{name:<16} {a[name]:>13.3f} {b[name]:>17.3f} {a[name] / b[name]:>7.3f}")

        src = tmp / "train.jsonl"
        src.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in train), encoding="utf-8")
        texts = [d["text"] for d in train]
        ours.encode_special_tokens = True  # what encode does

        def raw():
            for i in range(0, len(texts), 256):
                [e.ids for e in ours.encode_batch(texts[i:i + 256], add_special_tokens=False)]

        def command(workers: int):
            n = iter(range(10**6))

            def run():
                encode_inputs(tmp / "tok", src, tmp / f"shards_{workers}_{next(n)}", workers=workers)
            return run

        t_raw = best_time(raw, args.rounds)
        t_one = best_time(command(1), args.rounds)
        t_two = best_time(command(2), args.rounds)
        print(f"\nraw HF encode_batch (in memory):      {mb / t_raw:7.2f} MB/s")
        print(f"bessemer tokenizer encode, 1 process: {mb / t_one:7.2f} MB/s   ratio {t_raw / t_one:.3f}")
        print(f"bessemer tokenizer encode, 2 workers: {mb / t_two:7.2f} MB/s   ratio {t_raw / t_two:.3f}")
        print("ratio = encode MB/s / raw encode_batch MB/s on the same tokenizer and text (higher is better)")
        print(f"ratio tokenizer_encode_2proc_vs_hf {t_raw / t_two:.3f}")


if __name__ == "__main__":
    main()
