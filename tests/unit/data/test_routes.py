"""Routing: documents the lang step gives a `metadata.route` are written to `<dir>/<route>/part-<shard>` by the final
stage (also after a global step), the rest to `<dir>/part-<shard>`; counts land in stats.json; `output.routes =
false` writes everything to `<dir>`; bad route names are refused with the document named."""

import json

import pytest
import zstandard

from bessemer.data.document import Document
from bessemer.data.phases import run_pipeline
from bessemer.data.pipeline_toml import Pipeline
from bessemer.data.writers import RoutedWriter, route_problem
from bessemer.errors import ConfigError

EN = ["The committee met on Tuesday to discuss the annual budget and the new library building plans.",
      "Rainfall this spring was well above the average, and farmers expect a good harvest of wheat.",
      "She walked along the river every morning before work, watching the boats go past the old mill.",
      "The museum reopened after a long renovation with a new wing dedicated to modern sculpture."]
ZH = ["为了保护公民的合法权益，维护社会秩序，根据宪法，结合我国的实际情况，制定本法。",
      "今天的天气很好，我们一起去公园散步，看到了很多盛开的花朵和在湖边玩耍的孩子。",
      "这座城市的历史非常悠久，每年都有大量游客来参观古老的建筑和博物馆里的文物。",
      "学校图书馆新购置了一批图书，同学们可以在课余时间借阅自己喜欢的小说和科普读物。"]


def read_docs(path) -> list[dict]:
    raw = zstandard.ZstdDecompressor().stream_reader(open(path, "rb")).read()
    return [json.loads(line) for line in raw.decode().splitlines()]


def write_input(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for i in range(2):
        with open(src / f"f{i}.jsonl", "w") as f:
            for j, text in enumerate(EN[2 * i:2 * i + 2] + ZH[2 * i:2 * i + 2]):  # no near-duplicates
                f.write(json.dumps({"id": f"{i}-{j}", "text": text}, ensure_ascii=False) + "\n")
    return src


def pipeline(src, out, steps, **output) -> Pipeline:
    return Pipeline.from_dict({"input": {"paths": [str(src)]}, "steps": steps,
                               "executor": {"shards": 2}, "output": {"dir": str(out), **output}})


@pytest.mark.parametrize("with_dedup", [False, True])
def test_lang_routes_go_to_their_own_output(tmp_path, with_dedup):
    steps = [{"name": "lang", "routes": {"zh": "zh"}}]
    if with_dedup:  # a global step: the route is carried through the intermediate stage to the final one
        steps.append({"name": "dedup"})
    out = tmp_path / "out"
    stats = run_pipeline(pipeline(write_input(tmp_path), out, steps))
    assert stats["complete"] and stats["conserved"]
    assert stats["routes"] == {"zh": 4}
    main = [d for i in range(2) for d in read_docs(out / f"part-0000{i}.jsonl.zst")]
    routed = [d for i in range(2) for d in read_docs(out / "zh" / f"part-0000{i}.jsonl.zst")]
    assert {d["metadata"]["lang"] for d in main} == {"en"} and len(main) == 4
    assert {d["metadata"]["lang"] for d in routed} == {"zh"} and len(routed) == 4
    assert stats["docs_out"] == 8
    assert not list((out / "_phases").rglob("zh")) if with_dedup else True


def test_routes_off_writes_everything_to_the_main_output(tmp_path):
    out = tmp_path / "out"
    stats = run_pipeline(pipeline(write_input(tmp_path), out, [{"name": "lang", "routes": {"zh": "zh"}}],
                                  routes=False))
    assert "routes" not in stats and not (out / "zh").exists()
    assert sum(len(read_docs(out / f"part-0000{i}.jsonl.zst")) for i in range(2)) == 8


def test_bad_route_names_are_refused(tmp_path):
    for bad in ["", "../x", "a/b", "stats", "rejected", "part-00001.jsonl", 3]:
        assert route_problem(bad), bad
    assert route_problem("zh") is None and route_problem("en-US.v2") is None
    w = RoutedWriter(str(tmp_path), 0, "jsonl")
    with pytest.raises(ValueError, match="'d7'.*metadata.route.*not an output name"):
        with w:
            w.write(Document("d7", "text", {"route": "../escape"}))
    assert list(tmp_path.iterdir()) == []  # nothing committed, no .tmp left
    with pytest.raises(ConfigError, match=r"steps\[0\] \(lang\): routes.zh: 'stats' is reserved"):
        run_pipeline(pipeline(write_input(tmp_path), tmp_path / "o", [{"name": "lang", "routes": {"zh": "stats"}}]))
