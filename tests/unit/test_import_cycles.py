"""No import cycles anywhere in bessemer, counting every import: top-level, function-level and TYPE_CHECKING.

Each module's imports are read from its source (ast), resolved to bessemer modules, and the graph's strongly
connected components are computed; any component of more than one module (or a module importing itself) is a
cycle, printed as a path.
"""

import ast
from pathlib import Path

import bessemer

ROOT = Path(bessemer.__file__).parent


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in ROOT.rglob("*.py")}


def imports_of(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """The bessemer modules that `name` (at `path`) imports, wherever the import statement sits."""
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                pkg = name.split(".") if is_package else name.split(".")[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for target in targets:
            while target and target not in known:  # `import bessemer.a.b.c` of a name inside a module
                target = target.rpartition(".")[0]
            if target.startswith("bessemer") and target != name:
                out.add(target)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]

    def strongconnect(root: str) -> None:
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            strongconnect(node)
    return found


def test_no_import_cycles():
    known = modules()
    graph = {name: imports_of(path, name, known) for name, path in known.items()}
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_walker_sees_function_level_imports(tmp_path):
    """The check can fail: a cycle through a function-level import is found."""
    graph = {"bessemer.a": {"bessemer.b"}, "bessemer.b": {"bessemer.a"}, "bessemer.c": set()}
    assert cycles(graph) == [["bessemer.a", "bessemer.b"]]
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from bessemer.cli import main\n")
    assert imports_of(source, "bessemer.x", {"bessemer.cli": source, "bessemer.x": source}) == {"bessemer.cli"}
