import json
import math
import os

import pytest

from bessemer.benchmarks.tasks import read_task
from bessemer.checkpoint.hf import export_hf
from bessemer.errors import BessemerError
from bessemer.eval.loading import load_model
from bessemer.eval.results import SCHEMA_VERSION, evaluate, format_table
from bessemer.model.llama import build_model
from bessemer.model.registry import get_model_args


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    """A randomly initialised debug model exported with the bundled tokenizer."""
    out = tmp_path_factory.mktemp("hf") / "m"
    model = build_model(get_model_args("debug", 1024), 32, seed=0)
    return export_hf(model.state_dict(), model.args, out, 32, tokenizer_dir="data/debug")


def test_multiple_choice_and_perplexity_from_a_hugging_face_directory(hf_dir, tmp_path):
    (tmp_path / "mc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": "a", "context": "The sky is", "choices": ["blue", "a very long answer indeed"], "gold": 0},
        {"id": "b", "context": "Two and two make", "choices": ["four", "five", "six"], "gold": 0}]))
    (tmp_path / "pp.jsonl").write_text(json.dumps({"text": "a longer text than the thirty-two token window " * 3}))
    (tmp_path / "mc.toml").write_text('data = "mc.jsonl"\n')
    (tmp_path / "pp.toml").write_text('kind = "perplexity"\ndata = "pp.jsonl"\n')
    loaded = load_model(hf_dir, device="cpu")
    assert loaded.max_len == 32 and loaded.prefix_id == 0  # <|bos|>
    tasks = [read_task(tmp_path / "mc.toml"), read_task(tmp_path / "pp.toml")]
    results = evaluate(loaded, tasks, batch_size=2)
    assert results["schema_version"] == SCHEMA_VERSION
    mc, pp = results["tasks"]
    assert mc["n"] == 2 and [len(i["loglikelihoods"]) for i in mc["items"]] == [2, 3]
    assert mc["acc"] == sum(i["pred"] == i["gold"] for i in mc["items"]) / 2
    assert pp["tokens"] > 32 and math.isfinite(pp["perplexity"]) and pp["bits_per_byte"] > 0
    # A random model over 1024 tokens: perplexity near the vocabulary size, nowhere near 1.
    assert 100 < pp["perplexity"] < 10_000
    table = format_table(results)
    assert "mc 0-shot" in table and "perplexity" in table.splitlines()[1]


def test_perplexity_over_token_shards(hf_dir, tmp_path):
    (tmp_path / "s.toml").write_text(f'kind = "perplexity"\nshards = "{os.path.abspath("data/debug")}"\n'
                                     f'max_tokens = 70\n')
    results = evaluate(load_model(hf_dir, device="cpu"), [read_task(tmp_path / "s.toml")])
    (task,) = results["tasks"]
    assert task["tokens"] == 70 and task["bits_per_byte"] is None and task["perplexity"] > 1


def test_neither_model_nor_checkpoint(tmp_path):
    with pytest.raises(BessemerError, match="neither a Hugging Face model directory"):
        load_model(tmp_path)
