"""From sorted hashes to clusters, in numpy: candidate pairs of equal band hashes, exact groups, connected
components, and the keeper of each cluster. Shared by `DedupStep` (one stream in memory) and the file-based
stages (a corpus), so both give the same answer. No Python loop runs per document or per bucket.
"""

import numpy as np

ALL_PAIRS_UP_TO = 32
"""A bucket of up to this many documents yields all its pairs (verification may keep any of them); a larger
one links each member to the first and to the previous one (2k pairs, enough to connect it)."""

EXACT, NEAR = 0, 1  # reason codes in removal files
REASONS = ("exact_duplicate", "near_duplicate")


def new_group(*keys: np.ndarray) -> np.ndarray:
    """(m,) bool: True where a run of equal `keys` (all arrays equal) starts, in arrays sorted by them."""
    m = len(keys[0])
    start = np.zeros(m, bool)
    if m:
        start[0] = True
        for k in keys:
            start[1:] |= k[1:] != k[:-1]
    return start


def _group_pairs(start: np.ndarray, all_pairs_up_to: int) -> np.ndarray:
    """(p, 2) positions of the pairs to emit for the runs that `start` marks (module rule of ALL_PAIRS_UP_TO)."""
    m = len(start)
    if m < 2:
        return np.empty((0, 2), np.int64)
    first = np.flatnonzero(start)
    size = np.diff(np.append(first, m))
    gid = np.cumsum(start) - 1
    pos = np.arange(m)
    offset = pos - first[gid]  # position inside the run
    small = size[gid] <= all_pairs_up_to
    # all pairs: element at offset o pairs with the o elements before it in its run
    counts = np.where(small, offset, 0)
    total = int(counts.sum())
    j = np.repeat(pos, counts)
    i = first[gid[j]] + (np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts))
    # chains: every later member to the first, and (from the third on) to the previous one
    big = ~small & (offset >= 1)
    jb = pos[big]
    jc = pos[big & (offset >= 2)]
    left = np.concatenate([i, first[gid[jb]], jc - 1])
    right = np.concatenate([j, jb, jc])
    return np.stack([left, right], axis=1)


def candidate_pairs(key: np.ndarray, rows: np.ndarray, tag: np.ndarray | None = None,
                    all_pairs_up_to: int = ALL_PAIRS_UP_TO) -> np.ndarray:
    """Candidate pairs (p, 2) of `rows` whose band hashes `key` are equal; all three sorted by (key, row).

    `tag` (the exact-text hash, 32 bits) collapses each bucket to the first row of every exact group in it, as
    if only one copy of each text had entered LSH: exact copies join their group through exact edges, and
    extra copies must not change which pairs a bucket yields. Every run of equal keys must be complete (the
    callers guarantee it)."""
    if len(key) > 1:  # a key seen once is a bucket of one: no pairs (nearly every key, on a crawl)
        eq = key[1:] == key[:-1]
        shared = np.zeros(len(key), bool)
        shared[1:] |= eq
        shared[:-1] |= eq
        key, rows = key[shared], rows[shared]
        tag = None if tag is None else tag[shared]
    if tag is not None and len(key) > 1:
        start = new_group(key)
        gid = np.cumsum(start)
        order = np.lexsort((rows, tag, gid))  # sorted by (bucket, tag, row): the first of each tag leads
        first = new_group(gid[order], tag[order])
        keep = np.zeros(len(key), bool)
        keep[order[first]] = True
        key, rows = key[keep], rows[keep]
    pos = _group_pairs(new_group(key), all_pairs_up_to)
    return rows[pos]


def exact_pairs(hi: np.ndarray, lo: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Edges (p, 2) joining each member of an exact group to its first row; inputs sorted by (hi, lo, row)."""
    start = new_group(hi, lo)
    gid = np.cumsum(start) - 1
    first = rows[np.flatnonzero(start)][gid]
    later = ~start
    return np.stack([first[later], rows[later]], axis=1)


def components(edges: np.ndarray, n: int) -> np.ndarray:
    """root[i] = the smallest node of i's connected component, for nodes 0..n-1 and edges (m, 2).

    Min-label hooking with pointer jumping: every root adopts the smallest root it shares an edge with, then
    every node points at its root; repeated until no edge joins two roots. Parents only decrease, so it ends
    (in a few rounds on real graphs), and the answer does not depend on the order of the edges."""
    parent = np.arange(n, dtype=np.int64)
    if len(edges) == 0:
        return parent
    a, b = edges[:, 0], edges[:, 1]
    while True:
        pa, pb = parent[a], parent[b]
        differ = pa != pb
        if not differ.any():
            return parent
        a, b = a[differ], b[differ]  # edges already inside one component never matter again
        lo, hi = np.minimum(pa[differ], pb[differ]), np.maximum(pa[differ], pb[differ])
        np.minimum.at(parent, hi, lo)  # hi is a root: hook it under the smallest root it touches
        while True:
            jumped = parent[parent]
            if np.array_equal(jumped, parent):
                break
            parent = jumped


def keepers(root: np.ndarray, score: np.ndarray, length: np.ndarray, ids: np.ndarray,
            rows: np.ndarray) -> np.ndarray:
    """keeper[i] = the index (into these arrays) of the member kept in node i's cluster (`root`): the highest
    score, then the longest text, then the smallest id, then the smallest global row (repeated ids)."""
    n = len(root)
    if n == 0:
        return np.empty(0, np.int64)
    _, id_rank = np.unique(ids, return_inverse=True)
    order = np.lexsort((rows, id_rank.ravel(), -length, -score))  # best first
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n)
    best = np.full(n, n, np.int64)
    np.minimum.at(best, root, rank)
    return order[best[root]]


def cluster(edges: np.ndarray, nodes: np.ndarray, score: np.ndarray, length: np.ndarray, ids: np.ndarray,
            exact_hi: np.ndarray, exact_lo: np.ndarray, exact: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Clusters of the global rows in `edges` (m, 2). `nodes` = np.unique(edges); `score` ... `exact_lo` are
    those rows' values. Returns (removed rows, their keeper rows, reason codes EXACT/NEAR), sorted by row."""
    root = components(np.searchsorted(nodes, edges), len(nodes))
    keep = keepers(root, score, length, ids, nodes)
    gone = np.flatnonzero(keep != np.arange(len(nodes)))
    k = keep[gone]
    same = (exact_hi[gone] == exact_hi[k]) & (exact_lo[gone] == exact_lo[k]) if exact else np.zeros(len(gone), bool)
    return nodes[gone], nodes[k], np.where(same, EXACT, NEAR).astype(np.uint8)
