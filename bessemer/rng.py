"""Every random generator of this process (Python, NumPy, torch CPU and CUDA): seeded alike on every rank, and
saved and restored as one Stateful so a resume continues every rank's random stream exactly. Torch-level, below
the packages that use it (the trainer, and the doctor's RNG consistency check)."""

import os
import random

import numpy as np
import torch


class RNGState:
    """This process's random generators: Python, NumPy, torch CPU and (when present) CUDA.

    NumPy's state array is stored as a tensor so checkpoints load with torch.load(weights_only=True).
    """

    def state_dict(self) -> dict:
        kind, keys, pos, has_gauss, gauss = np.random.get_state()
        state = {"python": random.getstate(), "torch": torch.get_rng_state(),
                 "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": pos,
                           "has_gauss": has_gauss, "gauss": gauss}}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state()
        return state

    def load_state_dict(self, state: dict) -> None:
        version, internal, gauss_next = state["python"]
        random.setstate((version, tuple(internal), gauss_next))
        torch.set_rng_state(state["torch"])
        n = state["numpy"]
        np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state(state["cuda"])


def seed_everything(seed: int, deterministic: bool) -> None:
    """Seed every generator; with `deterministic`, also demand deterministic kernels (errors if one is not)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # needed by deterministic cuBLAS
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
