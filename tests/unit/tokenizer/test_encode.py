"""Encoding to shards: any number of workers gives the same bytes; an interrupted run resumes to the same
shards; documents, domains and appends land in one index."""

import json
import re

import pytest

from bessemer.dataset.shards import TokenDataset
from bessemer.errors import BessemerError
from bessemer.tokenizer.common import load_tokenizer
from bessemer.tokenizer.encode import PROGRESS, encode_inputs

SHARD_TOKENS = 20_000


def files(d) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.name != PROGRESS}


def documents(path) -> list[tuple[list[int], str]]:
    """(ids, domain) of every document, in order, read back from the shard files."""
    ds = TokenDataset(path)
    out = []
    for shard in ds.shards:
        for k in range(shard.offsets.size - 1):
            out.append((shard.tokens[shard.offsets[k]:shard.offsets[k + 1]].tolist(), ds.domains[shard.domains[k]]))
    return out


@pytest.fixture(scope="module")
def reference(trained, corpus_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "shards"
    result = encode_inputs(trained["bpe"], corpus_file, out, workers=1, shard_tokens=SHARD_TOKENS)
    assert result.docs > 0 and len(json.loads((out / "index.json").read_text())["shards"]) > 5
    return out


def test_documents_and_domains_are_preserved(reference, trained, corpus):
    tok = load_tokenizer(trained["bpe"])
    got = documents(reference)
    assert len(got) == len(corpus)
    for (ids, domain), doc in zip(got, corpus):
        assert domain == doc["metadata"]["domain"]
        assert ids == tok.encode(doc["text"]).ids
    assert TokenDataset(reference).domains == ["code", "prose_en", "prose_zh", "legal_zh"]


def test_two_workers_write_the_same_bytes(reference, trained, corpus_file, tmp_path):
    encode_inputs(trained["bpe"], corpus_file, tmp_path / "two", workers=2, shard_tokens=SHARD_TOKENS)
    assert files(tmp_path / "two") == files(reference)


@pytest.mark.parametrize("workers", [1, 2])
def test_interrupted_run_resumes_to_the_same_shards(reference, trained, corpus_file, tmp_path, workers):
    out = tmp_path / "shards"

    def stop_after_3(shards: int) -> None:
        if shards == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        encode_inputs(trained["bpe"], corpus_file, out, workers=workers, shard_tokens=SHARD_TOKENS,
                      on_commit=stop_after_3)
    state = json.loads((out / PROGRESS).read_text())
    assert len(state["shards"]) == 3 and not any(e["complete"] for e in state["inputs"].values())
    assert not (out / "index.json").exists()
    # A crash while writing the next shard leaves files past the committed ones.
    (out / "shard_00003.bin").write_bytes(b"half a shard")
    (out / "shard_00003.bin.tmp").write_bytes(b"")

    result = encode_inputs(trained["bpe"], corpus_file, out, workers=3 - workers, shard_tokens=SHARD_TOKENS)
    assert 0 < result.docs < len(documents(reference))
    assert files(out) == files(reference)
    again = encode_inputs(trained["bpe"], corpus_file, out, workers=workers, shard_tokens=SHARD_TOKENS)
    assert again.files_done == 0 and again.files_skipped == 1 and "nothing to do" in again.summary()


def test_append_a_second_domain(trained, corpus, tmp_path):
    web, code = tmp_path / "web.jsonl", tmp_path / "code.jsonl"
    web.write_text("".join(json.dumps({"text": d["text"]}) + "\n" for d in corpus[200:260]))
    code.write_text("".join(json.dumps({"text": d["text"]}) + "\n" for d in corpus[:40]))
    out = tmp_path / "shards"
    encode_inputs(trained["bpe"], web, out, domain="web", shard_tokens=5000)
    n_web = len(TokenDataset(out).shards)
    encode_inputs(trained["bpe"], code, out, domain="code", shard_tokens=5000)
    ds = TokenDataset(out)
    assert ds.domains == ["web", "code"] and len(ds.shards) > n_web
    labels = [domain for _, domain in documents(out)]
    assert labels == ["web"] * 60 + ["code"] * 40
    tok = load_tokenizer(trained["bpe"])
    assert documents(out)[60][0] == tok.encode(corpus[0]["text"]).ids

    assert encode_inputs(trained["bpe"], code, out, domain="code").files_done == 0  # already there
    with pytest.raises(BessemerError, match="already in .* with --domain code"):
        encode_inputs(trained["bpe"], code, out, domain="web")
    with pytest.raises(BessemerError, match="another tokenizer"):
        encode_inputs(trained["sentencepiece"], tmp_path / "web.jsonl", out)


def test_special_token_text_stays_text_and_domain_tags(trained, tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"text": "a<|eos|>b", "metadata": {"domain": "web"}}) + "\n")
    encode_inputs(trained["bpe"], src, tmp_path / "plain")
    encode_inputs(trained["bpe"], src, tmp_path / "tagged", tag_domain=True)
    tok = load_tokenizer(trained["bpe"])
    (plain, domain), = documents(tmp_path / "plain")
    (tagged, _), = documents(tmp_path / "tagged")
    assert domain == "web" and tok.token_to_id("<|eos|>") not in plain
    assert tagged == [tok.token_to_id("<|domain:web|>")] + plain
    with pytest.raises(BessemerError, match=re.escape("no <|domain:other|> token")):
        encode_inputs(trained["bpe"], src, tmp_path / "other", domain="other", tag_domain=True)
