"""`bessemer ckpt list RUN_DIR`: the checkpoints of a run, tier by tier — no torch."""

import tomllib
from pathlib import Path

from bessemer.checkpoint.manifest import check, read_manifest
from bessemer.checkpoint.paths import node_local, read_commits, step_of, tier_dirs
from bessemer.config import CheckpointConfig, JobConfig, load_config


def run_checkpoint_config(run_dir: Path) -> CheckpointConfig:
    """The run's checkpoint section from its resolved config.toml (defaults when there is none)."""
    path = Path(run_dir) / "config.toml"
    if not path.is_file():
        return JobConfig().checkpoint
    try:
        return load_config(path).checkpoint
    except (tomllib.TOMLDecodeError, Exception):  # an older or edited config: fall back to the defaults
        return JobConfig().checkpoint


def list_checkpoints(run_dir: Path, verify: bool = True) -> list[dict]:
    """One row per checkpoint directory of each local tier (committed or not)."""
    rows = []
    cfg = run_checkpoint_config(run_dir)
    dirs = [(tier, directory) for tier, directory in tier_dirs(cfg, Path(run_dir)).items()]
    if node_local(cfg):  # every node's directory the commit record names (those visible from here are listed)
        named = {Path(d) for e in read_commits(cfg, Path(run_dir)) for d in e.get("dirs", {}).values()}
        dirs += [("micro", d) for d in sorted(named - {dirs[0][1]})]
    for tier, directory in dirs:
        if not directory.is_dir():
            continue
        for path in sorted(p for p in directory.iterdir() if p.is_dir() and p.name.startswith("step_")):
            size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
            row = {"tier": tier, "step": step_of(path), "path": str(path), "bytes": size}
            if path.name.endswith(".tmp"):
                row |= {"valid": False, "problem": "unfinished save (never committed)"}
            else:
                try:
                    manifest = read_manifest(path)
                    row |= {"layout": manifest.get("layout", ""), "files": len(manifest["files"])}
                    problems = check(path) if verify else []
                except ValueError as e:
                    problems = [str(e)]
                row |= {"valid": not problems, "problem": problems[0] if problems else ""}
            rows.append(row)
    return rows


def format_rows(rows: list[dict]) -> str:
    if not rows:
        return "no checkpoints"
    lines = [f"{'tier':<6} {'step':>8} {'size':>10}  {'valid':<5}  path / problem"]
    for r in rows:
        size = f"{r['bytes'] / 2**20:.1f} MiB"
        step = "?" if r["step"] is None else r["step"]
        lines.append(f"{r['tier']:<6} {step:>8} {size:>10}  {'yes' if r['valid'] else 'NO':<5}  {r['path']}"
                     + (f"  ({r['problem']})" if r["problem"] else ""))
    return "\n".join(lines)
