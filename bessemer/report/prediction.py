"""Predicted vs measured: the planner's prediction (the `[plan]` table that `bessemer plan --emit-config` writes
into the run's config) beside what the run measured, and whether the two can be compared at all — a run on
CPU, or on another number of ranks than planned, measures something else than the plan predicts."""

import html
import tomllib
from pathlib import Path


def read_plan(config_path: Path) -> dict:
    """The `[plan]` table of a run's config.toml; {} when there is none or it holds no prediction."""
    if not config_path.is_file():
        return {}
    try:
        plan = tomllib.loads(config_path.read_text(encoding="utf-8")).get("plan", {})
    except tomllib.TOMLDecodeError:  # the report still shows the file's text; there is just nothing to compare
        return {}
    return plan if plan.get("gpu") and plan.get("step_time_s", 0) > 0 else {}


def _ratio(measured: float | None, predicted: float) -> str:
    return f"{measured / predicted:.2f}x" if measured is not None and predicted > 0 else "-"


def compare(plan: dict, summary: dict, peak_mem_gib: float | None, started: dict | None) -> dict:
    """Rows (what, predicted, measured, measured / predicted) and notes on comparability; `comparable` is False
    when the run's device or world size differs from the plan's."""
    rows = [
        ("step time (s)", f"{plan['step_time_s']:.4g}", f"{summary['mean_step_time_s']:.4g}",
         _ratio(summary["mean_step_time_s"], plan["step_time_s"])),
        ("tokens/s", f"{plan.get('tokens_per_s', 0):,.0f}", f"{summary['mean_tokens_per_s']:,.0f}",
         _ratio(summary["mean_tokens_per_s"], plan.get("tokens_per_s", 0))),
        ("MFU", f"{plan.get('mfu', 0):.1%}", f"{summary['mean_mfu']:.1%}",
         _ratio(summary["mean_mfu"], plan.get("mfu", 0))),
        ("memory per rank (GiB)", f"{plan.get('memory_gib_per_rank', 0):.2f}",
         "-" if peak_mem_gib is None else f"{peak_mem_gib:.2f}",
         _ratio(peak_mem_gib, plan.get("memory_gib_per_rank", 0))),
    ]
    planned = f"{plan.get('gpus', 0):,} x {plan['gpu']}"
    notes, comparable = [], True
    device = (started or {}).get("device")
    if device is None:
        notes.append(f"The run did not record its device; the plan is for {planned}: compare with care.")
        comparable = False
    elif device != "cuda":
        notes.append(f"The run ran on {device.upper()}, the plan is for {planned}: the numbers are not comparable "
                     f"(MFU on {device.upper()} is measured against that device's own matmul rate).")
        comparable = False
    else:
        notes.append(f"The run ran on CUDA GPUs, which metrics.jsonl does not name: the numbers compare only if "
                     f"they are {plan['gpu']}.")
    world = (started or {}).get("world_size")
    if world is not None and plan.get("gpus") and world != plan["gpus"]:
        notes.append(f"The run had {world} ranks, the plan {plan['gpus']:,} GPUs: the numbers are not comparable.")
        comparable = False
    return {"rows": rows, "notes": notes, "comparable": comparable, "layout": plan.get("layout", "")}


def prediction_section(config_path: Path, summary: dict, peak_mem_gib: float | None, started: dict | None) -> str:
    """The report's "Predicted vs measured" section; empty when the run's config holds no prediction."""
    plan = read_plan(config_path)
    if not plan:
        return ""
    c = compare(plan, summary, peak_mem_gib, started)
    cells = "\n".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>" for row in c["rows"])
    layout = f" Planned layout: {html.escape(c['layout'])}." if c["layout"] else ""
    notes = "".join(f"<p><b>{html.escape(n)}</b></p>" for n in c["notes"])
    return (f"<h2>Predicted vs measured</h2><p>The prediction of <code>bessemer plan</code> (the config's "
            f"[plan] table) against this run's means over its steps after the first.{layout}</p>{notes}"
            f"<table><tr><th>what</th><th>predicted</th><th>measured</th><th>measured / predicted</th></tr>"
            f"{cells}</table>")
