import json

import numpy as np
import pytest
import torch

from bessemer.tokens.loader import TokenLoader
from bessemer.tokens.shards import ShardWriter, TokenDataset
from bessemer.errors import BessemerError

EOS = 0


def make_dataset(tmp_path, docs, shard_tokens=1 << 20, vocab=1000, domains=None):
    w = ShardWriter(tmp_path / "ds", vocab_size=vocab, eos_id=EOS, shard_tokens=shard_tokens)
    for i, d in enumerate(docs):
        w.add(d, domains[i] if domains else "web")
    return TokenDataset(w.close())


def reference_stream(docs):
    out = []
    for d in docs:
        out += list(d) + [EOS]
    return np.array(out)


DOCS = [[5, 6, 7], [8], [], [9, 10, 11, 12, 13], [14, 15]]


@pytest.mark.parametrize("shard_tokens", [1, 3, 1 << 20])
def test_stream_puts_eos_between_documents_across_shards(tmp_path, shard_tokens):
    ds = make_dataset(tmp_path, DOCS, shard_tokens=shard_tokens)
    ref = reference_stream(DOCS)
    assert ds.stream_len == len(ref)
    for start in range(len(ref)):
        for n in (1, 4, len(ref)):
            expected = np.take(ref, np.arange(start, start + n), mode="wrap")  # wraps to the next epoch
            assert np.array_equal(ds.read(start, n), expected), (start, n)


def test_dtype_follows_vocab_and_index_records_domains(tmp_path):
    ds = make_dataset(tmp_path, [[1, 2], [3]], vocab=1000, domains=["code", "web"])
    assert ds.shards[0].tokens.dtype == np.uint16
    assert ds.domains == ["code", "web"] and list(ds.shards[0].domains) == [0, 1]
    w = ShardWriter(tmp_path / "big", vocab_size=100_000, eos_id=0)
    w.add([99_999])
    assert TokenDataset(w.close()).read(0, 2).tolist() == [99_999, 0]


def test_bad_inputs_are_reported(tmp_path):
    w = ShardWriter(tmp_path / "x", vocab_size=10, eos_id=0)
    with pytest.raises(BessemerError, match=r"out of range \[0, 10\) in document 0"):
        w.add([3, 10])
    with pytest.raises(BessemerError, match="missing index.json"):
        TokenDataset(tmp_path / "nothing")
    ds = make_dataset(tmp_path, [[1, 2, 3]])
    bin_path = ds.path / "shard_00000.bin"
    bin_path.write_bytes(bin_path.read_bytes()[:-1])  # truncated
    with pytest.raises(BessemerError, match="expected 6 bytes"):
        TokenDataset(ds.path)


def test_loader_packs_seq_len_plus_one_and_shifts_targets(tmp_path):
    docs = [list(range(1, 30)), list(range(100, 140))]
    ds = make_dataset(tmp_path, docs)
    ref = reference_stream(docs)
    loader = TokenLoader(ds, seq_len=7, global_batch=4, micro_batch=2)
    x, y = loader.next_batch()
    assert x.shape == y.shape == (2, 7) and x.dtype == torch.int64
    first, second = loader.sequences(0, 2)
    assert x[0].tolist() == ref[8 * first:8 * first + 7].tolist()  # samples of 8 tokens cut back to back
    assert y[0].tolist() == ref[8 * first + 1:8 * first + 8].tolist()
    assert x[1].tolist() == ref[8 * second:8 * second + 7].tolist()


def _draws(loader, steps):
    """Which sequence each draw of `steps` steps was, read back from the rows (rank 0 of 1)."""
    ref = reference_stream(DOCS_LONG)
    seqs = {tuple(ref[k * loader.sample_len:(k + 1) * loader.sample_len - 1]): k
            for k in range(loader.num_sequences)}
    return [seqs[row] for row in sum(_step_samples(loader, steps), [])]


DOCS_LONG = [list(range(1, 200)), list(range(300, 360)), list(range(400, 480))]


def test_each_epoch_draws_every_sequence_once_in_a_seeded_order(tmp_path):
    ds = make_dataset(tmp_path, DOCS_LONG)
    n = ds.stream_len // 5  # seq_len 4
    orders = {seed: _draws(TokenLoader(ds, 4, global_batch=4, micro_batch=2, seed=seed), n // 4 * 3)
              for seed in (0, 1)}
    a = orders[0]
    epochs = [a[i * n:(i + 1) * n] for i in range(len(a) // n)]
    assert all(sorted(e) == list(range(n)) for e in epochs)  # a permutation of the sequences per epoch...
    assert epochs[0] != list(range(n)) and epochs[0] != epochs[1]  # ...not the stored order, another each epoch
    assert _draws(TokenLoader(ds, 4, global_batch=4, micro_batch=2, seed=0), n // 4 * 3) == a  # same seed
    assert orders[1][:n] != a[:n]  # another seed, another order


def test_resume_mid_epoch_and_mid_step_is_exact(tmp_path):
    ds = make_dataset(tmp_path, DOCS_LONG)
    a = TokenLoader(ds, 4, global_batch=12, micro_batch=4, seed=5)
    n = a.num_sequences
    for _ in range(3 * (n // 12) + 2):  # into the middle of an epoch and of a step
        a.next_batch()
    state = json.loads(json.dumps(a.state_dict()))  # plain data: (epoch, position), not a permutation
    assert state["epoch"] == 0 and 0 < state["position"] < n and state["micro"] == 2
    b = TokenLoader(ds, 4, global_batch=12, micro_batch=4, seed=5)
    b.load_state_dict(state)
    for _ in range(3 * n):  # across several epoch boundaries
        xa, ya = a.next_batch()
        xb, yb = b.next_batch()
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    assert a.state_dict() == b.state_dict() and a.epoch > 2


def _step_samples(loader, steps):
    """The inputs of each optimizer step, as the set of rows the ranks got."""
    out = []
    for _ in range(steps):
        rows = []
        for _ in range(loader.accum_steps):
            rows += [tuple(r) for r in loader.next_batch()[0].tolist()]
        out.append(rows)
    return out


def test_checkpoint_of_the_sequential_loader_continues_after_as_many_sequences(tmp_path):
    ds = make_dataset(tmp_path, DOCS_LONG)
    loader = TokenLoader(ds, 4, global_batch=4, micro_batch=2)
    loader.load_state_dict({"tokens": 5 * (loader.num_sequences + 8), "micro": 0, "stream_len": ds.stream_len})
    assert (loader.epochs_done, loader.position) == (1, 8)


def test_data_parallel_ranks_split_each_global_batch_exactly(tmp_path):
    ds = make_dataset(tmp_path, [list(range(1, 500))])
    single = _step_samples(TokenLoader(ds, 5, global_batch=8, micro_batch=2), 3)
    ranks = [_step_samples(TokenLoader(ds, 5, 8, 2, dp_rank=r, dp_world=4), 3) for r in range(4)]
    for step in range(3):
        merged = [row for r in range(4) for row in ranks[r][step]]
        assert merged == single[step]  # same samples, no overlap, nothing missing
    with pytest.raises(AssertionError):  # users get TrainConfig.check_data_parallel's message first
        TokenLoader(ds, 5, 8, 2, dp_rank=0, dp_world=3)


def test_state_dict_records_exact_position(tmp_path):
    ds = make_dataset(tmp_path, [list(range(1, 300)), list(range(300, 400))])
    a = TokenLoader(ds, 6, global_batch=6, micro_batch=2)
    for _ in range(4):  # one step and a third: mid-step position
        a.next_batch()
    state = json.loads(json.dumps(a.state_dict()))  # plain data
    b = TokenLoader(ds, 6, global_batch=6, micro_batch=2)
    b.load_state_dict(state)
    for _ in range(20):  # past the end of the data: the wrap is part of the position
        xa, ya = a.next_batch()
        xb, yb = b.next_batch()
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    other = make_dataset(tmp_path / "o", [[1, 2, 3]])
    with pytest.raises(BessemerError, match="not the same data"):
        TokenLoader(other, 6, 6, 2).load_state_dict(state)


def test_position_is_layout_independent_at_step_boundaries(tmp_path):
    ds = make_dataset(tmp_path, [list(range(1, 900))])
    single = TokenLoader(ds, 4, global_batch=8, micro_batch=4)
    _step_samples(single, 2)
    state = single.state_dict()
    rest_single = _step_samples(single, 2)
    ranks = []
    for r in range(2):
        loader = TokenLoader(ds, 4, global_batch=8, micro_batch=2, dp_rank=r, dp_world=2)
        loader.load_state_dict(state)
        ranks.append(_step_samples(loader, 2))
    for step in range(2):
        assert ranks[0][step] + ranks[1][step] == rest_single[step]
