"""The run report: an HTML page with loss and throughput plots (PNG), a summary table and the resolved config,
built from <run.dir>/metrics.jsonl and <run.dir>/config.toml alone (so it also works on a finished run)."""

import html
import json
import statistics
from pathlib import Path

from bessemer.errors import BessemerError
from bessemer.report.prediction import prediction_section


def read_metrics(path: str | Path) -> tuple[list[dict], list[dict]]:
    """(step records, event records) of a metrics.jsonl; for a resumed run, the latest record of a step wins."""
    steps: dict[int, dict] = {}
    events = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        if "event" in rec:
            events.append(rec)
        else:
            steps[rec["step"]] = rec
    return [steps[s] for s in sorted(steps)], events


def _smooth(values: list[float], window: int) -> list[float]:
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def _plot(path: Path, steps: list[int], series: dict[str, list[float] | tuple[list[int], list[float]]], ylabel: str,
          title: str, markers: list[tuple[int, str]] = ()) -> None:
    """Lines over `steps`; a series given as (its own steps, values) is drawn as points joined by a dashed line
    (e.g. evaluations every N steps beside the per-step training numbers)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=110)
    for label, values in series.items():
        if isinstance(values, tuple):
            ax.plot(*values, label=label, linewidth=1.2, linestyle="--", marker="o", markersize=3)
        else:
            ax.plot(steps, values, label=label, linewidth=1.2)
    for step, label in markers:  # e.g. an automatic restart: where training resumed
        ax.axvline(step, color="tab:red", linestyle="--", linewidth=1)
        ax.annotate(label, (step, 1), xycoords=("data", "axes fraction"), xytext=(3, -12),
                    textcoords="offset points", fontsize=8, color="tab:red")
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def summarize(records: list[dict]) -> dict:
    """The numbers of the summary table (also used by tests and the demo's closing line)."""
    k = max(1, min(10, len(records) // 10))
    steady = records[1:] or records  # the first step pays for warm-up
    return {
        "steps": records[-1]["step"],
        "first_loss": records[0]["loss"],
        "final_loss": statistics.fmean(r["loss"] for r in records[-k:]),
        "min_loss": min(r["loss"] for r in records),
        "tokens_seen": records[-1].get("tokens_seen", 0),
        "mean_tokens_per_s": statistics.fmean(r["tokens_per_s"] for r in steady),
        "mean_mfu": statistics.fmean(r["mfu"] for r in steady),
        "mean_step_time_s": statistics.fmean(r["step_time_s"] for r in steady),
        "train_time_s": sum(r["step_time_s"] for r in records),
    }


def mixture_summary(records: list[dict]) -> list[dict]:
    """Per domain: target weight (mean over steps), achieved mean token share, its min and max over batches,
    the largest per-batch |share - weight|, and passes over the domain's data at the end (>1: upsampled)."""
    mixed = [r for r in records if "domain_tokens_share" in r]
    if not mixed:
        return []
    rows = []
    for name in mixed[-1]["domain_tokens_share"]:
        shares = [r["domain_tokens_share"].get(name, 0.0) for r in mixed]
        weights = [r.get("domain_weights", {}).get(name, 0.0) for r in mixed]
        rows.append({"domain": name, "weight": statistics.fmean(weights), "mean_share": statistics.fmean(shares),
                     "min_share": min(shares), "max_share": max(shares),
                     "max_error": max(abs(s - w) for s, w in zip(shares, weights)),
                     "epochs": mixed[-1].get("domain_epochs", {}).get(name)})
    return rows


def _mixture_section(records: list[dict], out: Path) -> str:
    """The "Data mixture" section (and its plots) when the run trained on a domain mixture."""
    rows = mixture_summary(records)
    if not rows:
        return ""
    mixed = [r for r in records if "domain_tokens_share" in r]
    steps = [r["step"] for r in mixed]
    names = [row["domain"] for row in rows]
    _plot(out / "mixture.png", steps, {n: [r["domain_tokens_share"].get(n, 0.0) for r in mixed] for n in names},
          "share of the batch's tokens", "token share per domain (per batch)")
    cells = [[html.escape(r["domain"]), *(f"{r[k]:.4f}" for k in ("weight", "mean_share", "min_share", "max_share",
                                                               "max_error")),
              "" if r["epochs"] is None else f"{r['epochs']:.2f}"] for r in rows]
    table = "\n".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in cells)
    with_loss = [r for r in mixed if r.get("domain_loss")]
    if with_loss:
        _plot(out / "domain_loss.png", [r["step"] for r in with_loss],
              {n: [r["domain_loss"].get(n, float("nan")) for r in with_loss] for n in names},
              "cross-entropy (nats/token)", "loss per domain")
        loss_plot = '<img src="domain_loss.png" alt="loss per domain per step">'
    else:
        loss_plot = "<p>No per-domain loss in this run's records.</p>"
    return (f"<h2>Data mixture</h2><p>Each global batch's share of tokens per domain against its target weight "
            f"(the mean of the weights over the steps, which a schedule or reweighting may change). Passes over a "
            f"domain's data above 1 mean it was exhausted and upsampled.</p>"
            f"<table><tr><th>domain</th><th>target weight</th><th>mean share</th><th>min share</th>"
            f"<th>max share</th><th>max |share - weight|</th><th>passes over its data</th></tr>{table}</table>"
            f'<img src="mixture.png" alt="token share per domain per step">{loss_plot}')


def _validation_section(records: list[dict], events: list[dict], out: Path) -> str:
    """"Held-out evaluation": the held-out loss per domain beside the training loss (per domain where the run
    logged it), and the benchmark scores over the steps ([eval], train/validation.py)."""
    evals = [e for e in events if e["event"] == "validation"]
    if not evals:
        return ""
    evals = list({e["step"]: e for e in evals}.values())  # a resumed run: the latest evaluation of a step wins
    domains = list(dict.fromkeys(d for e in evals for d in e.get("val_loss", {})))
    steps = [r["step"] for r in records]
    series: dict = {}
    for d in domains:
        if any(d in r.get("domain_loss", {}) for r in records):
            series[f"train {d}"] = [r.get("domain_loss", {}).get(d, float("nan")) for r in records]
        at = [e for e in evals if d in e.get("val_loss", {})]
        series[f"held-out {d}"] = ([e["step"] for e in at], [e["val_loss"][d] for e in at])
    if not any(k.startswith("train ") for k in series):
        series = {"train (all domains)": [r["loss"] for r in records], **series}
    parts = []
    if domains:
        _plot(out / "validation.png", steps, series, "cross-entropy (nats/token)", "training vs held-out loss")
        by_step = {r["step"]: r for r in records}
        first, last = evals[0], evals[-1]
        rows = "\n".join(
            f"<tr><td>{html.escape(d)}</td><td>{last.get('val_tokens', {}).get(d, '')}</td>"
            f"<td>{_num(first.get('val_loss', {}).get(d))}</td><td>{_num(last.get('val_loss', {}).get(d))}</td>"
            f"<td>{_num(last.get('val_perplexity', {}).get(d), '.2f')}</td>"
            f"<td>{_num(by_step.get(last['step'], {}).get('domain_loss', {}).get(d))}</td></tr>" for d in domains)
        parts.append(f"<p>Loss on the held-out shards per domain, every eval.interval steps and at the end (steps "
                     f"{first['step']} to {last['step']}), beside the training loss.</p>"
                     f"<table><tr><th>domain</th><th>tokens scored</th><th>held-out loss, step {first['step']}</th>"
                     f"<th>held-out loss, step {last['step']}</th><th>perplexity</th>"
                     f"<th>training loss, step {last['step']}</th></tr>{rows}</table>"
                     f'<img src="validation.png" alt="training and held-out loss per domain">')
    tasks = list(dict.fromkeys(t for e in evals for t in e.get("tasks", {})))
    if tasks:
        metric = {t: ("acc" if any("acc" in e.get("tasks", {}).get(t, {}) for e in evals) else "perplexity")
                  for t in tasks}
        head = "".join(f"<th>{html.escape(t)} {metric[t]}</th>" for t in tasks)
        body = "\n".join("<tr><td>" + str(e["step"]) + "</td>" + "".join(
            f"<td>{_num(e.get('tasks', {}).get(t, {}).get(metric[t]))}</td>" for t in tasks) + "</tr>" for e in evals)
        accs = {t: ([e["step"] for e in evals if t in e.get("tasks", {})],
                    [e["tasks"][t][metric[t]] for e in evals if t in e.get("tasks", {})])
                for t in tasks if metric[t] == "acc"}
        if accs:
            _plot(out / "tasks.png", [], accs, "accuracy", "benchmark accuracy (eval.tasks)")
        parts.append(f"<p>Benchmark tasks scored in the training layout (eval.tasks).</p>"
                     f"<table><tr><th>step</th>{head}</tr>{body}</table>"
                     + ('<img src="tasks.png" alt="benchmark accuracy per evaluation">' if accs else ""))
    return "<h2>Held-out evaluation</h2>" + "".join(parts)


def _num(x, fmt: str = ".4f") -> str:
    return "" if x is None else format(x, fmt)


CURATED = "curated"  # where `bessemer demo` writes its curation output, under the run directory


def _curation_section(run_dir: Path) -> str:
    """Per-step documents in/out and rejections by reason from `<run_dir>/curated/stats.json` (the demo's
    curation), with a link to that directory's data report (built here if it is missing)."""
    stats_path = run_dir / CURATED / "stats.json"
    if not stats_path.is_file():
        return ""
    from bessemer.report.data_report import build_data_report

    stats = json.loads(stats_path.read_text(encoding="utf-8"))
    data_report = run_dir / CURATED / "report" / "index.html"
    if not data_report.is_file():
        build_data_report(run_dir / CURATED)
    rows = []
    for st in stats.get("steps", []):
        ranked = sorted(st["rejected"].items(), key=lambda x: -x[1])
        reasons = "<br>".join(f"{html.escape(r)}: {n:,}" for r, n in ranked)
        rows.append(f"<tr><td>{html.escape(st['name'])}</td><td>{st['docs_in']:,}</td><td>{st['docs_out']:,}</td>"
                    f"<td>{sum(st['rejected'].values()):,}</td><td>{reasons or '-'}</td></tr>")
    conserved = "holds" if stats.get("conserved") else "VIOLATED"
    return (f"<h2>Data curation</h2><p>The training documents are the output of a curation pipeline: "
            f"{stats['docs_in']:,} documents in = {stats['docs_out']:,} kept + {stats['docs_rejected']:,} rejected "
            f"(conservation {conserved}). Full data report: "
            f"<a href=\"../{CURATED}/report/index.html\">{CURATED}/report/index.html</a>.</p>"
            f"<table><tr><th>step</th><th>docs in</th><th>docs out</th><th>rejected</th>"
            f"<th>rejected by reason</th></tr>"
            f"{''.join(rows)}</table>")


LOGS = "logs"  # where the launcher and the ranks write their logs (bessemer/proc.py), under the run directory


def read_failures(run_dir: Path) -> list[dict]:
    """The failures the launcher summed up (<run_dir>/logs/failures.jsonl), oldest first; [] without any."""
    path = run_dir / LOGS / "failures.jsonl"
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def _logs_section(run_dir: Path) -> str:
    """Links to the rank logs and the launcher's (runs with several processes)."""
    logs = run_dir / LOGS
    ranks = [p for p in logs.glob("rank*.log") if p.stem.removeprefix("rank").isdigit()]
    files = sorted(ranks, key=lambda p: int(p.stem.removeprefix("rank")))
    files += [p for p in (logs / "launcher.log",) if p.is_file()]
    if not files:
        return ""
    links = ", ".join(f'<a href="../{LOGS}/{html.escape(p.name)}">{html.escape(p.name)}</a>' for p in files)
    return (f"<h2>Logs</h2><p>Each rank's stdout and stderr (tracebacks included) and torchrun's own output, "
            f"in {html.escape(str(logs))}: {links}.</p>")


def _dumps_link(path: str | None) -> str:
    """A link from report/ to a hang's dump directory under logs/hang/."""
    if not path:
        return ""
    name = Path(path).name
    return f' (<a href="../{LOGS}/hang/{html.escape(name)}/">{html.escape(name)}</a>)'


def _failure_cell(failure: dict | None) -> str:
    if failure is None:
        return ""
    if "hang" in failure:
        return html.escape(f"hang: {failure['hang']}") + _dumps_link(failure.get("dumps"))
    log = Path(failure.get("log", ""))
    link = f' (<a href="../{LOGS}/{html.escape(log.name)}">{html.escape(log.name)}</a>)' if log.name else ""
    return html.escape(f"rank {failure.get('rank')} exited ({failure.get('exit')}) {failure.get('when', '')}") + link


def _alert_where(alert: dict) -> str:
    """Where an alert points: the node (and host) that raised it, the GPU, the rank."""
    parts = []
    if "node" in alert:
        parts.append(f"node {alert['node']}" + (f" ({alert['host']})" if alert.get("host") else ""))
    if alert.get("gpu") is not None:
        parts.append(f"GPU {alert['gpu']}")
    if alert.get("rank") is not None:
        parts.append(f"rank {alert['rank']}")
    return ", ".join(parts)


def build_report(run_dir: str | Path) -> Path:
    """Write <run_dir>/report/index.html (+ loss.png, throughput.png); returns the HTML path."""
    run_dir = Path(run_dir)
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        raise BessemerError(f"no metrics.jsonl in {run_dir}: nothing to report")
    records, events = read_metrics(metrics)
    if not records:
        raise BessemerError(f"{metrics} holds no step records")
    out = run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    steps = [r["step"] for r in records]
    losses = [r["loss"] for r in records]
    window = max(1, len(records) // 20)
    restarts = [e for e in events if e["event"] == "restart"]
    markers = [(e["step"], f"restart {e.get('attempt', '')}: resumed from step {e['step']}") for e in restarts]
    _plot(out / "loss.png", steps, {"loss": losses, f"mean of {window}": _smooth(losses, window)},
          "cross-entropy (nats/token)", "training loss", markers)
    _plot(out / "throughput.png", steps, {"tokens/s": [r["tokens_per_s"] for r in records]}, "tokens / s",
          "throughput")
    s = summarize(records)
    rows = [("steps", s["steps"]), ("first loss", f"{s['first_loss']:.4f}"),
            ("final loss (mean of last steps)", f"{s['final_loss']:.4f}"), ("lowest loss", f"{s['min_loss']:.4f}"),
            ("tokens seen", f"{s['tokens_seen']:,}"), ("mean tokens/s", f"{s['mean_tokens_per_s']:,.0f}"),
            ("mean MFU", f"{100 * s['mean_mfu']:.1f}%"), ("mean step time", f"{s['mean_step_time_s']:.3f} s"),
            ("training time", f"{s['train_time_s']:.1f} s"),
            ("checkpoints saved", sum(e["event"] == "checkpoint_saved" for e in events))]
    alerts = [e for e in events if e["event"] == "alert"]
    loaded = {e["step"]: e for e in events if e["event"] == "checkpoint_loaded"}
    causes = {f["restart"]: f for f in read_failures(run_dir) if f.get("restart") is not None}
    recovery_rows = "\n".join(
        f"<tr><td>{e.get('attempt', '')}</td><td>{_failure_cell(causes.get(e.get('attempt')))}</td><td>{e['step']}</td>"
        f"<td>{html.escape(str(loaded.get(e['step'], {}).get('tier', '')))}</td>"
        f"<td>{html.escape(str(loaded.get(e['step'], {}).get('path', 'none (started over)')))}</td></tr>"
        for e in restarts)
    recovery = (f"<h2>Recovery</h2><p>A rank failed and every rank was restarted automatically "
                f"(dashed lines on the loss plot); each restart resumed from the newest intact checkpoint.</p>"
                f"<table><tr><th>restart</th><th>cause</th><th>resumed at step</th><th>tier</th><th>checkpoint</th>"
                f"</tr>{recovery_rows}</table>" if restarts else "")
    rows += [("skipped steps (non-finite gradients)", sum(r.get("skipped", 0) for r in records)),
             ("alerts", len(alerts)), ("automatic restarts", len(restarts)),
             ("hangs", sum(e["event"] == "hang" for e in events))]
    peak_mem = max(r.get("peak_mem_gib", 0) for r in records) if "peak_mem_gib" in records[-1] else None
    if peak_mem is not None:
        rows.append(("peak memory (rank 0)", f"{peak_mem:.2f} GiB"))
    started = [e for e in events if e["event"] == "run_started"]
    if started:
        rows.insert(0, ("layout", started[-1]["layout"]))
    prediction = prediction_section(run_dir / "config.toml", s, peak_mem, started[-1] if started else None)
    alert_rows = "\n".join(f"<tr><td>{e['step']}</td><td>{html.escape(str(e.get('kind')))}</td>"
                           f"<td>{html.escape(_alert_where(e))}</td><td>{html.escape(str(e.get('message')))}</td></tr>"
                           for e in alerts)
    hangs = [e for e in events if e["event"] == "hang"]
    hang_rows = "\n".join(
        f"<tr><td>{e['step']}</td><td>{html.escape(', '.join(map(str, e.get('ranks', []))))}</td>"
        f"<td>{html.escape(', '.join(e.get('hosts', [])))}</td><td>{html.escape(str(e.get('message')))}"
        f"{_dumps_link(e.get('dumps'))}</td></tr>" for e in hangs)
    hang_section = (f"<h2>Hangs</h2><p>A rank that made no progress for fault.hang_timeout_s, found by the hang "
                    f"watchdog: every live rank's stacks and last collectives are in the dump directory "
                    f"(<code>bessemer doctor --run-dir</code> sums them up).</p><table><tr><th>step</th>"
                    f"<th>hung rank(s)</th><th>host</th><th>where, and what the others waited in</th></tr>"
                    f"{hang_rows}</table>" if hangs else "")
    alert_section = (f"<h2>Alerts</h2><p>Raised on any node; each node's alerts reach rank 0 at the next step's "
                     f"exchange.</p><table><tr><th>step</th><th>kind</th><th>where</th><th>message</th></tr>"
                     f"{alert_rows}</table>" if alerts else "")
    config_path = run_dir / "config.toml"
    config = config_path.read_text(encoding="utf-8") if config_path.is_file() else "(no config.toml)"
    table = "\n".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows)
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>bessemer run report: {html.escape(run_dir.name)}</title>
<style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}} th{{text-align:left;padding-right:2em}}
pre{{background:#f4f4f4;padding:1em}}</style></head><body>
<h1>Run report: {html.escape(run_dir.name)}</h1>
<h2>Summary</h2><table>{table}</table>
{prediction}
{_curation_section(run_dir)}
{recovery}
{hang_section}
{alert_section}
<h2>Loss</h2><img src="loss.png" alt="training loss per step">
<h2>Throughput</h2><img src="throughput.png" alt="tokens per second per step">
{_validation_section(records, events, out)}
{_mixture_section(records, out)}
{_logs_section(run_dir)}
<h2>Resolved config</h2><pre>{html.escape(config, quote=False)}</pre>
</body></html>
"""
    (out / "index.html").write_text(page, encoding="utf-8")
    return out / "index.html"
