"""Benchmarks as files: task files (TOML over JSONL) read and rendered without torch (tasks.py). `bessemer eval`
scores them; the data step `decontaminate` looks for their text in training documents."""
