"""`bessemer train --dry-run`: what a config will do, without torch and without training."""

from bessemer.config import JobConfig, to_toml
from bessemer.tokens.shards import TokenDataset
from bessemer.model.registry import count_params, flops_per_token, get_model_args
from bessemer.parallel.layout import check_job, pipeline_microbatches
from bessemer.plan.memory import estimate_memory


def describe_run(cfg: JobConfig, world_size: int = 1) -> str:
    dims = check_job(cfg, world_size)
    data = TokenDataset(cfg.data.path)
    vocab = cfg.model.vocab_size or data.vocab_size
    args = get_model_args(cfg.model.name, vocab)
    params = count_params(args)
    t = cfg.train
    tokens_per_step = t.global_batch * t.seq_len
    lines = [
        to_toml(cfg).rstrip(),
        "",
        f"# model {cfg.model.name}: {params['total']:,} parameters (embedding {params['embedding']:,}), "
        f"vocab {vocab}, {flops_per_token(args, t.seq_len) / 1e6:,.1f} MFLOP per token",
        f"# data {cfg.data.path}: {data.num_docs:,} documents, {data.stream_len:,} tokens, domains "
        f"{', '.join(data.domains)}",
        f"# {t.steps} steps x {tokens_per_step:,} tokens = {t.steps * tokens_per_step:,} tokens "
        f"({t.steps * tokens_per_step / data.stream_len:.2f} epochs), "
        f"{t.global_batch // (t.micro_batch * dims.dp)} micro-batch(es) of {t.micro_batch} per rank per step",
        f"# layout: {dims.describe()}",
    ]
    microbatches = pipeline_microbatches(cfg.parallel, dims.pp, t.micro_batch) if dims.pp > 1 else 1
    memory = estimate_memory(args, dims, cfg.parallel, t, cfg.precision, microbatches)
    lines += [f"# {line}" for line in memory.format().splitlines()]
    return "\n".join(lines)
