"""A model to evaluate, in one process: a Hugging Face Llama directory, or a bessemer checkpoint of any
layout (read through `bessemer ckpt export-hf` into a temporary directory, then loaded like one)."""

import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from bessemer.errors import BessemerError
from bessemer.eval.scoring import Encode, score

# A training layout's scorer (eval/layout.py LayoutScorer): requests, progress callback -> log-likelihoods.
Scorer = Callable[[Sequence[tuple[list[int], list[int]]], Callable[[int], None] | None], list[float]]


@dataclass
class Evaluable:
    model: torch.nn.Module | None
    encode: Encode
    prefix_id: int  # conditions a continuation that has no context (lm-eval: BOS, else EOS)
    max_len: int  # tokens the model reads at once
    device: torch.device
    source: str
    scorer: Scorer | None = None  # set when the model is laid out over ranks (the trainer's); else `model` here

    def score(self, requests: Sequence[tuple[list[int], list[int]]], batch_size: int,
              progress: Callable[[int], None] | None = None) -> list[float]:
        if self.scorer is not None:
            return self.scorer(requests, progress)
        return score(self.model, requests, batch_size, self.device, progress)


def _special(hf_dir: Path, tokenizer, role: str) -> int | None:
    """The id of the bos/eos token named in tokenizer_config.json, else of our own special token."""
    from bessemer.tokenizer.common import BOS, EOS

    name = {"bos": BOS, "eos": EOS}[role]
    config = hf_dir / "tokenizer_config.json"
    if config.is_file():
        value = json.loads(config.read_text()).get(f"{role}_token")
        name = (value.get("content") if isinstance(value, dict) else value) or name
    return tokenizer.token_to_id(name)


def load_hf_dir(hf_dir: Path, tokenizer_dir: Path | None = None, device: str | None = None) -> Evaluable:
    from bessemer.checkpoint.hf import load_hf, read_config
    from bessemer.model.llama import build_model

    hf_dir = Path(hf_dir)
    config = read_config(hf_dir)
    state, args = load_hf(hf_dir)
    max_len = int(config.get("max_position_embeddings") or 0)
    if max_len < 1:
        raise BessemerError(f"{hf_dir}/config.json sets no max_position_embeddings")
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model = build_model(args, max_len, device, seed=0)  # weights overwritten below
    model.load_state_dict({k: v.to(device, torch.float32) for k, v in state.items()})
    model.eval()
    encode, prefix = tokenizer_encoder(Path(tokenizer_dir) if tokenizer_dir is not None else hf_dir)
    return Evaluable(model, encode, prefix, max_len, device, str(hf_dir))


def tokenizer_encoder(tok_dir: Path) -> tuple[Encode, int]:
    """The tokenizer of `tok_dir` as an encode function, and the token a context-free continuation is
    conditioned on (BOS, else EOS)."""
    from bessemer.tokenizer.common import load_tokenizer

    tokenizer = load_tokenizer(tok_dir)
    prefix = _special(tok_dir, tokenizer, "bos")
    prefix = prefix if prefix is not None else _special(tok_dir, tokenizer, "eos")
    if prefix is None:
        raise BessemerError(f"{tok_dir}: the tokenizer has neither a BOS nor an EOS token to condition on")

    def encode(text: str) -> list[int]:
        # The tokenizer's own post-processing (BOS or not) is kept, as transformers' encode() keeps it.
        return tokenizer.encode(text).ids

    return encode, prefix


def load_model(path: str | Path, tokenizer_dir: Path | None = None, device: str | None = None) -> Evaluable:
    """A Hugging Face directory (config.json) or a checkpoint directory (.../step_NNNNNNNN, manifest.json)."""
    path = Path(path)
    if (path / "config.json").is_file():
        return load_hf_dir(path, tokenizer_dir, device)
    if (path / "manifest.json").is_file():
        from bessemer.checkpoint.export import export_checkpoint

        with tempfile.TemporaryDirectory(prefix="bessemer-eval-") as tmp:
            hf_dir = export_checkpoint(path, Path(tmp) / "hf", tokenizer_dir)
            if tokenizer_dir is None and not (hf_dir / "tokenizer.json").is_file():
                raise BessemerError(f"{path}: the run's data directory holds no tokenizer.json; pass --tokenizer DIR")
            loaded = load_hf_dir(hf_dir, tokenizer_dir, device)
        loaded.source = str(path)
        return loaded
    raise BessemerError(f"{path} is neither a Hugging Face model directory (config.json) nor a checkpoint "
                        f"(manifest.json, e.g. RUN/checkpoints/macro/step_00000100)")
