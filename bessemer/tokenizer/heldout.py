"""The held-out split of `bessemer tokenizer encode --heldout FRACTION`: which documents are kept out of training,
and the per-domain counts that say what each side got. No torch.

A document is held out when the keyed hash BLAKE2b-64(key = the split's seed, message = the document's UTF-8
text), read as an unsigned 64-bit number, is below FRACTION x 2^64. The hash sees the text only — not the
file, the position or the domain — so a text that occurs twice (in one file or in two) goes the same way
both times, and the split does not depend on the number of workers or the order of the inputs. Held-out
documents are written, encoded and shuffled like the others, into OUTPUT/heldout/, a shard directory of its
own (its own index.json, same format), so `TokenDataset(OUTPUT / "heldout")` reads them.
"""

import hashlib
from dataclasses import dataclass

from bessemer.errors import BessemerError

HELDOUT_DIR = "heldout"
NO_SPLIT = {"fraction": 0.0}  # what a directory encoded without --heldout records
_MASK64 = (1 << 64) - 1
_COUNTS = ("docs", "tokens", "heldout_docs", "heldout_tokens")


@dataclass(frozen=True)
class HeldoutSplit:
    """FRACTION of the documents, chosen by a hash of (seed, text); see the module docstring."""
    fraction: float
    seed: int

    def __post_init__(self):
        if not 0.0 <= self.fraction < 1.0:
            raise BessemerError(f"--heldout must be a fraction in [0, 1) (0 = no held-out split), got "
                                f"{self.fraction}")

    def held_out(self, text: str) -> bool:
        # surrogatepass: a lone surrogate (JSON "\ud800") still hashes, to the same value every time.
        digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8,
                                 key=(self.seed & _MASK64).to_bytes(8, "little")).digest()
        return int.from_bytes(digest, "little") < round(self.fraction * (1 << 64))

    def record(self) -> dict:
        """What encode_progress.json keeps: appends and resumes must ask for the same."""
        return {"fraction": self.fraction, "seed": self.seed} if self.fraction else dict(NO_SPLIT)

    @staticmethod
    def describe(record: dict) -> str:
        if not record["fraction"]:
            return "no held-out split"
        return f"--heldout {record['fraction']} --heldout-seed {record['seed']}"


def count(per_domain: dict[str, dict[str, int]], domain: str, tokens: int, held: bool) -> None:
    """One document of `domain` with `tokens` tokens, on the training or the held-out side."""
    c = per_domain.setdefault(domain, dict.fromkeys(_COUNTS, 0))
    c["heldout_docs" if held else "docs"] += 1
    c["heldout_tokens" if held else "tokens"] += tokens


def merge(into: dict[str, dict[str, int]], other: dict[str, dict[str, int]]) -> None:
    for domain, c in other.items():
        mine = into.setdefault(domain, dict.fromkeys(_COUNTS, 0))
        for k in _COUNTS:
            mine[k] += c.get(k, 0)


def totals(per_domain: dict[str, dict[str, int]]) -> dict[str, int]:
    """The counts summed over the domains."""
    return {k: sum(c.get(k, 0) for c in per_domain.values()) for k in _COUNTS}


def table(per_domain: dict[str, dict[str, int]]) -> str:
    """Documents and tokens per domain on each side, one line per domain (sorted by name)."""
    lines = [f"{'domain':<16} {'train docs':>12} {'train tokens':>15} {'held-out docs':>14} {'held-out tokens':>16}"]
    for name, c in sorted(per_domain.items()):
        lines.append(f"{name:<16} {c['docs']:>12,} {c['tokens']:>15,} {c['heldout_docs']:>14,} "
                     f"{c['heldout_tokens']:>16,}")
    return "\n".join(lines)


def warnings(per_domain: dict[str, dict[str, int]], split: HeldoutSplit) -> list[str]:
    """A line per domain that one side lacks, over everything the directory holds: validation cannot measure a
    domain without held-out documents, and training cannot draw one without training documents."""
    if not split.fraction:
        return []
    out = []
    for name, c in sorted(per_domain.items()):
        if not c["heldout_docs"]:
            out.append(f"domain {name!r} has no held-out documents ({c['docs']:,} in training, --heldout "
                       f"{split.fraction}): it cannot be validated; raise --heldout or add documents")
        elif not c["docs"]:
            out.append(f"domain {name!r} has no training documents: all {c['heldout_docs']:,} are held out")
    return out
