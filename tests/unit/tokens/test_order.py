"""The seeded order: a bijection of [0, n) for any n, reproducible from (seed, epoch, stream), and the
document-to-shard hash."""

import numpy as np
import pytest

from bessemer.tokens.order import bucket_of, permute, stream_tag


@pytest.mark.parametrize("n", [1, 2, 3, 5, 16, 17, 1000, 4097])
def test_permute_is_a_bijection_of_any_size(n):
    p = permute(np.arange(n), n, seed=7, epoch=0)
    assert sorted(p.tolist()) == list(range(n))
    assert permute(np.arange(n)[::-1].copy(), n, 7, 0).tolist() == p[::-1].tolist()  # position by position


def test_order_depends_on_seed_epoch_and_stream_only():
    n = 1000
    base = permute(np.arange(n), n, 1, 0)
    assert permute(np.arange(n), n, 1, 0).tolist() == base.tolist()
    for other in (permute(np.arange(n), n, 2, 0), permute(np.arange(n), n, 1, 1),
                  permute(np.arange(n), n, 1, 0, stream_tag("code"))):
        assert other.tolist() != base.tolist()
    assert base.tolist() != list(range(n))
    # Huge n costs nothing: no table is built.
    assert permute(np.array([0, 10**12 - 1]), 10**12, 3, 9).max() < 10**12


def test_bucket_of_spreads_documents():
    b = bucket_of(np.arange(40_000), 4, seed=0, stream=3)
    assert b.min() == 0 and b.max() == 3
    assert np.all(np.abs(np.bincount(b) - 10_000) < 500)
    assert not np.array_equal(b, bucket_of(np.arange(40_000), 4, seed=1, stream=3))
