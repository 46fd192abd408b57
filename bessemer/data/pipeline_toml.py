"""A curation pipeline: what to read, which steps to run in order, how to execute, where to write.

    [input]
    paths = ["data/raw/"]          # files, directories, globs; local or fsspec URLs
    format = "jsonl"               # jsonl | parquet | text | warc
    text_field = "text"

    [[steps]]
    name = "pii"                   # a registered step; the other keys are its constructor's arguments
    action = "mask"

    [executor]
    kind = "local"                 # local | ray
    workers = 2
    shards = 8

    [output]
    dir = "data/clean"
    format = "jsonl.zst"
    rejected = "data/clean/rejected"

Each `[[steps]]` table names a registered step (bessemer/data/steps.py: the registry and the contract every
step follows); its other keys are that step's constructor arguments.
"""

import dataclasses
import difflib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from bessemer.config import read_toml
from bessemer.data.steps import Step, build_step
from bessemer.errors import ConfigError


def _opt(default: Any, doc: str) -> Any:
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"doc": doc})
    return field(default=default, metadata={"doc": doc})


@dataclass
class InputConfig:
    paths: list[str] = _opt([], "Files, directories (read recursively) and globs; local paths or fsspec URLs.")
    format: Literal["jsonl", "parquet", "text", "warc"] = _opt("jsonl", "How to read every input file.")
    text_field: str = _opt("text", "JSONL field / Parquet column that holds the text.")
    id_field: str = _opt("id", "Field/column with the document id; absent -> '<file stem>/<line or row>'.")
    max_doc_bytes: int = _opt(64 << 20, "Larger records are rejected as input.too_large (bytes).")

    def validate(self) -> None:
        if not self.paths:
            raise ConfigError("input.paths: give at least one file, directory or glob")
        if self.max_doc_bytes <= 0:
            raise ConfigError(f"input.max_doc_bytes: must be > 0, got {self.max_doc_bytes}")


@dataclass
class ExecutorConfig:
    kind: Literal["local", "ray"] = _opt("local", "Where jobs run: local processes, or Ray tasks "
                                                  "(bessemer/data/runner.py; needs `pip install ray`).")
    workers: int = _opt(1, "Processes running jobs at once; 1 = in this process. Ray: CPUs of the local "
                           "Ray started when no address is given.")
    shards: int = _opt(0, "Output shards (input files are dealt round-robin); 0 = one per input file.")
    address: str = _opt("", "Ray only: the cluster to join: HOST:PORT of its head (as `ray start --head` "
                            "prints it), \"auto\" or \"ray://head:10001\"; empty = start a local Ray with "
                            "`workers` CPUs.")
    task_cpus: float = _opt(1.0, "Ray only: CPUs each task (a shard, a dedup stage's job) asks for.")
    task_memory_mb: int = _opt(1024, "Ray only: memory each task asks for (MB; 0 = none); Ray places a task "
                                     "only on a node with that much unreserved.")

    def validate(self) -> None:
        if self.address and self.kind != "ray":
            raise ConfigError(f"executor.address: only used with kind = \"ray\" (kind is {self.kind!r})")
        if self.workers < 1:
            raise ConfigError(f"executor.workers: must be >= 1, got {self.workers}")
        if self.shards < 0:
            raise ConfigError(f"executor.shards: must be >= 0 (0 = one per input file), got {self.shards}")
        if self.task_cpus <= 0:
            raise ConfigError(f"executor.task_cpus: must be > 0, got {self.task_cpus}")
        if self.task_memory_mb < 0:
            raise ConfigError(f"executor.task_memory_mb: must be >= 0 (0 = declare none), got {self.task_memory_mb}")


@dataclass
class OutputConfig:
    dir: str = _opt("", "Output directory: part-<shard>.<format>, stats/, stats.json.")
    format: Literal["jsonl", "jsonl.zst", "parquet"] = _opt("jsonl.zst", "Format of the output shards.")
    rejected: str = _opt("", "Directory of the exclusion sink (JSONL .zst per shard); empty = <dir>/rejected.")
    routes: bool = _opt(True, "Write documents that carry metadata.route (the lang step's `routes`) to "
                               "<dir>/<route>/part-<shard>.<format>; false = everything to <dir>.")

    def validate(self) -> None:
        if not self.dir:
            raise ConfigError("output.dir: required (where the output shards go)")

    @property
    def rejected_dir(self) -> str:
        return self.rejected or f"{self.dir.rstrip('/')}/rejected"


@dataclass
class Pipeline:
    input: InputConfig = field(default_factory=InputConfig)
    steps: list[dict] = field(default_factory=list)
    executor: ExecutorConfig = field(default_factory=ExecutorConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    # Not a TOML key: the pii step of the whole pipeline, for a stage that runs only some of its steps
    # (bessemer/data/phases.py). None = this pipeline's own pii step, if it has one.
    sink_pii: dict | None = None

    def sink_redaction(self) -> dict | None:
        """The [[steps]] table of the pii step whose detectors redact rejected documents before they reach
        the exclusion sink (bessemer/data/sink.py), or None when the pipeline has no pii step."""
        if self.sink_pii is not None:
            return self.sink_pii
        return next((dict(s) for s in self.steps if s.get("name") == "pii"), None)

    def validate(self) -> None:
        self.input.validate()
        self.executor.validate()
        self.output.validate()
        self.build_steps()  # unknown steps and bad arguments fail now, not in a worker

    def build_steps(self) -> list[Step]:
        return [build_step(spec, f"steps[{i}]") for i, spec in enumerate(self.steps)]

    @classmethod
    def from_dict(cls, raw: dict, where: str = "pipeline") -> "Pipeline":
        p = cls()
        for key, value in raw.items():
            if key == "steps":
                if not isinstance(value, list) or not all(isinstance(s, dict) for s in value):
                    raise ConfigError(f"steps: expected [[steps]] tables ({where})")
                p.steps = [dict(s) for s in value]
            elif key in ("input", "executor", "output"):
                if not isinstance(value, dict):
                    raise ConfigError(f"{key}: expected a [{key}] table ({where})")
                _fill(getattr(p, key), value, key, where)
            else:
                raise _unknown(key, ["input", "steps", "executor", "output"], where)
        p.validate()
        return p


def load_pipeline(path: str | Path) -> Pipeline:
    """Read and validate a pipeline TOML file."""
    return Pipeline.from_dict(read_toml(path, "pipeline"), where=str(path))


def _unknown(key: str, valid: list[str], where: str) -> ConfigError:
    close = difflib.get_close_matches(key.split(".")[-1], [v.split(".")[-1] for v in valid], n=1, cutoff=0.5)
    hint = f"did you mean '{key.rpartition('.')[0] + '.' if '.' in key else ''}{close[0]}'?" if close \
        else f"valid keys: {', '.join(valid)}"
    return ConfigError(f"unknown pipeline key '{key}' ({where}); {hint}")


def _fill(section: Any, table: dict, prefix: str, where: str) -> None:
    fields = {f.name: f for f in dataclasses.fields(section)}
    for name, value in table.items():
        key = f"{prefix}.{name}"
        if name not in fields:
            raise _unknown(key, [f"{prefix}.{n}" for n in fields], where)
        setattr(section, name, _check(value, typing.get_type_hints(type(section))[name], key, where))


def _check(value: Any, tp: Any, key: str, where: str) -> Any:
    if typing.get_origin(tp) is Literal:
        if value not in typing.get_args(tp):
            raise ConfigError(f"{key}: {value!r} is not one of {', '.join(typing.get_args(tp))} ({where})")
        return value
    if typing.get_origin(tp) is list:
        if isinstance(value, str):  # paths = "data/" is as clear as paths = ["data/"]
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{key}: expected a list of strings, got {value!r} ({where})")
        return value
    if tp is int and (not isinstance(value, int) or isinstance(value, bool)):
        raise ConfigError(f"{key}: expected an integer, got {value!r} ({where})")
    if tp is float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ConfigError(f"{key}: expected a number, got {value!r} ({where})")
        return float(value)
    if tp is str and not isinstance(value, str):
        raise ConfigError(f"{key}: expected a string, got {value!r} ({where})")
    return value
