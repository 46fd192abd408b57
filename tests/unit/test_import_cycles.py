"""The import structure of bessemer, counting every import: top-level, function-level and TYPE_CHECKING.

- No import cycles between modules: each module's imports are read from its source (ast), resolved to bessemer
  modules, and the graph's strongly connected components are computed; any component of more than one module
  is a cycle, printed as a path.
- The package order (docs/architecture.md, "Package order"): the top-level packages and modules of bessemer in
  layers, bottom first; a module may import only from its own package or from a lower layer, and packages of
  one layer do not import each other. An import against the order fails with the importing module, the import
  and both layers.
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


# Bottom first. Each entry is a layer: the top-level packages (or modules) of bessemer it holds.
LAYERS: list[tuple[str, ...]] = [
    ("bessemer", "errors", "proc"),  # the version; user-facing errors; torch-free process helpers (rank logs)
    ("hangs",),  # the hang watchdog's verdict rules and its dump files read back (no torch)
    ("failures",),  # the rank logs read back: one story per failure (no torch)
    ("dtensor", "rng"),  # torch-level helpers: this rank's part of a DTensor; every generator of the process
    ("model",),  # the registry of shapes (no torch) and the model as plain modules; knows no config
    ("config",),  # one dataclass per TOML section, with the rules and arithmetic its validation needs (no torch)
    ("benchmarks",),  # benchmark task files (TOML over JSONL) read and rendered: eval scores them, data decontaminates
    ("report",),  # HTML reports read from a run's or a curation's files (no torch)
    ("data",),  # curation (no torch)
    ("tokens",),  # token shards, their seeded order, and the loaders (plain and domain mixture) that read them
    ("tokenizer",),  # tokenizer training and encoding into token shards (no torch)
    ("precision",),  # numerics: dtype policies, loss scaling, FP8, guards
    ("parallel",),  # the mesh, the one model-build recipe, TP, FSDP, pipelining, recompute, compile
    ("checkpoint",),  # tiers, saves, loads, Hugging Face import/export, `bessemer ckpt`
    ("eval",),  # log-likelihood scoring as lm-eval-harness does it, `bessemer eval`
    ("plan",),  # cluster sizing (no torch)
    ("doctor",),  # host and runtime checks, telemetry (no torch in the host checks)
    ("train",),  # the trainer, its step and builders, the launcher and its supervisor
    ("demo",),  # the end-to-end demo
    ("cli",),  # the `bessemer` command
]
LAYER = {package: i for i, layer in enumerate(LAYERS) for package in layer}


def package_of(module: str) -> str:
    """bessemer.parallel.build -> parallel; bessemer.cli -> cli; bessemer -> bessemer."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def order_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import from a package to one at its own layer or above (other than itself), and every package the
    order does not place, as readable lines."""
    out = []
    for name in sorted(graph):
        a = package_of(name)
        if a not in LAYER:
            out.append(f"{name}: package {a!r} is not in LAYERS (place it in the order)")
            continue
        for target in sorted(graph[name]):
            b = package_of(target)
            if b == a:
                continue
            if b not in LAYER:
                out.append(f"{name} imports {target}: package {b!r} is not in LAYERS (place it in the order)")
            elif LAYER[b] >= LAYER[a]:
                out.append(f"{name} imports {target}: {b} (layer {LAYER[b]}) is not below {a} (layer {LAYER[a]})")
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


def test_package_order():
    known = modules()
    graph = {name: imports_of(path, name, known) for name, path in known.items()}
    found = order_violations(graph)
    assert not found, "imports against the package order (tests/unit/test_import_cycles.py LAYERS):\n" + \
        "\n".join(found)


def unresolved(path: Path, known: dict[str, Path]) -> list[str]:
    """The bessemer modules `path` imports (anywhere in it) that do not exist, e.g. after a move."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        else:
            continue
        out += [n for n in names if n.startswith("bessemer.") and n not in known]
    return out


def test_every_bessemer_import_names_a_module_that_exists():
    known = modules()
    missing = {name: bad for name, path in known.items() if (bad := unresolved(path, known))}
    assert not missing, f"imports of modules that do not exist: {missing}"


def test_the_order_check_can_fail(tmp_path):
    """An import against the order is found, also when it sits inside a function; one downward is not."""
    source = tmp_path / "builders.py"
    source.write_text("import torch\n\ndef f():\n    from bessemer.train.trainer import Trainer\n")
    known = {"bessemer.train.trainer": source, "bessemer.parallel.build": source, "bessemer.model.llama": source}
    upward = {"bessemer.parallel.build": imports_of(source, "bessemer.parallel.build", known)}
    assert order_violations(upward) == ["bessemer.parallel.build imports bessemer.train.trainer: train (layer "
                                        f"{LAYER['train']}) is not below parallel (layer {LAYER['parallel']})"]
    assert order_violations({"bessemer.parallel.build": {"bessemer.model.llama"}}) == []
    peers = order_violations({"bessemer.errors": {"bessemer.proc"}})  # one layer: no imports between them
    assert peers and "is not below" in peers[0]
    assert "not in LAYERS" in order_violations({"bessemer.newroom.x": set()})[0]


def test_the_walker_sees_function_level_imports(tmp_path):
    """The check can fail: a cycle through a function-level import is found."""
    graph = {"bessemer.a": {"bessemer.b"}, "bessemer.b": {"bessemer.a"}, "bessemer.c": set()}
    assert cycles(graph) == [["bessemer.a", "bessemer.b"]]
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from bessemer.cli import main\n")
    assert imports_of(source, "bessemer.x", {"bessemer.cli": source, "bessemer.x": source}) == {"bessemer.cli"}
