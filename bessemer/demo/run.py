"""`bessemer demo`: the whole path on a laptop CPU — corpus, tokenizer, token shards, training, report."""

import shutil
import time
from pathlib import Path

from bessemer.config import load_config
from bessemer.errors import BessemerError

REPO = Path(__file__).resolve().parents[2]
DEMO_CONFIG = REPO / "configs" / "demo.toml"
MARKER = ".bessemer-demo"


def _fresh_dir(run_dir: Path) -> None:
    """The demo owns its directory: it clears one it made before, and refuses to touch anything else."""
    if run_dir.exists() and any(run_dir.iterdir()):
        if not (run_dir / MARKER).is_file():
            raise BessemerError(f"{run_dir} exists and was not made by the demo; choose another --run-dir")
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    (run_dir / MARKER).write_text("made by bessemer demo; rerunning the demo replaces this directory\n")


def run_demo(run_dir: str | Path, overrides: list[str] = ()) -> Path:
    from bessemer.demo.corpus import build_token_data
    from bessemer.parallel.launch import train
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
    vocab = cfg.model.vocab_size or 8192
    print(f"[1/3] corpus (Python's own docs and sources + Chinese prose) -> byte-level BPE ({vocab} tokens) "
          f"-> token shards", flush=True)
    shards = build_token_data(run_dir / "data", vocab, seed=cfg.run.seed)
    cfg.data.path = str(shards)
    print(f"      done in {time.perf_counter() - t0:.1f} s: {shards}", flush=True)

    nproc = cfg.parallel.world_size
    print(f"[2/3] training model '{cfg.model.name}' for {cfg.train.steps} steps on {nproc} process(es)", flush=True)
    code = train(cfg, str(DEMO_CONFIG), [f"--run.dir={run_dir}", f"--data.path={shards}", *overrides], nproc,
                 resume=False, max_restarts=1)  # recovers from the failure the demo injects ([fault])
    if code:
        raise BessemerError(f"training on {nproc} processes stopped with exit status {code}; see the output above")

    print("[3/3] report", flush=True)
    report = build_report(run_dir)
    s = summarize(read_metrics(run_dir / "metrics.jsonl")[0])
    print(f"loss {s['first_loss']:.3f} -> {s['final_loss']:.3f} over {s['steps']} steps, "
          f"{s['mean_tokens_per_s']:,.0f} tokens/s; total {time.perf_counter() - t0:.0f} s")
    print(f"report: {report}")
    return report
