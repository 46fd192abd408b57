"""The result of one doctor check — the contract every check (host, runtime) returns. No torch."""

from dataclasses import asdict, dataclass, field
from typing import Literal

Status = Literal["pass", "warn", "fail", "skip"]
STATUSES: tuple[Status, ...] = ("pass", "warn", "fail", "skip")
# Of every JSON document the doctor prints (host, runtime, or both in one): raised when a field is removed or
# changes meaning, so a script can refuse a document it does not understand.
SCHEMA_VERSION = 1


@dataclass
class Check:
    """`id` is stable (users script against it, e.g. `--only rdma.links`); `description` says in one line what
    is checked; `measured` how the evidence was obtained (the file, command or call); `evidence` the values
    found; `fix` the command or setting that resolves a warn/fail (empty on pass); `skip` carries its reason
    in `evidence`."""

    id: str
    description: str
    status: Status
    evidence: str
    fix: str = ""
    measured: str = ""
    details: dict = field(default_factory=dict)  # machine-readable values behind the evidence

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"check {self.id}: status must be one of {STATUSES}, got {self.status!r}")

    def as_dict(self) -> dict:
        return asdict(self)
