"""PII step throughput in characters per second per core, Chinese and English, with and without the name
detector, against jieba's plain segmentation of the same Chinese text measured in the same run.

Text (real_text/ under shared/eval/ or `--data DIR`: public texts no one on the team wrote, built locally and
never committed, see bench/data/real_text/README.md; without it the bench says so and exits 0): Chinese = Wikipedia articles, Python
documentation, court-case summaries and the Criminal Law split at its chapters (~480k characters); English =
Wikipedia articles, Python documentation and the US Constitution split at its articles (~500k characters).
Each configuration runs `PiiStep(types=...).run()` over fresh Documents, in this one process, after a warm-up
that loads what a worker loads once per process (jieba's dictionary and part-of-speech table, the division
and name tables, phone metadata), timed and printed apart as the load time. Between rounds only the per-text
segmentation cache is dropped (`segment.forget_texts`), so every round segments its texts afresh while the
tables stay loaded: the steady state of a pipeline worker. The time is this process's CPU time (so the figure is per core even when
other work shares the machine; wall time is printed beside it). "without names" = every type but PERSON.

    python bench/pii_throughput.py [--rounds 2] [--data shared/eval]

Ends with `pii_throughput <metric> <chars/s>` lines and `ratio pii_throughput_zh_vs_jieba X` (the PII step's
Chinese characters/s over `jieba.lcut`'s; higher is better, 1.0 = as fast as segmentation alone).
"""

import argparse
import json
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STATUTES = {"zh": "zh_statute_criminal_law.md", "en": "en_us_constitution.md"}


def load_texts(real: Path, lang: str) -> list[str]:
    texts = []
    for name in (f"{lang}_wikipedia.jsonl", f"{lang}_python_docs.jsonl", f"{lang}_court_cases.jsonl"):
        if (real / name).exists():
            texts += [json.loads(line)["text"] for line in (real / name).open(encoding="utf-8")]
    statute = (real / STATUTES[lang]).read_text(encoding="utf-8")
    texts += [t for t in re.split(r"\n(?=#{2,3} )", statute) if t.strip()]
    return texts


def measure(texts: list[str], run, rounds: int) -> tuple[float, float]:
    """Best of `rounds`: (CPU seconds, wall seconds) for one pass over `texts`, each round segmenting afresh."""
    from bessemer.data.text.segment import forget_texts

    best = (float("inf"), float("inf"))
    for _ in range(rounds):
        forget_texts()
        c0, w0 = time.process_time(), time.perf_counter()
        run(texts)
        best = min(best, (time.process_time() - c0, time.perf_counter() - w0))
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    sys.path.insert(0, str(REPO))
    from bench.data.eval_data import add_data_argument, find_data

    add_data_argument(ap)
    args = ap.parse_args()
    needs = [f"real_text/{lang}_{name}" for lang in ("zh", "en") for name in ("wikipedia.jsonl", "python_docs.jsonl")]
    if (root := find_data(args.data, needs + [f"real_text/{n}" for n in STATUTES.values()], "pii_throughput")) is None:
        return
    import jieba

    from bessemer.data.document import Document
    from bessemer.data.pii.redact import TYPES, PiiStep

    def pii(types):
        def run(texts):
            step = PiiStep(types=types)
            for _ in step.run(Document(str(i), t) for i, t in enumerate(texts)):
                pass
        return run

    t0 = time.perf_counter()
    # what a worker loads once: jieba, its part-of-speech table, division and name tables, phone metadata
    pii(None)(["联系人：张伟，电话138-0013-8000，地址：北京市朝阳区建国路88号", "Call Mary Smith at (415) 555-0132."])
    load = time.perf_counter() - t0
    results = {}
    print(f"load once per process (tables and first two documents): {load:.2f} s wall")
    print(f"{'text':4} {'configuration':24} {'chars':>8} {'cpu s':>7} {'wall s':>7} {'chars/s/core':>13}")
    for lang in ("zh", "en"):
        texts = load_texts(root / "real_text", lang)
        chars = sum(map(len, texts))
        configs = [("all types", pii(None)), ("without names", pii([t for t in TYPES if t != "PERSON"]))]
        if lang == "zh":
            configs.append(("anchor: jieba.lcut", lambda ts: [jieba.lcut(t) for t in ts]))
        for name, run in configs:
            cpu, wall = measure(texts, run, args.rounds)
            results[(lang, name)] = chars / cpu
            print(f"{lang:4} {name:24} {chars:>8} {cpu:>7.2f} {wall:>7.2f} {chars / cpu:>13,.0f}")
    print("characters per CPU-second of this process (one core), tables loaded; higher is better")
    print(f"pii_throughput load_s {load:.2f}")
    for (lang, name), v in results.items():
        if not name.startswith("anchor"):
            print(f"pii_throughput {lang}_{'all' if name == 'all types' else 'no_names'}_chars_per_s {v:.0f}")
    print("ratio = PII step (all types) / jieba.lcut, Chinese characters per second; higher is better")
    print(f"ratio pii_throughput_zh_vs_jieba {results[('zh', 'all types')] / results[('zh', 'anchor: jieba.lcut')]:.3f}")


if __name__ == "__main__":
    main()
