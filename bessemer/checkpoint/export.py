"""`bessemer ckpt export-hf CKPT OUT`: a checkpoint of any layout to a Hugging Face Llama directory."""

from pathlib import Path

from bessemer.checkpoint.manifest import check, read_manifest
from bessemer.errors import BessemerError


def export_checkpoint(ckpt: Path, out: Path, tokenizer_dir: Path | None = None, overwrite: bool = False) -> Path:
    """Export the checkpoint's model weights (whatever layout saved them) with the model dimensions recorded in
    its manifest; the tokenizer from the run's data directory unless `tokenizer_dir` says otherwise. Tensors
    are read from the checkpoint one at a time, each gathered from its shards, and written out before the next:
    memory holds one tensor, never the model."""
    import torch
    import torch.distributed.checkpoint as dcp

    from bessemer.checkpoint.hf import name_map, write_hf_dir
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
    stored = dcp.FileSystemReader(str(ckpt)).read_metadata().state_dict_metadata  # shapes, dtypes: no weights

    def read(name: str) -> torch.Tensor:
        meta = stored[f"model.{name}"]
        t = torch.empty(meta.size, dtype=meta.properties.dtype)
        dcp.load({"model": {name: t}}, checkpoint_id=str(ckpt))  # this tensor's shards only, in one process
        return t

    wanted = [n for n in name_map(args) if not (args.tie_embeddings and n == "output.weight")]
    missing = [n for n in wanted if f"model.{n}" not in stored]
    if missing:
        raise BessemerError(f"{ckpt} lacks model weights {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    if args.tie_embeddings and "model.output.weight" in stored and not torch.equal(
            read("output.weight"), read("tok_embeddings.weight")):
        raise BessemerError(f"{ckpt}: tie_embeddings is set but output.weight differs from tok_embeddings.weight")
    if tokenizer_dir is None and model.get("data_path"):
        candidate = Path(model["data_path"])
        tokenizer_dir = candidate if (candidate / "tokenizer.json").is_file() else None
    return write_hf_dir(args, Path(out), model["seq_len"], read, tokenizer_dir=tokenizer_dir, overwrite=overwrite)
