"""Encoding to shards: workers write their own shards and any number of them gives the same bytes; the
document order is a seeded permutation; an interrupted run resumes to the same shards; documents, domains
and appends land in one index."""

import json
import re

import pytest

from bessemer.errors import BessemerError
from bessemer.tokenizer import encode
from bessemer.tokenizer.common import load_tokenizer
from bessemer.tokenizer.encode import EncodeSettings, encode_inputs
from bessemer.tokenizer.progress import PROGRESS
from bessemer.tokens.shards import TokenDataset

SHARD_TOKENS = 8_000
PARTS = 4


def files(d) -> dict[str, bytes]:
    """Every file under `d` (the held-out directory's too) but the progress file, by relative path."""
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file() and p.name != PROGRESS}


def documents(path) -> list[tuple[tuple[int, ...], str]]:
    """(ids, domain) of every document, in stream order, read back from the shard files."""
    ds = TokenDataset(path)
    out = []
    for shard in ds.shards:
        for k in range(shard.offsets.size - 1):
            out.append((tuple(shard.tokens[shard.offsets[k]:shard.offsets[k + 1]].tolist()),
                        ds.domains[shard.domains[k]]))
    return out


@pytest.fixture(scope="module")
def inputs(corpus, tmp_path_factory):
    """The corpus in PARTS files (every PARTS-th document in each), so that there are several tasks."""
    d = tmp_path_factory.mktemp("inputs")
    for p in range(PARTS):
        (d / f"part-{p}.jsonl").write_text("".join(json.dumps(doc, ensure_ascii=False) + "\n"
                                                   for doc in corpus[p::PARTS]), encoding="utf-8")
    return d


@pytest.fixture(scope="module")
def reference(trained, inputs, tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "shards"
    result = encode_inputs(trained["bpe"], inputs, out, EncodeSettings(shard_tokens=SHARD_TOKENS), workers=1)
    assert result.docs > 0 and result.files_done == PARTS
    assert len(json.loads((out / "index.json").read_text())["shards"]) > 2 * PARTS
    return out


def test_documents_and_domains_are_preserved_in_a_seeded_order(reference, trained, corpus):
    tok = load_tokenizer(trained["bpe"])
    got = documents(reference)
    encoded = [(tuple(tok.encode(d["text"]).ids), d["metadata"]["domain"]) for d in corpus]
    assert sorted(got) == sorted(encoded)  # the same documents with their domains...
    assert got != encoded  # ...shuffled
    file_order = [encoded[i] for p in range(PARTS) for i in range(p, len(corpus), PARTS)]
    assert got != file_order
    assert set(TokenDataset(reference).domains) == {"code", "prose_en", "prose_zh", "legal_zh"}


def test_the_order_depends_on_the_seed_only(reference, trained, inputs, tmp_path):
    encode_inputs(trained["bpe"], inputs, tmp_path / "again", EncodeSettings(shard_tokens=SHARD_TOKENS))
    assert files(tmp_path / "again") == files(reference)
    encode_inputs(trained["bpe"], inputs, tmp_path / "seed1", EncodeSettings(shard_tokens=SHARD_TOKENS, seed=1))
    other = documents(tmp_path / "seed1")
    assert sorted(other) == sorted(documents(reference)) and other != documents(reference)


def test_two_workers_write_the_same_bytes(reference, trained, inputs, tmp_path):
    encode_inputs(trained["bpe"], inputs, tmp_path / "two", EncodeSettings(shard_tokens=SHARD_TOKENS), workers=2)
    assert files(tmp_path / "two") == files(reference)


def test_two_workers_write_the_same_bytes_with_a_heldout_split(trained, inputs, tmp_path):
    settings = EncodeSettings(shard_tokens=SHARD_TOKENS, heldout=0.2)
    for workers in (1, 2):
        encode_inputs(trained["bpe"], inputs, tmp_path / str(workers), settings, workers=workers)
    one = files(tmp_path / "1")
    assert any(name.startswith("heldout/shard_") for name in one) and "heldout/index.json" in one
    assert files(tmp_path / "2") == one


@pytest.mark.parametrize("workers", [1, 2])
def test_interrupted_run_resumes_to_the_same_shards(reference, trained, inputs, tmp_path, workers):
    out = tmp_path / "shards"

    def stop_after_2(done: int) -> None:
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        encode_inputs(trained["bpe"], inputs, out, EncodeSettings(shard_tokens=SHARD_TOKENS), workers=workers,
                      on_task_done=stop_after_2)
    state = json.loads((out / PROGRESS).read_text())
    assert sum(e["complete"] for e in state["inputs"].values()) == 2
    assert not (out / "index.json").exists()
    # A crash while a worker was writing leaves files of an unfinished task.
    unfinished = next(e["task"] for e in state["inputs"].values() if not e["complete"])
    (out / f"shard_{unfinished:05d}_00_0000.bin").write_bytes(b"half a shard")
    (out / f"shard_{unfinished:05d}_00_0001.bin.tmp").write_bytes(b"")

    result = encode_inputs(trained["bpe"], inputs, out, EncodeSettings(shard_tokens=SHARD_TOKENS), workers=3 - workers)
    assert result.files_done == 2 and result.files_skipped == 2
    assert files(out) == files(reference)
    again = encode_inputs(trained["bpe"], inputs, out, EncodeSettings(shard_tokens=SHARD_TOKENS), workers=workers)
    assert again.files_done == 0 and again.files_skipped == PARTS and "nothing to do" in again.summary()


def test_append_a_second_domain(trained, corpus, tmp_path):
    web, code = tmp_path / "web.jsonl", tmp_path / "code.jsonl"
    web.write_text("".join(json.dumps({"text": d["text"]}) + "\n" for d in corpus[200:260]))
    code.write_text("".join(json.dumps({"text": d["text"]}) + "\n" for d in corpus[:40]))
    out = tmp_path / "shards"
    encode_inputs(trained["bpe"], web, out, EncodeSettings(domain="web", shard_tokens=5000))
    n_web = len(TokenDataset(out).shards)
    encode_inputs(trained["bpe"], code, out, EncodeSettings(domain="code", shard_tokens=5000))
    ds = TokenDataset(out)
    assert ds.domains == ["web", "code"] and len(ds.shards) > n_web
    labels = [domain for _, domain in documents(out)]
    assert labels == ["web"] * 60 + ["code"] * 40  # a later run's shards come after the earlier ones
    tok = load_tokenizer(trained["bpe"])
    assert tuple(tok.encode(corpus[0]["text"]).ids) in {ids for ids, _ in documents(out)[60:]}

    assert encode_inputs(trained["bpe"], code, out, EncodeSettings(domain="code")).files_done == 0  # already there
    with pytest.raises(BessemerError, match="already in .* with --domain code"):
        encode_inputs(trained["bpe"], code, out, EncodeSettings(domain="web"))
    with pytest.raises(BessemerError, match="another tokenizer"):
        encode_inputs(trained["sentencepiece"], tmp_path / "web.jsonl", out)


def test_special_token_text_stays_text_and_domain_tags(trained, tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"text": "a<|eos|>b", "metadata": {"domain": "web"}}) + "\n")
    encode_inputs(trained["bpe"], src, tmp_path / "plain")
    encode_inputs(trained["bpe"], src, tmp_path / "tagged", EncodeSettings(tag_domain=True))
    tok = load_tokenizer(trained["bpe"])
    (plain, domain), = documents(tmp_path / "plain")
    (tagged, _), = documents(tmp_path / "tagged")
    assert domain == "web" and tok.token_to_id("<|eos|>") not in plain
    assert tagged == (tok.token_to_id("<|domain:web|>"),) + plain
    with pytest.raises(BessemerError, match=re.escape("no <|domain:other|> token")):
        encode_inputs(trained["bpe"], src, tmp_path / "other", EncodeSettings(domain="other", tag_domain=True))


@pytest.mark.parametrize("workers", [1, 2])
def test_an_error_in_a_worker_names_the_input_file(trained, tmp_path, workers):
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_text(json.dumps({"text": "a", "metadata": {"domain": "web"}}) + "\n")
    (src / "b.jsonl").write_text(json.dumps({"text": "b", "metadata": {"domain": "other"}}) + "\n")
    with pytest.raises(BessemerError, match=re.escape(f"encoding {src / 'b.jsonl'} failed: ") + ".*"
                       + re.escape("no <|domain:other|> token")):
        encode_inputs(trained["bpe"], src, tmp_path / "out", EncodeSettings(tag_domain=True), workers=workers)


def test_the_tokenizer_is_loaded_once_per_process_until_its_file_changes(trained, inputs, tmp_path, monkeypatch):
    loads = []
    real = encode._load
    monkeypatch.setattr(encode, "_load", lambda path: loads.append(path) or real(path))
    encode._tokenizer.cache_clear()
    tok = tmp_path / "tok.json"
    tok.write_bytes((trained["bpe"] / "tokenizer.json").read_bytes())
    encode_inputs(tok, inputs, tmp_path / "one", EncodeSettings(shard_tokens=SHARD_TOKENS), workers=1)
    encode_inputs(tok, inputs, tmp_path / "two", EncodeSettings(shard_tokens=SHARD_TOKENS), workers=1)
    assert len(loads) == 1  # the parent's copy served every task of both runs
    tok.write_bytes((trained["sentencepiece"] / "tokenizer.json").read_bytes())
    encode_inputs(tok, inputs, tmp_path / "three", EncodeSettings(shard_tokens=SHARD_TOKENS), workers=1)
    assert len(loads) == 2  # another file under the same path
