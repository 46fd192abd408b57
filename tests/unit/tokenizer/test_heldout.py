"""The held-out split of `tokenizer encode --heldout`: a document is on one side only (a repeated text too), the
fraction holds per domain, the split follows its seed and nothing else, every run into a directory splits
alike, and OUTPUT/heldout is a shard directory the training readers open per domain."""

import json
import random
from collections import Counter
from itertools import count

import pytest

from bessemer.cli import main
from bessemer.errors import BessemerError
from bessemer.tokenizer.common import load_tokenizer
from bessemer.tokenizer.encode import EncodeSettings, encode_inputs
from bessemer.tokenizer.heldout import HELDOUT_DIR, HeldoutSplit
from bessemer.tokenizer.progress import PROGRESS
from bessemer.tokens.shards import ShardWriter, TokenDataset

WORDS = ["river", "stone", "lamp", "copper", "field", "quiet", "north", "glass", "seven", "maple", "orbit", "salt"]
DOMAINS = ("alpha", "beta")
FILES = 3
REPEATED = 150  # texts that occur once in each of two files


def texts_and_domains(path, tok) -> list[tuple[str, str]]:
    """(text, domain) of every document of a shard directory, in stream order, decoded from its tokens."""
    ds = TokenDataset(path)
    return [(tok.decode(shard.tokens[shard.offsets[k]:shard.offsets[k + 1]].tolist(), skip_special_tokens=False),
             ds.domains[shard.domains[k]]) for shard in ds.shards for k in range(shard.offsets.size - 1)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple:
    """About 3,000 tiny documents of two domains in FILES files; REPEATED texts appear in two files."""
    rng = random.Random(7)
    docs = [{"text": f"{d} note {i}: " + " ".join(rng.choices(WORDS, k=rng.randint(3, 9))), "metadata": {"domain": d}}
            for i in range(2850) for d in [DOMAINS[i % 2]]]
    parts = [docs[p::FILES] for p in range(FILES)]
    for k in range(REPEATED):
        parts[(k + 1) % FILES].append(parts[k % FILES][k])
    d = tmp_path_factory.mktemp("tiny")
    for p, part in enumerate(parts):
        (d / f"part-{p}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in part))
    return d, [(x["text"], x["metadata"]["domain"]) for part in parts for x in part]


@pytest.fixture(scope="module")
def split10(trained, tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("split10") / "shards"
    result = encode_inputs(trained["bpe"], tiny[0], out, EncodeSettings(shard_tokens=4000, heldout=0.1))
    return out, result


def test_no_document_on_both_sides_and_none_lost(trained, tiny, split10):
    tok = load_tokenizer(trained["bpe"])
    out, _ = split10
    train, held = texts_and_domains(out, tok), texts_and_domains(out / HELDOUT_DIR, tok)
    assert not {t for t, _ in train} & {t for t, _ in held}
    assert Counter(train) + Counter(held) == Counter(tiny[1])
    repeated = {t for t, n in Counter(t for t, _ in tiny[1]).items() if n == 2}
    assert len(repeated) == REPEATED
    held_twice = [t for t, n in Counter(t for t, _ in held).items() if n == 2]
    assert held_twice and set(held_twice) <= repeated  # a repeated text held out is held out from both files


def test_the_fraction_holds_per_domain_and_is_reported(tiny, split10):
    out, result = split10
    total = Counter(d for _, d in tiny[1])
    for d in DOMAINS:
        c = result.per_domain[d]
        assert c["docs"] + c["heldout_docs"] == total[d]
        assert 0.07 < c["heldout_docs"] / total[d] < 0.13, c  # 1,475 documents: 3 standard deviations ~ 0.023
    held = TokenDataset(out / HELDOUT_DIR)
    assert held.num_docs == result.heldout_docs == sum(c["heldout_docs"] for c in result.per_domain.values())
    assert int(sum(s.tokens.size for s in held.shards)) == result.heldout_tokens
    assert TokenDataset(out).num_docs == result.docs
    assert f"held out {result.heldout_docs:,} documents" in result.summary()
    assert all(f"{d} " in result.summary() for d in DOMAINS) and not result.warnings


def test_the_heldout_index_lists_its_domains_and_labels_each_document(trained, tiny, split10):
    tok = load_tokenizer(trained["bpe"])
    out, _ = split10
    index = json.loads((out / HELDOUT_DIR / "index.json").read_text())
    assert index["domains"] == TokenDataset(out).domains and set(index["domains"]) == set(DOMAINS)
    assert index["vocab_size"] == tok.get_vocab_size()
    domain_of = dict(tiny[1])
    assert all(domain_of[t] == d for t, d in texts_and_domains(out / HELDOUT_DIR, tok))
    # The trainer's per-domain reader opens the held-out directory like the training one.
    from bessemer.tokens.mixture import DomainStream

    held = TokenDataset(out / HELDOUT_DIR)
    for d in DOMAINS:
        stream = DomainStream(d, [held])
        assert stream.num_docs == sum(1 for _, x in texts_and_domains(out / HELDOUT_DIR, tok) if x == d)


def test_the_split_follows_its_seed_only(trained, tiny, split10, tmp_path):
    tok = load_tokenizer(trained["bpe"])
    out, _ = split10
    base = set(texts_and_domains(out / HELDOUT_DIR, tok))
    encode_inputs(trained["bpe"], tiny[0], tmp_path / "other", EncodeSettings(shard_tokens=4000, heldout=0.1,
                                                                              heldout_seed=1))
    other = set(texts_and_domains(tmp_path / "other" / HELDOUT_DIR, tok))
    assert other != base and len(other & base) < len(base) / 2
    # --heldout-seed defaults to --seed: another document order, the same split as heldout_seed=1.
    encode_inputs(trained["bpe"], tiny[0], tmp_path / "seed1", EncodeSettings(shard_tokens=4000, heldout=0.1, seed=1))
    assert set(texts_and_domains(tmp_path / "seed1" / HELDOUT_DIR, tok)) == other
    # Another document order (--seed 1), the split kept by --heldout-seed 0.
    encode_inputs(trained["bpe"], tiny[0], tmp_path / "keep", EncodeSettings(shard_tokens=4000, heldout=0.1, seed=1,
                                                                             heldout_seed=0))
    assert set(texts_and_domains(tmp_path / "keep" / HELDOUT_DIR, tok)) == base


def test_the_hash_sees_the_text_and_the_seed_only():
    texts = [f"doc {i}" for i in range(2000)]
    a = [HeldoutSplit(0.25, 0).held_out(t) for t in texts]
    assert a == [HeldoutSplit(0.25, 0).held_out(t) for t in texts] and 400 < sum(a) < 600
    assert a != [HeldoutSplit(0.25, 1).held_out(t) for t in texts]
    smaller = [HeldoutSplit(0.1, 0).held_out(t) for t in texts]
    assert all(x <= y for x, y in zip(smaller, a))  # a smaller fraction holds out a subset
    assert not any(HeldoutSplit(0.0, 0).held_out(t) for t in texts)
    for bad in (1.0, -0.1, 2.0):
        with pytest.raises(BessemerError, match=r"--heldout must be a fraction in \[0, 1\)"):
            HeldoutSplit(bad, 0)


def test_every_run_into_a_directory_splits_alike(trained, tiny, tmp_path):
    first, second = sorted(tiny[0].iterdir())[:2]
    out = tmp_path / "shards"
    encode_inputs(trained["bpe"], first, out, EncodeSettings(heldout=0.1))
    for settings, asked in ((EncodeSettings(heldout=0.2), "--heldout 0.2 --heldout-seed 0"),
                            (EncodeSettings(), "no held-out split"),
                            (EncodeSettings(heldout=0.1, heldout_seed=5), "--heldout 0.1 --heldout-seed 5"),
                            (EncodeSettings(heldout=0.1, seed=5), "--heldout 0.1 --heldout-seed 5")):
        with pytest.raises(BessemerError, match=f"encoded with --heldout 0.1 --heldout-seed 0, this run asks for "
                                                f"{asked}: every run into one directory must split alike"):
            encode_inputs(trained["bpe"], second, out, settings)
    # Another document order with the split pinned appends.
    assert encode_inputs(trained["bpe"], second, out, EncodeSettings(heldout=0.1, seed=5, heldout_seed=0)).files_done == 1
    counts = json.loads((out / PROGRESS).read_text())["inputs"]
    assert all(e["per_domain"] for e in counts.values())
    assert TokenDataset(out / HELDOUT_DIR).num_docs == sum(c["heldout_docs"] for e in counts.values()
                                                           for c in e["per_domain"].values())

    plain = tmp_path / "plain"
    encode_inputs(trained["bpe"], first, plain)
    with pytest.raises(BessemerError, match="encoded with no held-out split, this run asks for --heldout 0.1"):
        encode_inputs(trained["bpe"], second, plain, EncodeSettings(heldout=0.1))
    assert not (plain / HELDOUT_DIR).exists()

    written = tmp_path / "writer"
    w = ShardWriter(written, vocab_size=load_tokenizer(trained["bpe"]).get_vocab_size(), eos_id=1)
    w.add([5, 6, 7])
    w.close()
    with pytest.raises(BessemerError, match="written without a held-out split"):
        encode_inputs(trained["bpe"], first, written, EncodeSettings(heldout=0.1))


def test_an_interrupted_run_resumes_only_with_its_split(trained, tiny, split10, tmp_path):
    out = tmp_path / "shards"

    def stop_after_1(done: int) -> None:
        if done == 1:
            raise KeyboardInterrupt

    settings = EncodeSettings(shard_tokens=4000, heldout=0.1)
    with pytest.raises(KeyboardInterrupt):
        encode_inputs(trained["bpe"], tiny[0], out, settings, on_task_done=stop_after_1)
    state = json.loads((out / PROGRESS).read_text())
    unfinished = next(e["task"] for e in state["inputs"].values() if not e["complete"])
    (out / HELDOUT_DIR / f"shard_{unfinished:05d}_00_0000.bin").write_bytes(b"half a shard")
    with pytest.raises(BessemerError, match="this run asks for --heldout 0.05"):
        encode_inputs(trained["bpe"], tiny[0], out, EncodeSettings(shard_tokens=4000, heldout=0.05))
    result = encode_inputs(trained["bpe"], tiny[0], out, settings, workers=2)
    assert result.files_done == FILES - 1

    def tree(d):
        return {p.relative_to(d): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file() and p.name != PROGRESS}

    assert tree(out) == tree(split10[0])


def test_a_domain_without_heldout_documents_is_named(trained, tiny, tmp_path):
    split = HeldoutSplit(0.05, 0)
    lone = next(t for t in (f"rare text {i}" for i in count()) if not split.held_out(t))
    src = tmp_path / "rare.jsonl"
    src.write_text(json.dumps({"text": lone, "metadata": {"domain": "rare"}}) + "\n")
    out = tmp_path / "shards"
    result = encode_inputs(trained["bpe"], [tiny[0], src], out, EncodeSettings(heldout=0.05))
    assert result.warnings == [("domain 'rare' has no held-out documents (1 in training, --heldout 0.05): it cannot "
                                "be validated; raise --heldout or add documents")]
    assert "rare" in TokenDataset(out).domains and "rare" not in TokenDataset(out / HELDOUT_DIR).domains
    # A rerun that has nothing to do still says so.
    again = encode_inputs(trained["bpe"], [tiny[0], src], out, EncodeSettings(heldout=0.05))
    assert again.files_done == 0 and again.warnings == result.warnings


def test_everything_held_out_is_an_error(trained, tmp_path):
    split = HeldoutSplit(0.5, 0)
    text = next(t for t in (f"only {i}" for i in count()) if split.held_out(t))
    src = tmp_path / "one.jsonl"
    src.write_text(json.dumps({"text": text}) + "\n")
    with pytest.raises(BessemerError, match="all 1 documents of .* went to the held-out split"):
        encode_inputs(trained["bpe"], src, tmp_path / "out", EncodeSettings(heldout=0.5))
    assert not (tmp_path / "out").exists()


def test_cli_heldout(trained, tiny, tmp_path, capsys):
    out = tmp_path / "shards"
    assert main(["tokenizer", "encode", "--tokenizer", str(trained["bpe"]), "--input", str(tiny[0]),
                 "--output", str(out), "--workers", "1", "--heldout", "0.02", "--heldout-seed", "3"]) == 0
    printed = capsys.readouterr().out
    held = TokenDataset(out / HELDOUT_DIR)
    assert f"held out {held.num_docs:,} documents" in printed and "--heldout 0.02 --heldout-seed 3" in printed
    assert "held-out docs" in printed and all(f"\n{d} " in printed for d in DOMAINS)
    for bad in ("1", "-0.5", "x"):
        with pytest.raises(SystemExit):
            main(["tokenizer", "encode", "--tokenizer", str(trained["bpe"]), "--input", str(tiny[0]),
                  "--output", str(tmp_path / "o"), "--heldout", bad])
        assert "expected a fraction in [0, 1)" in capsys.readouterr().err
