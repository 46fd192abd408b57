"""Every tokenizer kind gives back exactly the string it was given; transformers reproduces our ids."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bessemer.tokenizer.common import TOKENIZER_FILE, load_tokenizer
from bessemer.tokenizer.pretok import METASPACE

KINDS = ["bpe", "bpe_jieba", "sentencepiece", "sentencepiece_jieba"]

CODE = ("def f(x):\r\n\tif x:  \r\n\t\treturn '✓ naïve café'  # trailing  \n"
        "class A:\n    \"\"\"Docs with emoji 👍🏽 and a zero\u200bwidth\u200d joiner\ufeff.\"\"\"\n"
        "    π = 3.14159 ; x→y ≠ z\u00a0\u2003 \x00\x1f\x7f 𝔘𝔫𝔦 ﷽ e\u0301 \U0010fffd\n\n\n   \t \n")


def roundtrip(tok, text: str) -> str:
    return tok.decode(tok.encode(text).ids, skip_special_tokens=False)


@pytest.mark.parametrize("name", KINDS)
def test_code_round_trips_byte_exactly(trained, name):
    tok = load_tokenizer(trained[name])
    assert roundtrip(tok, CODE).encode() == CODE.encode()


@pytest.mark.parametrize("name", KINDS)
def test_any_string_round_trips(trained, name):
    tok = load_tokenizer(trained[name])
    # SentencePiece's own limit: the metaspace ▁ in the input decodes as a space.
    text = st.text() if name.startswith("bpe") else st.text().filter(lambda s: METASPACE not in s)

    @settings(max_examples=200, deadline=None)
    @given(text)
    def check(s):
        assert roundtrip(tok, s) == s

    check()


def test_metaspace_is_the_one_string_sentencepiece_does_not_round_trip(trained):
    tok = load_tokenizer(trained["sentencepiece"])
    assert roundtrip(tok, f"a{METASPACE}b") == "a b"


@pytest.mark.parametrize("name", ["bpe", "sentencepiece"])
def test_transformers_gives_the_same_ids(trained, corpus, name):
    transformers = pytest.importorskip("transformers")
    path = trained[name] / TOKENIZER_FILE
    ours = load_tokenizer(path)
    theirs = transformers.PreTrainedTokenizerFast(tokenizer_file=str(path))
    texts = [d["text"] for d in corpus[::7]] + [CODE, "民法典第一千一百七十九条 It's 2024年 <|eos|> x"]
    assert theirs(texts, add_special_tokens=False)["input_ids"] == [e.ids for e in ours.encode_batch(texts)]
    assert theirs.decode(ours.encode(CODE).ids) == CODE


@pytest.mark.parametrize("name", KINDS)
def test_vocabulary_size_and_special_tokens(trained, name):
    tok = load_tokenizer(trained[name])
    assert tok.get_vocab_size() == 3000
    ids = [tok.token_to_id(t) for t in ("<|bos|>", "<|eos|>", "<|pad|>", "<|domain:web|>")]
    assert ids == [0, 1, 2, 3]
    # Domains found in the documents got tags too, within the same vocabulary size.
    found = [tok.token_to_id(f"<|domain:{d}|>") for d in ("code", "prose_en", "prose_zh", "legal_zh")]
    assert None not in found and max(found) < 3000 and len(set(found)) == 4
