"""Deduplication: exact + MinHash near-duplicates (`dedup`) and embedding near-duplicates (`semantic-dedup`).

    minhash.py          pure maths: normalization, shingles, MinHash, band hashes, estimated Jaccard;
                        DedupConfig (the step's settings, shared by the step and the stages)
    graph.py            numpy: candidate pairs from sorted hashes, union-find, the keeper of each cluster
    stages.py           the file-based stages over a corpus: signatures -> buckets -> clusters -> filter
    files.py            arrays and packed ids through bessemer.data.io
    lexical.py          DedupStep (the `dedup` step: exact + MinHash, on the text itself)
    semantic.py         SemanticDedupStep (the `semantic-dedup` step); semantic_stages.py across shards;
                        semantic_cluster.py: k-means and greedy removal, shared by both
    embed.py            all-MiniLM-L6-v2 in NumPy
    synthetic.py        a generated near-duplicate corpus with known clusters (tests, benches)

Imports point one way: lexical -> stages -> graph/minhash/files; nothing here imports torch. docs/data-dedup.md.
"""
