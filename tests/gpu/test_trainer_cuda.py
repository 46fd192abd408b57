"""The Trainer on one GPU, as a user runs it: TF32 for fp32 matrix products, fused AdamW, compiled blocks
(train.compile = auto), a few steps of the debug config with finite losses and an MFU against the catalog's
peak for a known GPU."""

import torch

from bessemer.config import load_config
from bessemer.report.run_report import read_metrics
from bessemer.train.trainer import Trainer


def test_trainer_on_cuda_turns_on_tf32_fused_adamw_and_compiled_blocks(tmp_path):
    torch.set_float32_matmul_precision("highest")
    cfg = load_config("configs/debug.toml", [
        f"--run.dir={tmp_path}", "--train.steps=3", "--train.deterministic=false", "--metrics.log_interval=1",
        "--metrics.tensorboard=false", "--metrics.progress=false", "--checkpoint.at_end=false"])
    assert cfg.precision.dtype == "fp32" and cfg.train.compile == "auto"
    trainer = Trainer(cfg)
    assert trainer.device.type == "cuda"
    assert torch.get_float32_matmul_precision() == "high" and torch.backends.cuda.matmul.allow_tf32
    assert all(group["fused"] for opt in trainer.optimizers.optimizers for group in opt.param_groups)
    assert all(block._compiled_call_impl is not None for block in trainer.model_parts[0].layers.values())
    trainer.train()
    records = read_metrics(tmp_path / "metrics.jsonl")[0]
    assert [r["step"] for r in records] == [1, 2, 3]
    assert all(torch.isfinite(torch.tensor(r["loss"])) and r["mfu"] > 0 for r in records)
