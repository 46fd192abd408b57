"""Deduplication: exact + MinHash near-duplicates (`dedup`) and embedding near-duplicates (`semantic-dedup`).

    minhash.py          pure maths: normalization, shingles, MinHash, band hashes, estimated Jaccard
    graph.py            numpy: candidate pairs from sorted hashes, union-find, the keeper of each cluster
    stages.py           the file-based stages over a corpus: signatures -> buckets -> clusters -> filter
    files.py            arrays and packed ids through bessemer.data.io
    step.py             DedupStep (the `dedup` step)
    semantic.py         SemanticDedupStep (the `semantic-dedup` step); semantic_stages.py across shards;
                        semantic_cluster.py: k-means and greedy removal, shared by both
    embed.py            all-MiniLM-L6-v2 in NumPy

Imports point one way: step -> stages -> graph/minhash/files; nothing here imports torch. docs/data-dedup.md.
"""
