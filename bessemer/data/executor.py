"""The shard job: input files dealt into N shards, each shard one job of the pipeline's runner (in this process,
a local worker process or a Ray task: bessemer/data/runner.py; everything below is the same on each).

A shard reads its files, runs the steps in order and writes three files: `<dir>/part-<shard>.<format>`,
`<rejected>/part-<shard>.jsonl.zst` (the exclusion sink, redacted by the pipeline's pii step: sink.py) and,
last, `<dir>/stats/part-<shard>.json` — the completion marker (all through bessemer/data/io.py, so any of them
may be a local path or an `s3://` URL). A rerun skips every shard whose marker and output exist, so an
interrupted run resumes where it stopped and finishes with the same output as an uninterrupted one. When every
shard is done, the shard stats are merged into `<dir>/stats.json` and conservation (in = out + rejected, per
step) is checked.

`run_pipeline` (bessemer/data/phases.py) drives it; a pipeline with a global step (`dedup`) and more than one
shard runs in stages instead, per-shard ones around each global step (also phases.py).

Shard assignment depends only on the sorted input list and the shard count, never on the number of
workers, so 1 and 8 workers write identical shards.
"""

import itertools
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from typing import Self

from bessemer.data import io
from bessemer.data.document import CUT_FROM, REASON, Document
from bessemer.data.pipeline_toml import Pipeline
from bessemer.data.readers import InputFile, file_size, read_file
from bessemer.data.sink import Sink
from bessemer.data.stats import StepStats, summary
from bessemer.data.steps import STEPS, Reject, step_class
from bessemer.data.writers import RoutedWriter, open_writer, shard_name

REJECTED_FORMAT = "jsonl.zst"


def assign_shards(files: list[InputFile], shards: int) -> list[list[InputFile]]:
    """Round-robin over the sorted file list: shard i gets files i, i+N, i+2N, ..."""
    return [files[i::shards] for i in range(shards)]


def fingerprint(pipeline: Pipeline, shards: int) -> str:
    """What a shard's content depends on; a rerun refuses to mix shards of different pipelines."""
    return io.fingerprint({"input": asdict(pipeline.input), "steps": pipeline.steps, "shards": shards,
                           "format": pipeline.output.format})


def _text_bytes(doc: Document) -> int:
    return len(doc.text.encode("utf-8", "surrogatepass"))


def _count(docs: Iterable[Document], stats: StepStats, reject: Reject | None = None) -> Iterator[Document]:
    """Pass documents on, counting them; `stats.seconds` gets the time spent inside this generator, which
    includes the stages feeding it (subtracted later). With `reject` (the input stage) a record the readers
    marked unreadable (bessemer/data/readers.py) goes to `reject` instead of on."""
    t = time.perf_counter()
    for doc in docs:
        if reject is not None and REASON in doc.metadata:
            reject(doc)
            continue
        stats.docs_out += 1
        stats.bytes_out += _text_bytes(doc)
        stats.seconds += time.perf_counter() - t
        yield doc
        t = time.perf_counter()
    stats.seconds += time.perf_counter() - t


def _sink(stats: StepStats, rejected: Sink) -> Reject:
    """The reject callback of one stage: count the document by its reason, write it to the exclusion sink. A
    part cut out of a kept document (`cut_from`: bessemer/data/steps.py) is written, not counted: its document
    went on."""
    def on_reject(doc: Document) -> None:
        if CUT_FROM not in doc.metadata:
            stats.rejected[str(doc.metadata[REASON])] += 1
        rejected.write(doc)

    return on_reject


def _read_all(files: list[InputFile], pipeline: Pipeline) -> Iterator[Document]:
    for f in files:
        yield from read_file(f, pipeline.input)


def run_shard(pipeline: Pipeline, shard: int, n_shards: int, files: list[InputFile], fp: str) -> dict:
    """Process one shard and write its output, rejected and stats files; returns its stats object."""
    out = pipeline.output
    steps = pipeline.build_steps()
    stats = [StepStats("input")] + [StepStats(spec["name"]) for spec in pipeline.steps]
    stats[0].bytes_in = sum(file_size(f.url) for f in files)
    writer = (RoutedWriter(out.dir, shard, out.format) if out.routes
              else open_writer(io.join(out.dir, shard_name(shard, out.format)), out.format))
    with writer, \
            Sink(io.join(out.rejected_dir, shard_name(shard, REJECTED_FORMAT)), pipeline.sink_redaction()) as rejected:
        stream = _count(_read_all(files, pipeline), stats[0], _sink(stats[0], rejected))
        for step, st in zip(steps, stats[1:]):
            stream = _count(step.run(stream, shard, n_shards, reject=_sink(st, rejected)), st)
        for doc in stream:
            writer.write(doc)
    # Every record the readers produced was either kept or rejected by the input stage; each later step
    # receives exactly what the one before it kept.
    stats[0].docs_in = stats[0].docs_out + stats[0].n_rejected
    for prev, st in itertools.pairwise(stats):
        st.docs_in, st.bytes_in = prev.docs_out, prev.bytes_out
    inclusive = [s.seconds for s in stats]
    for i in range(1, len(stats)):
        stats[i].seconds = max(0.0, inclusive[i] - inclusive[i - 1])
    for step, st in zip(steps, stats[1:]):
        st.extra = step.stats()
    assert writer.count == stats[-1].docs_out, (writer.count, stats[-1].docs_out)
    result = {"shard": shard, "fingerprint": fp, "files": [f.url for f in files], **summary(stats, shards=1)}
    if isinstance(writer, RoutedWriter):
        result["routes"] = writer.route_counts()
    io.write_json(_stats_path(pipeline, shard), result)  # the completion marker: written last
    return result


def _run_shard_job(job: tuple) -> dict:
    """Entry point in a worker process: restore the step registry, then run the shard."""
    pipeline, shard, n_shards, files, fp, registry = job
    STEPS.update({k: v for k, v in registry.items() if k not in STEPS})
    return run_shard(pipeline, shard, n_shards, files, fp)


def shard_job_name(job: tuple) -> str:
    pipeline, shard, n_shards = job[:3]
    return f"shard part-{shard:05d} of {n_shards} (output.dir {pipeline.output.dir})"


def _stats_path(pipeline: Pipeline, shard: int) -> str:
    return io.join(pipeline.output.dir, "stats", f"part-{shard:05d}.json")


def shard_done(pipeline: Pipeline, shard: int, fp: str) -> bool:
    """Whether the shard's completion marker and output exist (and belong to this pipeline)."""
    output = io.join(pipeline.output.dir, shard_name(shard, pipeline.output.format))
    return (io.marker_done(_stats_path(pipeline, shard), fp,
                           f"output.dir {pipeline.output.dir} (input, steps, shard count or format changed)")
            and io.exists(output))


def is_global(spec: dict) -> bool:
    """Whether the step of this `[[steps]]` table is a global step (class attribute `global_step = True`):
    one that must see every shard at once, run between per-shard phases (bessemer/data/phases.py)."""
    return bool(getattr(step_class(spec["name"]), "global_step", False))


def done_shard_stats(pipeline: Pipeline, n_shards: int, fp: str) -> list[dict]:
    """The stats objects of the shards that are done, in shard order."""
    return [io.read_json(_stats_path(pipeline, i)) for i in range(n_shards) if shard_done(pipeline, i, fp)]


class _Progress:
    """Shards done and documents out per step, updated as shards finish (rich, terminal only)."""

    def __init__(self, enabled: bool, n_shards: int, step_names: list[str]):
        self._p = None
        if not enabled or n_shards == 0:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self._p = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                           TextColumn("{task.fields[docs]}"), TimeElapsedColumn(), console=Console(stderr=True))
        self._shards = self._p.add_task("shards", total=n_shards, docs="")
        self._steps = [self._p.add_task(f"  {name}", total=None, docs="") for name in ["input", *step_names]]
        self._totals = [[0, 0] for _ in self._steps]

    def __enter__(self) -> Self:
        if self._p is not None:
            self._p.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._p is not None:
            self._p.stop()

    def shard_done(self, stats: dict) -> None:
        if self._p is None:
            return
        self._p.advance(self._shards)
        for task, total, st in zip(self._steps, self._totals, stats["steps"]):
            total[0] += st["docs_out"]
            total[1] += sum(st["rejected"].values())
            self._p.update(task, completed=total[0], docs=f"kept, {total[1]:,} rejected")
