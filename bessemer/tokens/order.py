"""The order in which a loader draws sequences: a seeded permutation of [0, n) per epoch, in O(1) memory.

`permute(positions, n, seed, epoch, stream)` maps positions of an epoch to sequence indices. The permutation
is a 4-round Feistel network on the smallest even number of bits that holds n, keyed by a hash of (seed,
epoch, stream) and cycle-walked into [0, n) (a value >= n is permuted again until it lands below n; since
2^bits < 4n that takes under 4 rounds on average). Nothing is stored: a loader's position in its data is
(epoch, position), and any position of any epoch is computed directly, so resuming costs nothing and a
trillion-token corpus needs no index of its sequences. `bucket_of` is the same hash used to deal documents
into shards when they are encoded. The hash is splitmix64, written out here, so the order does not depend on
the NumPy version.
"""

import zlib

import numpy as np

_MASK64 = (1 << 64) - 1
_ROUNDS = 4


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer on uint64 arrays (wrapping arithmetic)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _hash(*parts: int) -> int:
    h = np.zeros(1, dtype=np.uint64)
    for p in parts:
        h = _mix(h ^ np.array([p & _MASK64], dtype=np.uint64))
    return int(h[0])


def stream_tag(name: str) -> int:
    """A stable number for a named stream (a domain), so each domain gets its own order."""
    return zlib.crc32(name.encode())


def permute(positions: np.ndarray, n: int, seed: int, epoch: int, stream: int = 0) -> np.ndarray:
    """The sequence index (int64) at each position (0 <= position < n) of epoch `epoch`."""
    assert n >= 1, f"cannot permute {n} sequences"
    pos = np.asarray(positions, dtype=np.int64)
    assert pos.size == 0 or (pos.min() >= 0 and pos.max() < n), f"positions outside [0, {n})"
    if n == 1:
        return np.zeros_like(pos)
    half = max(1, ((n - 1).bit_length() + 1) // 2)
    mask = np.uint64((1 << half) - 1)
    keys = [np.uint64(_hash(seed, epoch, stream, r)) for r in range(_ROUNDS)]

    def rounds(x: np.ndarray) -> np.ndarray:
        left, right = x >> np.uint64(half), x & mask
        for k in keys:
            left, right = right, left ^ (_mix(right ^ k) & mask)
        return (left << np.uint64(half)) | right

    out = rounds(pos.astype(np.uint64))
    todo = out >= np.uint64(n)
    while todo.any():  # cycle-walking: a bijection of [0, 2^2h) restricted to [0, n) stays a bijection
        out[todo] = rounds(out[todo])
        todo = out >= np.uint64(n)
    return out.astype(np.int64)


def bucket_of(items: np.ndarray, buckets: int, seed: int, stream: int = 0) -> np.ndarray:
    """A seeded hash of each item number (int64) into [0, buckets): which output shard a document goes to."""
    key = np.uint64(_hash(seed, stream))
    h = _mix(np.asarray(items, dtype=np.int64).astype(np.uint64) ^ key)
    return (h % np.uint64(buckets)).astype(np.int64)
