"""Pipelines with global steps: per-shard phases around steps that must see every shard at once.

A global step (a step class with `global_step = True`, e.g. `dedup`) cannot run inside a shard: a shard
sees only its own files, so duplicates in different shards would survive. With more than one shard the
executor splits the steps at each global step into stages, numbered in order:

    steps  normalize, quality, dedup, pii
    stage 0  per shard: input, normalize, quality -> <out>/_phases/0/part-<shard>.jsonl.zst
    stage 1  global:    dedup over all of stage 0 -> <out>/_phases/1/ (its own workdir and outputs)
    stage 2  per shard: pii on stage 1's shards   -> <out>/part-<shard>.<format> (the final output)

A per-shard stage is `run_shard` on a derived pipeline (its steps, its input = the previous stage's shard),
one job per shard on the pipeline's runner (bessemer/data/runner.py), with its own completion markers
(`<stage dir>/stats/part-<shard>.json`). A global stage calls `step.run_global(shard_paths, workdir,
rejected_dir, map_jobs, sink_pii=...)` (`sink_pii`: the pii step that redacts the documents it rejects,
bessemer/data/sink.py); `map_jobs` is the same runner's `map`, so the step's stages run as jobs there too
(local processes or Ray tasks), and the step resumes itself from its own markers; when it returns,
`<out>/_phases/<k>/stats.json` marks the stage done. The last stage is always a per-shard one (with no steps
when the pipeline ends in a global step), so the final output has the usual names and format. Rejected
documents of stage k go to `<rejected>/<k>/part-<shard>.jsonl.zst`.

Every marker holds a fingerprint of the whole pipeline and the stage number, so a rerun resumes at the
first unfinished stage (and shard) and ends with the same files as an uninterrupted run; a changed pipeline
is an error, not a mix. stats.json has one entry per step of the pipeline (the global steps included),
merged over shards, and conservation is checked over the whole run.
"""

import dataclasses
import sys
import time

from bessemer.data import io
from bessemer.data.executor import (
    _Progress,
    _run_shard_job,
    assign_shards,
    done_shard_stats,
    fingerprint,
    is_global,
    shard_done,
    shard_job_name,
)
from bessemer.data.pipeline_toml import InputConfig, OutputConfig, Pipeline
from bessemer.data.readers import InputFile, list_inputs
from bessemer.data.runner import Runner, open_runner
from bessemer.data.stats import StepStats, conservation_errors, merge_shards, summary
from bessemer.data.steps import build_step, registry_paths
from bessemer.data.writers import shard_name
from bessemer.errors import BessemerError

PHASE_FORMAT = "jsonl.zst"  # intermediate shards (the readers map it back to the same documents)


@dataclasses.dataclass
class Stage:
    index: int
    steps: list[dict]  # per-shard stage: its steps (maybe none); global stage: the one global step
    is_global: bool


def plan(steps: list[dict]) -> list[Stage]:
    """Split the steps at each global step; the first and the last stage are per-shard ones."""
    stages = [Stage(0, [], False)]
    for spec in steps:
        if is_global(spec):
            stages.append(Stage(len(stages), [spec], True))
        elif stages[-1].is_global:
            stages.append(Stage(len(stages), [spec], False))
        else:
            stages[-1].steps.append(spec)
    if stages[-1].is_global:
        stages.append(Stage(len(stages), [], False))
    return stages


def _stage_fp(fp: str, k: int) -> str:
    return io.fingerprint(fp, k)


def _phase_dir(pipeline: Pipeline, k: int) -> str:
    return io.join(pipeline.output.dir, "_phases", str(k))


def _stage_pipeline(pipeline: Pipeline, stage: Stage, last: bool) -> Pipeline:
    """The pipeline one per-shard stage runs: its steps, reading the previous stage's shards (stage > 0),
    writing the intermediate shards (or, last, the final output)."""
    out = pipeline.output
    rejected = io.join(out.rejected_dir, str(stage.index))
    # Intermediate shards are never routed: the route stays in the metadata for the final stage to act on.
    output = (OutputConfig(dir=out.dir, format=out.format, rejected=rejected, routes=out.routes) if last
              else OutputConfig(dir=_phase_dir(pipeline, stage.index), format=PHASE_FORMAT, rejected=rejected,
                                routes=False))
    src = pipeline.input
    if stage.index > 0:  # intermediate shards hold id, text and metadata; none is too large to have got there
        src = InputConfig(paths=[_phase_dir(pipeline, stage.index - 1)], format="jsonl", text_field="text",
                          id_field="id", max_doc_bytes=1 << 62)
    return dataclasses.replace(pipeline, input=src, steps=stage.steps, output=output,
                               sink_pii=pipeline.sink_redaction())


def _run_shards(runner: Runner, jobs: list[tuple], show: bool, step_names: list[str]) -> None:
    with _Progress(show, len(jobs), step_names) as bar:
        runner.map(_run_shard_job, jobs, on_done=bar.shard_done, names=[shard_job_name(j) for j in jobs])


def _run_global(pipeline: Pipeline, stage: Stage, inputs: list[str], fp: str,
                runner: Runner) -> tuple[dict, list[str]]:
    """Run (or resume) a global stage; returns its step stats entry (bytes_out filled in later) and outputs."""
    marker = io.join(_phase_dir(pipeline, stage.index), "stats.json")
    if io.marker_done(marker, fp, f"output.dir {pipeline.output.dir} (stage {stage.index})"):
        done = io.read_json(marker)
        return done["step"], done["outputs"]
    spec = stage.steps[0]
    step = build_step(spec, f"steps ({spec['name']})")
    t = time.perf_counter()
    r = step.run_global(inputs, _phase_dir(pipeline, stage.index),
                        io.join(pipeline.output.rejected_dir, str(stage.index)), runner.map,
                        sink_pii=pipeline.sink_redaction())
    st = StepStats(spec["name"], docs_in=r["docs_in"], docs_out=r["docs_out"], seconds=time.perf_counter() - t,
                   extra=r.get("extra", {}))
    st.rejected.update(r["rejected"])
    entry = st.to_dict()
    io.write_marker(marker, fp, step=entry, outputs=r["outputs"])
    return entry, r["outputs"]


def run_phased(pipeline: Pipeline, files: list[InputFile], n_shards: int, limit_shards: int | None,
               progress: bool | None) -> dict:
    """`run_pipeline` for a pipeline with global steps and several shards (module docstring).
    `limit_shards` counts shard jobs over all per-shard stages (an interruption, for tests)."""
    fp = fingerprint(pipeline, n_shards)
    stages = plan(pipeline.steps)
    budget = limit_shards
    show = sys.stderr.isatty() if progress is None else progress
    steps: list[dict] = []  # the run's stats entries, in pipeline order
    pending_global: dict | None = None  # a global step's entry, waiting for the next stage's byte count
    prev_outputs: list[str] | None = None
    routes: dict[str, int] = {}  # of the last stage, the one that writes the final output
    with open_runner(pipeline.executor) as runner:
        for stage in stages:
            sfp = _stage_fp(fp, stage.index)
            if stage.is_global:
                assert prev_outputs is not None
                pending_global, prev_outputs = _run_global(pipeline, stage, prev_outputs, sfp, runner)
                continue
            sp = _stage_pipeline(pipeline, stage, last=stage is stages[-1])
            shards = (assign_shards(files, n_shards) if prev_outputs is None
                      else [[InputFile(url, shard_name(i, PHASE_FORMAT))] for i, url in enumerate(prev_outputs)])
            todo = [i for i in range(n_shards) if not shard_done(sp, i, sfp)]
            if budget is not None:
                todo, budget = todo[:budget], budget - len(todo[:budget])
            jobs = [(sp, i, n_shards, shards[i], sfp, registry_paths()) for i in todo]
            _run_shards(runner, jobs, show, [s["name"] for s in stage.steps])
            per_shard = done_shard_stats(sp, n_shards, sfp)
            if len(per_shard) < n_shards:
                return {"complete": False, "stage": stage.index, "shards_done": len(per_shard), "shards": n_shards}
            merged_stage = merge_shards(per_shard)
            routes = merged_stage.get("routes", {})
            merged = merged_stage["steps"]
            if pending_global is not None:
                # This stage's input step read exactly what the global step kept: its bytes are the step's output.
                read = merged.pop(0)
                assert read["docs_in"] == read["docs_out"] == pending_global["docs_out"], (read, pending_global)
                pending_global["bytes_in"] = steps[-1]["bytes_out"]
                pending_global["bytes_out"] = read["bytes_out"]
                steps.append(pending_global)
                pending_global = None
            steps += merged
            prev_outputs = [io.join(sp.output.dir, shard_name(i, sp.output.format)) for i in range(n_shards)]
    stats = [StepStats.from_dict(s) for s in steps]
    merged_all = {**summary(stats, shards=n_shards), "complete": True,
                  "stages": [{"index": s.index, "global": s.is_global, "steps": [x["name"] for x in s.steps]}
                             for s in stages]}
    if routes:
        merged_all["routes"] = routes
    io.write_json(io.join(pipeline.output.dir, "stats.json"), merged_all)
    errors = conservation_errors(stats)
    if errors:
        raise BessemerError("documents lost or created without a reason: " + "; ".join(errors))
    return merged_all


def run_pipeline(pipeline: Pipeline, limit_shards: int | None = None, progress: bool | None = None) -> dict:
    """Run (or resume) the pipeline; returns the merged stats (also written to `<dir>/stats.json`).

    `limit_shards` stops after processing that many shards (an interrupted run, for tests and for trying
    a pipeline on a sample); the result then has "complete": false and no stats.json is written.
    `progress` shows per-step counts with rich; None = only when stderr is a terminal.
    """
    files = list_inputs(pipeline.input.paths, pipeline.input.format)
    n_shards = pipeline.executor.shards or max(1, len(files))
    if n_shards > 1 and any(is_global(spec) for spec in pipeline.steps):
        return run_phased(pipeline, files, n_shards, limit_shards, progress)
    fp = fingerprint(pipeline, n_shards)
    shards = assign_shards(files, n_shards)
    todo = [i for i in range(n_shards) if not shard_done(pipeline, i, fp)]
    if limit_shards is not None:
        todo = todo[:limit_shards]
    jobs = [(pipeline, i, n_shards, shards[i], fp, registry_paths()) for i in todo]
    show = sys.stderr.isatty() if progress is None else progress
    if jobs:
        with open_runner(pipeline.executor) as runner:
            _run_shards(runner, jobs, show, [s.get("name", "?") for s in pipeline.steps])
    per_shard = done_shard_stats(pipeline, n_shards, fp)
    if len(per_shard) < n_shards:
        partial = merge_shards(per_shard) if per_shard else {}
        return {**partial, "complete": False, "shards_done": len(per_shard), "shards": n_shards}
    merged = {**merge_shards(per_shard), "complete": True}
    io.write_json(io.join(pipeline.output.dir, "stats.json"), merged)
    errors = conservation_errors([StepStats.from_dict(s) for s in merged["steps"]])
    if errors:
        raise BessemerError("documents lost or created without a reason: " + "; ".join(errors))
    return merged
