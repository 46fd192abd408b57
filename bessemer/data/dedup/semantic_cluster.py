"""The numpy kernels of semantic dedup: spherical k-means and greedy removal inside one cluster. Shared by the
`semantic-dedup` step (semantic.py) and its stages across shards (semantic_stages.py)."""

import numpy as np

EXACT_MAX_DOCS = 4096  # up to this many documents: one cluster, every pair compared, no k-means


def kmeans(x: np.ndarray, k: int, seed: int = 0, iters: int = 20) -> np.ndarray:
    """Spherical k-means on L2-normalized rows (assignment by largest dot product), k-means++ init.

    Returns the cluster of each row. Deterministic for a given `x`, `k` and `seed`.
    """
    return kmeans_fit(x, k, seed, iters)[0]


def kmeans_fit(x: np.ndarray, k: int, seed: int = 0, iters: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """`kmeans`, returning (labels, centers (k, C)): the corpus-wide step fits on a sample, assigns the rest."""
    n = len(x)
    k = max(1, min(k, n))
    rng = np.random.default_rng(seed)
    centers = np.empty((k, x.shape[1]), dtype=np.float32)
    centers[0] = x[rng.integers(n)]
    dist = 1.0 - x @ centers[0]  # cosine distance to the nearest chosen center
    for c in range(1, k):
        d = np.maximum(dist, 0.0)
        total = float(d.sum())
        pick = rng.choice(n, p=d / total) if total > 0 else rng.integers(n)
        centers[c] = x[pick]
        dist = np.minimum(dist, 1.0 - x @ centers[c])
    labels = np.full(n, -1)
    for _ in range(iters):
        new = np.argmax(x @ centers.T, axis=1)
        if np.array_equal(new, labels):
            break
        labels = new
        for c in range(k):
            members = x[labels == c]
            if len(members):  # an empty cluster keeps its old center
                s = members.sum(0)
                centers[c] = s / max(float(np.linalg.norm(s)), 1e-12)
    return labels, centers


def greedy_duplicates(emb: np.ndarray, threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Within one cluster whose rows `emb` (m, C) are in keeper order (best first): a row is dropped when its
    cosine with an already kept row is >= `threshold`. Returns (dropped positions, the kept position each
    duplicates, cosine). Rows are compared in blocks of 1024 x m, never m x m."""
    m = len(emb)
    kept = np.zeros(m, dtype=bool)
    gone, of, sim = [], [], []
    for b0 in range(0, m, 1024):
        b1 = min(b0 + 1024, m)
        sims = emb[b0:b1] @ emb[:b1].T  # (rows, b1): each row against every better document
        for pos in range(b0, b1):
            row = np.where(kept[:pos], sims[pos - b0, :pos], -np.inf)
            best = int(np.argmax(row)) if pos else 0
            if pos and row[best] >= threshold:
                gone.append(pos)
                of.append(best)
                sim.append(float(row[best]))
            else:
                kept[pos] = True
    return np.array(gone, np.int64), np.array(of, np.int64), np.array(sim, np.float64)
