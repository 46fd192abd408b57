"""`bessemer demo`: the whole path on a laptop CPU — corpus, curation, tokenizer, token shards, training,
report."""

import shutil
import time
from pathlib import Path

from bessemer.config import load_config
from bessemer.errors import BessemerError

REPO = Path(__file__).resolve().parents[2]
DEMO_CONFIG = REPO / "configs" / "demo.toml"
MARKER = ".bessemer-demo"
HELDOUT = 0.1  # share of the curated documents kept out of training for the held-out loss ([eval])


def _fresh_dir(run_dir: Path) -> None:
    """The demo owns its directory: it clears one it made before, and refuses to touch anything else."""
    if run_dir.exists() and any(run_dir.iterdir()):
        if not (run_dir / MARKER).is_file():
            raise BessemerError(f"{run_dir} exists and was not made by the demo; choose another --run-dir")
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    (run_dir / MARKER).write_text("made by bessemer demo; rerunning the demo replaces this directory\n")


def benchmark_hits(step: dict) -> str:
    """The decontaminate step's line: documents hit per benchmark, dropped or cut, against the items planted."""
    from bessemer.demo.planted import benchmark_passages

    extra = step["extra"]
    found = [f"{name} {hits['docs']} documents ({step['rejected'].get(f'decontaminate.{name}', 0)} dropped, "
             f"{extra.get('cut', {}).get(f'decontaminate.{name}', 0)} cut)"
             for name, hits in extra["benchmarks"].items()]
    return f"benchmark items found: {', '.join(found)}; {len(benchmark_passages())} planted"


def run_demo(run_dir: str | Path, overrides: list[str] = ()) -> Path:
    from bessemer.demo.corpus import build_raw_corpus, build_token_data, curate, read_curated
    from bessemer.train.launch import train
    from bessemer.report.run_report import build_report, read_metrics, summarize

    if not DEMO_CONFIG.is_file():
        raise BessemerError(f"the demo runs from a source checkout: {DEMO_CONFIG} not found")
    run_dir = Path(run_dir)
    for item in overrides:
        if item.removeprefix("--").split("=")[0] in ("run.dir", "data.path"):
            raise BessemerError(f"the demo sets run.dir and data.path itself; use --run-dir instead of {item}")
    cfg = load_config(DEMO_CONFIG, [f"--run.dir={run_dir}", *overrides])
    _fresh_dir(run_dir)

    t0 = time.perf_counter()
    print("[1/4] curate: raw corpus (Python's own docs and sources + Chinese prose, with planted duplicates, "
          "PII, junk, JavaScript-only pages and benchmark items) -> url -> extract -> lang -> normalize -> "
          "decontaminate -> quality -> pii -> dedup", flush=True)
    stats = curate(build_raw_corpus(run_dir / "data" / "raw", seed=cfg.run.seed), run_dir / "curated")
    for st in stats["steps"]:
        reasons = ", ".join(f"{r} {n}" for r, n in sorted(st["rejected"].items()))
        print(f"      {st['name']:<13} {st['docs_in']:>5} in -> {st['docs_out']:>5} out"
              + (f"  (rejected: {reasons})" if reasons else ""), flush=True)
        if st["name"] == "decontaminate":
            print(f"      {'':<13} {benchmark_hits(st)}", flush=True)
    print(f"      {stats['docs_in']} in = {stats['docs_out']} kept + {stats['docs_rejected']} rejected, "
          f"in {time.perf_counter() - t0:.1f} s: {run_dir / 'curated'}", flush=True)

    t1 = time.perf_counter()
    vocab = cfg.model.vocab_size or 8192
    print(f"[2/4] curated documents -> byte-level BPE ({vocab} tokens) -> token shards", flush=True)
    shards = build_token_data(run_dir / "data", vocab, seed=cfg.run.seed, docs=read_curated(run_dir / "curated"),
                              heldout=HELDOUT)
    cfg.data.path = str(shards)
    print(f"      done in {time.perf_counter() - t1:.1f} s: {shards} ({HELDOUT:.0%} of the documents held out in "
          f"{shards / 'heldout'})", flush=True)

    nproc = cfg.parallel.world_size
    print(f"[3/4] training model '{cfg.model.name}' for {cfg.train.steps} steps on {nproc} process(es)", flush=True)
    code = train(cfg, str(DEMO_CONFIG), [f"--run.dir={run_dir}", f"--data.path={shards}", *overrides], nproc,
                 resume=False, max_restarts=1)  # recovers from the failure the demo injects ([fault])
    if code:
        raise BessemerError(f"training on {nproc} processes stopped with exit status {code}; each rank's output is in "
                            f"{run_dir / 'logs'}")

    print("[4/4] report", flush=True)
    report = build_report(run_dir)
    records, events = read_metrics(run_dir / "metrics.jsonl")
    s = summarize(records)
    print(f"loss {s['first_loss']:.3f} -> {s['final_loss']:.3f} over {s['steps']} steps, "
          f"{s['mean_tokens_per_s']:,.0f} tokens/s; total {time.perf_counter() - t0:.0f} s")
    validations = [e for e in events if e["event"] == "validation"]
    if validations:
        first, last = validations[0], validations[-1]
        print("held-out loss per domain: " + ", ".join(
            f"{d} {first['val_loss'][d]:.3f} (step {first['step']}) -> {v:.3f} (step {last['step']})"
            if first is not last else f"{d} {v:.3f} (step {last['step']})"
            for d, v in last["val_loss"].items() if d in first["val_loss"]))
    print(f"report: {report}")
    return report
