"""What an encoded directory holds: `encode_progress.json`, the checks a resume or an append must pass, and the
index files derived from it. No torch.

Beside the shards the output directory holds `encode_progress.json`: the tokenizer's sha256, the held-out split
(heldout.py; {"fraction": 0.0} when there is none), the shards that were there before the first run (`base`:
written by ShardWriter) and one entry per input file ever encoded into it (URL, size, domain override, task
number, run, settings, complete, and once complete its shards, held-out shards and per-domain counts). encode.py
rewrites it (atomically) whenever a task finishes. A rerun of the same command skips complete files, deletes the
shard files of unfinished tasks (`remove_files_of`) and does those again (at most one file per worker is
redone). Inputs the directory has not seen are appended as a new run, after the shards already there.

index.json (and heldout/index.json) are rewritten at the end of each run, the held-out one first; while a run is
in progress the previous indexes (whose shards are untouched) stay valid. Refused: another tokenizer; another
held-out split (fraction or seed) than the directory's, on a resume or an append alike, since a text held out
from one file must not be trained on from another; a held-out split into shards written without one.
"""

import json
from pathlib import Path

from bessemer.errors import BessemerError
from bessemer.tokenizer import heldout
from bessemer.tokenizer.heldout import HELDOUT_DIR, NO_SPLIT, HeldoutSplit
from bessemer.tokens.shards import INDEX, read_versioned_json, write_index

PROGRESS = "encode_progress.json"
PROGRESS_FORMAT = "bessemer-encode-progress/2"


def load_state(out: Path, tok_sha: str, vocab_size: int, eos_id: int, split: HeldoutSplit) -> dict:
    """The directory's progress (a new one when it has none), checked against this run's tokenizer and split."""
    progress, index = out / PROGRESS, out / INDEX
    if progress.is_file():
        state = read_versioned_json(progress, PROGRESS_FORMAT, f"; delete {out} to start over")
        if state["tokenizer_sha256"] != tok_sha:
            raise BessemerError(f"{out} was encoded with another tokenizer (sha256 {state['tokenizer_sha256'][:12]}, "
                                f"this one {tok_sha[:12]}); use a new output directory")
        recorded = state.get("heldout", NO_SPLIT)  # written before held-out splits existed: none
        if recorded != split.record():
            raise BessemerError(
                f"{out} was encoded with {HeldoutSplit.describe(recorded)}, this run asks for "
                f"{HeldoutSplit.describe(split.record())}: every run into one directory must split alike (a text "
                f"held out from one file must not be trained on from another); rerun with the same --heldout and "
                f"--heldout-seed (the seed defaults to --seed), or encode into a new output directory")
        return state
    state = {"format": PROGRESS_FORMAT, "tokenizer_sha256": tok_sha, "heldout": split.record(), "base": None,
             "inputs": {}}
    if index.is_file():  # shards written by ShardWriter: keep them first and append after them
        existing = json.loads(index.read_text())
        if (existing["vocab_size"], existing["eos_id"]) != (vocab_size, eos_id):
            raise BessemerError(f"{out} holds shards of another tokenizer (vocab {existing['vocab_size']}, eos "
                                f"{existing['eos_id']}; this one: vocab {vocab_size}, eos {eos_id})")
        if split.fraction:
            raise BessemerError(f"{out} holds shards written without a held-out split ({INDEX} without "
                                f"{PROGRESS}), so {HeldoutSplit.describe(split.record())} cannot keep its "
                                f"documents out; encode into a new output directory")
        state["base"] = {"domains": existing["domains"], "shards": existing["shards"]}
    return state


def remove_files_of(out: Path, numbers: set[int]) -> None:
    """Shard files of unfinished tasks (half written, or written after the last commit) and temporaries, in
    `out` and in its held-out directory."""
    for d in (out, out / HELDOUT_DIR):
        if not d.is_dir():
            continue
        for f in d.iterdir():
            of_task = f.name.startswith("shard_") and f.name[6:11].isdigit() and f.name[11:12] == "_"
            if f.name.endswith(".tmp") or (of_task and int(f.name[6:11]) in numbers):
                f.unlink()


def all_shards(state: dict, key: str = "shards") -> list[dict]:
    """The index's shard list: shards that were there before this command first, then run by run the complete
    tasks' shards bucket by bucket (bucket, task, window). `key` "heldout_shards": the held-out index's (a
    directory with a split has no shards from before)."""
    base = (state["base"] or {}).get("shards", []) if key == "shards" else []
    done = [(e["run"], sh["bucket"], e["task"], sh["window"], sh) for e in state["inputs"].values() if e["complete"]
            for sh in e.get(key, [])]
    return list(base) + [{k: v for k, v in sh.items() if k not in ("bucket", "window")}
                         for *_, sh in sorted(done, key=lambda x: x[:4])]


def _domains(first: list[str], shards: list[dict]) -> list[str]:
    """`first`, then the other domains of `shards` in the order they appear."""
    domains = list(first)
    for sh in shards:
        domains += [d for d in sh.get("domains", []) if d not in domains]
    return domains


def write_indexes(out: Path, vocab_size: int, eos: int, tokenizer: str, state: dict,
                  split: HeldoutSplit) -> list[str]:
    """index.json of the held-out directory (when there is a split), then the training one's. Returns the
    warnings about domains one side lacks, over every complete input of the directory."""
    shards = all_shards(state)
    domains = _domains((state["base"] or {}).get("domains", []), shards)
    warnings = []
    if split.fraction:
        held = all_shards(state, "heldout_shards")
        present = _domains([], held)
        # Each index lists the domains it holds; the common ones in the training index's order.
        held_domains = [d for d in domains if d in present] + [d for d in present if d not in domains]
        (out / HELDOUT_DIR).mkdir(exist_ok=True)
        write_index(out / HELDOUT_DIR, vocab_size, eos, tokenizer, held_domains, held)
        everything: dict[str, dict[str, int]] = {}
        for e in state["inputs"].values():
            if e["complete"]:
                heldout.merge(everything, e.get("per_domain", {}))
        warnings = heldout.warnings(everything, split)
    write_index(out, vocab_size, eos, tokenizer, domains, shards)
    return warnings
