"""bessemer.data's layers, read from the source with the walker of tests/unit/test_import_cycles.py (function-level
and TYPE_CHECKING imports count; that test also fails on any cycle): io at the bottom, the runner below the
executor, the executor below phases; Ray and torch never imported at module level (`bessemer data` starts fast)."""

import ast

from tests.unit.test_import_cycles import imports_of, modules

DATA = "bessemer.data"


def data_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: {m for m in imports_of(path, name, known) if m.startswith(DATA + ".")}
            for name, path in known.items() if name.startswith(DATA + ".")}


def test_io_runner_executor_phases_point_one_way():
    g = data_graph()
    assert g["bessemer.data.io"] == set()
    assert not g["bessemer.data.runner"] & {"bessemer.data.executor", "bessemer.data.phases", "bessemer.data.io"}
    assert not g["bessemer.data.executor"] & {"bessemer.data.phases", "bessemer.data.runner"}
    assert {"bessemer.data.executor", "bessemer.data.runner", "bessemer.data.io"} <= g["bessemer.data.phases"]
    assert "bessemer.data.ray_executor" not in g  # the runner's Ray implementation replaced it


def test_ray_and_torch_are_not_imported_at_module_level():
    bad = {}
    for name, path in modules().items():
        if not name.startswith(DATA + "."):
            continue
        top = set()
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Import):
                top |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                top.add(node.module.split(".")[0])
        if top & {"ray", "torch"}:
            bad[name] = sorted(top & {"ray", "torch"})
    assert not bad, bad
