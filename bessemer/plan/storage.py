"""Storage sizing: read bandwidth to feed training, checkpoint sizes per tier and the write bandwidth for a
target stall. No torch.

Token shards store 2 bytes per token for vocabularies up to 65,536 and 4 beyond (tokens/shards.py).
A checkpoint of our trainer holds fp32 weights and AdamW's two fp32 states: 12 bytes per parameter
(micro and macro tiers alike; the cold tier compresses that with zstd, which gains little on fp32 noise, so
it is sized the same); an exported Hugging Face copy holds bf16 weights: 2 bytes per parameter.
"""

from dataclasses import asdict, dataclass

CHECKPOINT_BYTES_PER_PARAM = 12
EXPORT_BYTES_PER_PARAM = 2


@dataclass(frozen=True)
class StoragePlan:
    tokens_per_s: float
    bytes_per_token: int
    read_gbs: float  # aggregate, token shards
    read_gbs_raw_text: float  # if the loader read raw UTF-8 text instead (~4 bytes per token)
    checkpoint_gb: float
    export_gb: float
    target_stall_s: float
    write_gbs_for_stall: float  # aggregate write bandwidth for a save to block training target_stall_s
    write_gbs_per_node: float
    storage_write_gbs: float  # what the user has (or assumed)
    save_s: float  # checkpoint_gb / storage_write_gbs: the δ of the interval formula

    def as_dict(self) -> dict:
        return asdict(self)


def storage_plan(params: int, vocab: int, tokens_per_s: float, nodes: int, target_stall_s: float,
                 storage_write_gbs: float, raw_bytes_per_token: float = 4.0) -> StoragePlan:
    bpt = 2 if vocab <= 65536 else 4
    ckpt = params * CHECKPOINT_BYTES_PER_PARAM / 1e9
    need = ckpt / target_stall_s
    return StoragePlan(tokens_per_s, bpt, tokens_per_s * bpt / 1e9, tokens_per_s * raw_bytes_per_token / 1e9,
                       ckpt, params * EXPORT_BYTES_PER_PARAM / 1e9, target_stall_s, need, need / max(1, nodes),
                       storage_write_gbs, ckpt / storage_write_gbs)
