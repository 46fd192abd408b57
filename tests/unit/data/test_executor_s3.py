"""A pipeline whose input, output, exclusion sink and work dirs are all on S3 (moto's server on loopback): extract,
normalize, quality, pii and dedup end to end through `bessemer data run`; a run killed with SIGKILL in the middle
of dedup resumes to the same files as an uninterrupted run."""

import json
import os
import random
import subprocess
import sys
import textwrap
import uuid

import pytest

pytestmark = pytest.mark.slow

SENTENCES = [
    "The quick brown fox jumps over the lazy dog and then runs down to the river with the other animals.",
    "It is a sunny day, and the fox is happy to be out in the open field with the birds that sing.",
    "Later that afternoon the farmer walks along the fence to check on his sheep and his old horse.",
    "He notices that the gate has been left open, so he closes it before the cows can wander off.",
    "In the evening the family gathers for dinner and talks about the weather and the coming harvest.",
    "The children want to know whether they may visit the town market with their cousins next week.",
    "Their grandmother tells them a story about the winter when the river froze from bank to bank.",
    "Nobody in the village had ever seen so much snow, and the school stayed closed for a whole month.",
    "The baker kept his oven burning day and night so that every house would have fresh bread to eat.",
    "When spring finally came, the ice broke up with a sound like thunder that echoed through the hills.",
    "The old mill by the water was repaired that summer by a group of young carpenters from the city.",
    "They worked from sunrise to sunset and slept in tents on the meadow behind the little church.",
    "On Sundays the whole valley would walk to the lake, where the children learned how to swim.",
    "A teacher from the next town came every week to help the older students with their reading.",
    "She brought books about faraway countries, about mountains, deserts and the wide blue ocean.",
    "Many of the students later said that those afternoons were the happiest hours of their youth.",
]
N_FILES, PER_FILE = 3, 4


def pages() -> dict[str, bytes]:
    """JSONL files of HTML pages (metadata format = html, for extract): readable English that passes the quality
    filters, an address for pii, one exact copy in another file for dedup, one page with no text for extract."""
    rnd = random.Random(0)
    html = []
    for i in range(N_FILES * PER_FILE):
        body = " ".join(rnd.sample(SENTENCES, 9))
        html.append(f"<html><head><title>Page {i}</title></head><body><nav>Home | About | Contact</nav><article>"
                    f"<h1>Story number {i}</h1><p>{body}</p><p>Write to reader{i}@example.com for more.</p>"
                    "</article><footer>Copyright 2024</footer></body></html>")
    html[5] = html[0]
    html[10] = "<html><body><nav>Home</nav></body></html>"
    files = {}
    for f in range(N_FILES):
        rows = [json.dumps({"id": f"p{f}-{k}", "text": html[f * PER_FILE + k], "format": "html"})
                for k in range(PER_FILE)]
        files[f"raw/f{f}.jsonl"] = ("\n".join(rows) + "\n").encode()
    return files


def pipeline_toml(path, src: str, out: str) -> None:
    path.write_text(textwrap.dedent(f"""
        [input]
        paths = ["{src}"]
        [[steps]]
        name = "extract"
        [[steps]]
        name = "normalize"
        [[steps]]
        name = "quality"
        [[steps]]
        name = "pii"
        [[steps]]
        name = "dedup"
        [executor]
        shards = {N_FILES}
        [output]
        dir = "{out}"
        format = "jsonl.zst"
    """))


# Runs `bessemer data run` with one fault: once the second dedup stage has finished its first job (so at least
# one dedup marker is on S3), the process SIGKILLs itself, as a lost node would die.
KILL_MID_DEDUP = textwrap.dedent("""
    import os, signal, sys
    from bessemer.data import runner
    from bessemer.cli import main

    real, maps = runner.LocalRunner.map, []

    def map_then_die(self, fn, jobs, *args, **kwargs):
        if fn.__module__.startswith("bessemer.data.dedup") and len(jobs) > 1:
            maps.append(fn)
            if len(maps) == 2:
                real(self, fn, jobs[:1], *args, **kwargs)
                os.kill(os.getpid(), signal.SIGKILL)
        return real(self, fn, jobs, *args, **kwargs)

    runner.LocalRunner.map = map_then_die
    sys.exit(main(sys.argv[1:]))
""")


@pytest.fixture
def s3(s3_endpoint, tmp_path):
    """(a fresh s3:// prefix, an s3fs filesystem, the environment of a `bessemer` process that reaches it)."""
    s3fs = pytest.importorskip("s3fs")
    url, options = s3_endpoint
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and "proxy" not in k.lower()}
    env.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="eu-west-1",
               AWS_ENDPOINT_URL=options["endpoint_url"], PYTHONPATH=os.pathsep.join(
                   [str(tmp_path.cwd()), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return f"{url}/{uuid.uuid4().hex[:8]}", s3fs.S3FileSystem(**options), env


def bessemer(env, cwd, *args, code: str | None = None) -> subprocess.CompletedProcess:
    head = ["-c", code] if code else ["-m", "bessemer.cli"]
    return subprocess.run([sys.executable, *head, *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=300, check=False)


def outputs(fs, out: str) -> dict[str, bytes]:
    """Every shard file (final, rejected, intermediate) by its path under `out`; stats files hold timings."""
    root = out.removeprefix("s3://")
    return {p[len(root) + 1:]: fs.cat_file(p) for p in sorted(fs.find(root)) if p.endswith(".jsonl.zst")}


def counts(stats: dict) -> list[dict]:
    return [{k: v for k, v in st.items() if k != "seconds"} for st in stats["steps"]]


def test_s3_pipeline_killed_mid_dedup_resumes_to_the_same_output(s3, tmp_path):
    prefix, fs, env = s3
    for name, data in pages().items():
        fs.pipe_file(f"{prefix}/{name}".removeprefix("s3://"), data)
    # cwd = tmp_path: a path mistaken for a local one would land there, not in the repository
    whole, killed = tmp_path / "whole.toml", tmp_path / "killed.toml"
    pipeline_toml(whole, f"{prefix}/raw", f"{prefix}/whole")
    pipeline_toml(killed, f"{prefix}/raw", f"{prefix}/killed")

    run = bessemer(env, tmp_path, "data", "run", str(whole), "--no-report")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    stats = json.loads(fs.cat_file(f"{prefix}/whole/stats.json".removeprefix("s3://")))
    assert stats["complete"] and stats["conserved"] and stats["docs_in"] == N_FILES * PER_FILE
    assert [s["name"] for s in stats["steps"]] == ["input", "extract", "normalize", "quality", "pii", "dedup"]
    assert stats["rejected"]["dedup.exact_duplicate"] == 1 and stats["rejected"]["extract.empty"] == 1
    assert not any(p.startswith(("s3:", "bessemer-test")) for p in os.listdir(tmp_path))

    dead = bessemer(env, tmp_path, "data", "run", str(killed), "--no-report", code=KILL_MID_DEDUP)
    assert dead.returncode == -9, dead.stdout[-3000:] + dead.stderr[-3000:]
    phases = f"{prefix}/killed/_phases".removeprefix("s3://")
    left = [p for p in fs.find(phases)]
    assert any(p.endswith("/0/stats/part-00000.json") for p in left)  # the stage before dedup finished
    assert not fs.exists(f"{phases}/1/stats.json")  # dedup did not
    assert any(p.startswith(f"{phases}/1/") and not p.endswith(".jsonl.zst") for p in left)  # ... but began
    assert not fs.exists(f"{prefix}/killed/stats.json".removeprefix("s3://"))

    resumed = bessemer(env, tmp_path, "data", "run", str(killed))
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert outputs(fs, f"{prefix}/killed") == outputs(fs, f"{prefix}/whole")
    assert any(k.startswith("rejected/") for k in outputs(fs, f"{prefix}/whole"))
    shown = bessemer(env, tmp_path, "data", "stats", f"{prefix}/killed", "--json")
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert counts(json.loads(shown.stdout)) == counts(stats)
    assert fs.exists(f"{prefix}/killed/report/index.html".removeprefix("s3://"))  # built locally, uploaded
    assert "testing" not in resumed.stdout + resumed.stderr  # credentials are never printed
