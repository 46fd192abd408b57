"""The curation report: `<out>/report/index.html` (+ docs.png) built from `<out>/stats.json` alone, so it can
be rebuilt for any finished `bessemer data` output directory (`bessemer data stats OUT --report`)."""

import html
import json
from pathlib import Path

from bessemer.errors import BessemerError


def _bar_chart(path: Path, steps: list[dict]) -> None:
    """Documents in and out per step, side by side: where the corpus shrinks."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    names = [s["name"] for s in steps]
    x = range(len(names))
    width = 0.4
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(names) + 2), 3.6), dpi=110)
    ax.bar([i - width / 2 for i in x], [s["docs_in"] for s in steps], width, label="docs in")
    ax.bar([i + width / 2 for i in x], [s["docs_out"] for s in steps], width, label="docs out")
    ax.set_xticks(list(x), names)
    ax.set_ylabel("documents")
    ax.set_title("documents in and out per step")
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _cell(v) -> str:
    return f"<td>{html.escape(str(v))}</td>"


def _benchmark_section(steps: list[dict]) -> str:
    """Hits per benchmark of every decontaminate step (bessemer/data/decont/step.py), or nothing."""
    out = []
    for s in steps:
        extra = s.get("extra", {})
        if s["name"] != "decontaminate" or "benchmarks" not in extra:
            continue
        rows = "\n".join("<tr>" + "".join(_cell(v) for v in (
            name, f"{hits['docs']:,}", f"{hits['ngrams']:,}", f"{s['rejected'].get(f'decontaminate.{name}', 0):,}",
            f"{extra.get('cut', {}).get(f'decontaminate.{name}', 0):,}", extra.get("index", {}).get(name, "")))
            + "</tr>" for name, hits in extra["benchmarks"].items())
        out.append(f"<p>{html.escape(extra.get('settings', ''))}; {extra.get('chars_cut', 0):,} characters cut.</p>"
                   f"<table><tr><th>benchmark</th><th>documents hit</th><th>n-grams matched</th><th>documents "
                   f"dropped</th><th>parts cut</th><th>index</th></tr>{rows}</table>")
    return "<h2>Benchmark overlap (decontaminate)</h2>\n" + "\n".join(out) if out else ""


def build_data_report(out_dir: str | Path, title: str | None = None) -> Path:
    """Write <out_dir>/report/index.html and docs.png from <out_dir>/stats.json; returns the HTML path.
    `title` defaults to the directory's name."""
    out_dir = Path(out_dir)
    stats_path = out_dir / "stats.json"
    if not stats_path.is_file():
        raise BessemerError(f"no stats.json in {out_dir}: nothing to report (has the pipeline finished?)")
    stats = json.loads(stats_path.read_text(encoding="utf-8"))
    steps = stats.get("steps", [])
    if not steps:
        raise BessemerError(f"{stats_path} lists no steps")
    report = out_dir / "report"
    report.mkdir(parents=True, exist_ok=True)
    _bar_chart(report / "docs.png", steps)

    rows = []
    for s in steps:
        n_rej = sum(s["rejected"].values())
        rows.append("<tr>" + "".join(_cell(v) for v in (
            s["name"], f"{s['docs_in']:,}", f"{s['docs_out']:,}", f"{n_rej:,}",
            f"{100 * s['docs_out'] / s['docs_in']:.1f}%" if s["docs_in"] else "-",
            f"{s['bytes_in']:,}", f"{s['bytes_out']:,}", f"{s['seconds']:.2f}")) + "</tr>")
    reasons = sorted(((s["name"], reason, n) for s in steps for reason, n in s["rejected"].items()),
                     key=lambda r: -r[2])
    reason_rows = "\n".join(f"<tr>{_cell(step)}{_cell(reason)}<td>{n:,}</td></tr>" for step, reason, n in reasons)
    reason_table = (f"<table><tr><th>step</th><th>reason</th><th>documents</th></tr>{reason_rows}</table>"
                    if reasons else "<p>No document was rejected.</p>")
    summary = [("documents in", f"{stats['docs_in']:,}"), ("documents out", f"{stats['docs_out']:,}"),
               ("documents rejected", f"{stats['docs_rejected']:,}"),
               ("conservation (in = out + rejected)", "holds" if stats.get("conserved") else "VIOLATED"),
               ("shards", stats.get("shards", "")),
               ("processing time (sum over shards)", f"{sum(s['seconds'] for s in steps):.1f} s")]
    summary_table = "\n".join(f"<tr><th>{html.escape(k)}</th>{_cell(v)}</tr>" for k, v in summary)
    title = html.escape(title or out_dir.resolve().name)
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>bessemer data report: {title}</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}} th{{text-align:left;padding-right:2em}}
td{{padding-right:2em}}</style></head><body>
<h1>Data report: {title}</h1>
<h2>Summary</h2><table>{summary_table}</table>
<h2>Steps</h2>
<p>Bytes are UTF-8 bytes of the text, except the input step's bytes in: file sizes on disk. Seconds are time spent
in the step itself, summed over shards.</p>
<table><tr><th>step</th><th>docs in</th><th>docs out</th><th>rejected</th><th>kept</th><th>bytes in</th>
<th>bytes out</th><th>seconds</th></tr>
{chr(10).join(rows)}</table>
<img src="docs.png" alt="documents in and out per step">
<h2>Rejected by reason</h2>
{reason_table}
{_benchmark_section(steps)}
</body></html>
"""
    (report / "index.html").write_text(page, encoding="utf-8")
    return report / "index.html"
