"""The training counters the checkpointer saves beside model and optimizer (the RNG states are bessemer/rng.py)."""

from dataclasses import dataclass


@dataclass
class TrainState:
    """Counters that must survive a restart (no hidden globals)."""

    step: int = 0  # optimizer steps completed
    tokens_seen: int = 0  # tokens consumed over all ranks

    def state_dict(self) -> dict:
        return {"step": self.step, "tokens_seen": self.tokens_seen}

    def load_state_dict(self, state: dict) -> None:
        self.step, self.tokens_seen = int(state["step"]), int(state["tokens_seen"])
