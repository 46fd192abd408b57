"""Benchmark evaluation of the task files of bessemer/benchmarks/tasks.py: log-likelihood scoring as
lm-eval-harness scores it (scoring.py), loading a model in one process (loading.py), results and their table
(results.py), and `bessemer eval` (cli.py). docs/eval.md describes the task file."""
