"""`bessemer ckpt export-hf CKPT OUT`: a checkpoint of any layout to a Hugging Face Llama directory."""

from pathlib import Path

from bessemer.checkpoint.manifest import check, read_manifest
from bessemer.errors import BessemerError


def export_checkpoint(ckpt: Path, out: Path, tokenizer_dir: Path | None = None, overwrite: bool = False) -> Path:
    """Gather the checkpoint's model weights (whatever layout saved them) into full tensors and export them
    with the model dimensions recorded in its manifest; the tokenizer from the run's data directory unless
    `tokenizer_dir` says otherwise."""
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys

    from bessemer.checkpoint.hf import export_hf
    from bessemer.model.registry import get_model_args

    ckpt = Path(ckpt)
    problems = check(ckpt)
    if problems:
        raise BessemerError(f"refusing to export a damaged checkpoint: {'; '.join(problems[:3])}")
    manifest = read_manifest(ckpt)
    model = manifest.get("model")
    if not model:
        raise BessemerError(f"{ckpt}: the manifest does not record the model (written by an older version)")
    args = get_model_args(model["name"], model["vocab_size"])
    state = _load_state_dict_from_keys({"model"}, checkpoint_id=str(ckpt))["model"]
    if tokenizer_dir is None and model.get("data_path"):
        candidate = Path(model["data_path"])
        tokenizer_dir = candidate if (candidate / "tokenizer.json").is_file() else None
    return export_hf(state, args, Path(out), model["seq_len"], tokenizer_dir=tokenizer_dir, overwrite=overwrite)
