"""bessemer: an LLM pretraining stack — data curation, parallel training, checkpoints and faults, planning."""

__version__ = "0.1.0"
