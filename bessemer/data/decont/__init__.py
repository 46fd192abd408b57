"""Benchmark items in training text: the `decontaminate` step (step.py) finds the n-grams of the items of
`bessemer eval`'s task files (index.py, through bessemer/benchmarks/tasks.py) in documents, with the
normalisation and hashing both sides share (ngrams.py). docs/decontamination.md."""
