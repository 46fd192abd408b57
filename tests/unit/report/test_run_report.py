import json

import pytest

from bessemer.errors import BessemerError
from bessemer.report.run_report import build_report, read_metrics, summarize


def test_report_from_metrics(tmp_path):
    lines = [{"step": s, "loss": 5.0 - s * 0.1, "lr": 1e-3, "grad_norm": 1.0, "tokens_per_s": 100.0 + s,
              "mfu": 0.1, "step_time_s": 0.5, "tokens_seen": 64 * s} for s in range(1, 21)]
    lines.insert(5, {"event": "checkpoint_saved", "step": 5})
    lines.insert(9, {"event": "alert", "step": 8, "kind": "silent_update", "message": "every gradient is <zero>"})
    lines.append({"step": 20, "loss": 2.5, "lr": 1e-3, "grad_norm": 1.0, "tokens_per_s": 1.0, "mfu": 0.1,
                  "step_time_s": 0.5, "tokens_seen": 1280})  # a resumed run re-logged step 20: the last one wins
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    (tmp_path / "config.toml").write_text("[train]\nsteps = 20\n")
    records, events = read_metrics(tmp_path / "metrics.jsonl")
    assert len(records) == 20 and records[-1]["loss"] == 2.5 and len(events) == 2
    s = summarize(records)
    assert s["first_loss"] == 4.9 and s["final_loss"] < s["first_loss"]
    page = build_report(tmp_path)
    html = page.read_text()
    assert "loss.png" in html and "steps = 20" in html and "checkpoints saved" in html
    assert "<h2>Alerts</h2>" in html and "silent_update" in html and "every gradient is &lt;zero&gt;" in html
    for png in ("loss.png", "throughput.png"):
        assert (page.parent / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_without_metrics(tmp_path):
    with pytest.raises(BessemerError, match="no metrics.jsonl"):
        build_report(tmp_path)


def test_report_shows_the_data_mixture(tmp_path):
    shares = [{"web": 0.5, "zh": 0.5}, {"web": 0.75, "zh": 0.25}]
    lines = [{"step": s, "loss": 3.0, "lr": 1e-3, "grad_norm": 1.0, "tokens_per_s": 10.0, "mfu": 0.1,
              "step_time_s": 0.5, "domain_tokens_share": shares[s % 2], "domain_weights": {"web": 0.6, "zh": 0.4},
              "domain_epochs": {"web": 0.1 * s, "zh": 0.5 * s}, "domain_loss": {"web": 2.0, "zh": 4.0}}
             for s in range(1, 11)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    html = build_report(tmp_path).read_text()
    assert "<h2>Data mixture</h2>" in html
    # web: weight 0.6, mean share 0.625, min 0.5, max 0.75, worst batch 0.15 off, 1 pass over its data
    row = ["web", "0.6000", "0.6250", "0.5000", "0.7500", "0.1500", "1.00"]
    assert "".join(f"<td>{c}</td>" for c in row) in html
    for png in ("mixture.png", "domain_loss.png"):
        assert (tmp_path / "report" / png).read_bytes()[:4] == b"\x89PNG"


def test_report_shows_held_out_loss_and_task_scores(tmp_path):
    lines = [{"step": s, "loss": 3.0 - 0.1 * s, "lr": 1e-3, "grad_norm": 1.0, "tokens_per_s": 10.0, "mfu": 0.1,
              "step_time_s": 0.5, "domain_loss": {"web": 2.5, "zh": 3.5}} for s in range(1, 11)]
    for step, (web, zh) in ((5, (2.7, 3.9)), (10, (2.4, 3.6))):
        lines.append({"event": "validation", "step": step, "val_loss": {"web": web, "zh": zh},
                      "val_perplexity": {"web": 2.0 ** web, "zh": 2.0 ** zh}, "val_tokens": {"web": 4096, "zh": 1000},
                      "tasks": {"arc": {"acc": 0.25 + step / 100, "acc_norm": 0.3, "n": 40}}, "seconds": 1.0})
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    html = build_report(tmp_path).read_text()
    assert "<h2>Held-out evaluation</h2>" in html
    row = ["web", "4096", "2.7000", "2.4000", f"{2.0 ** 2.4:.2f}", "2.5000"]
    assert "".join(f"<td>{c}</td>" for c in row) in html
    assert "<tr><td>10</td><td>0.3500</td></tr>" in html  # arc's accuracy at step 10
    for png in ("validation.png", "tasks.png"):
        assert (tmp_path / "report" / png).read_bytes()[:4] == b"\x89PNG"


def test_report_shows_a_hang_with_its_culprit_and_dumps(tmp_path):
    dumps = tmp_path / "logs" / "hang" / "attempt0_20260101-000000"
    message = "rank 2 (host h, pid 9) hung at step 12: stopped (no heartbeat for 21 s), last heartbeat in x.py:1 f"
    lines = [{"event": "run_started", "step": 0, "layout": "world 4"}]
    lines += [{"step": s, "loss": 3.0, "lr": 1e-3, "grad_norm": 1.0, "tokens_per_s": 10.0, "mfu": 0.1,
               "step_time_s": 0.5} for s in range(1, 13)]
    lines += [{"event": "hang", "step": 12, "attempt": 0, "ranks": [2], "hosts": ["h"], "message": message,
               "dumps": str(dumps)}, {"event": "restart", "step": 10, "attempt": 1}]
    lines += [{"step": s, "loss": 3.0, "lr": 1e-3, "grad_norm": 1.0, "tokens_per_s": 10.0, "mfu": 0.1,
               "step_time_s": 0.5} for s in range(11, 21)]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "failures.jsonl").write_text(json.dumps(
        {"rank": 2, "exit": "hung", "hang": message, "dumps": str(dumps), "restart": 1}) + "\n")
    html = build_report(tmp_path).read_text()
    assert "<h2>Hangs</h2>" in html and "<td>2</td><td>h</td>" in html
    link = '(<a href="../logs/hang/attempt0_20260101-000000/">attempt0_20260101-000000</a>)'
    assert html.count(link) == 2  # in the Hangs section and as the restart's cause
    assert f"hang: {message}" in html and "<th>hangs</th><td>1</td>" in html
