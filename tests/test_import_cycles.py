"""No import cycles between modules: the module graph of every package, read with `ast` (imports
inside functions included, since they run too), has no strongly connected component of more than
one module and no module importing itself."""
from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("device_model", "monitor", "exporters", "tui", "profiler")


def module_files(root: pathlib.Path, packages=PACKAGES) -> dict[str, tuple[pathlib.Path, bool]]:
    """Dotted module name -> (file, is a package's __init__)."""
    found = {}
    for pkg in packages:
        for f in sorted((root / pkg).rglob("*.py")):
            parts = list(f.relative_to(root).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            if is_pkg:
                parts = parts[:-1]
            found[".".join(parts)] = (f, is_pkg)
    return found


def _absolute(module: str, is_pkg: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    base = module.split(".")
    if not is_pkg:
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def import_graph(root: pathlib.Path, packages=PACKAGES) -> dict[str, set[str]]:
    """Module -> the modules of `packages` it imports. `from pkg import name` counts as an import
    of `pkg.name` when that is a module, else of `pkg`."""
    modules = module_files(root, packages)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, (path, is_pkg) in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(module, is_pkg, node.level, node.module)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                           for a in node.names]
            for target in targets:
                while target and target not in modules:     # `import a.b.C`-style tails
                    target = target.rpartition(".")[0]
                if target:
                    graph[module].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's import cycles: strongly connected components of two or more modules, and
    modules that import themselves (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
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
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph[node]:
                    found.append(sorted(component))
    return found


def test_no_import_cycles():
    assert cycles(import_graph(ROOT)) == []


def test_the_graph_sees_the_profilers_function_level_imports():
    graph = import_graph(ROOT)
    assert "profiler.capture.script_child" in graph["profiler.capture.torchrun_worker"]
    assert "profiler.model.fileformat" in graph["profiler.cli"]        # imported inside cmd_view


def _tree(tmp_path: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_a_cycle_through_a_function_level_relative_import_is_found(tmp_path):
    root = _tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from .sub import b\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/b.py": "def f():\n    from ..c import g\n",
        "pkg/c.py": "import pkg.a\n",
        "pkg/d.py": "from . import a\n",
    })
    assert cycles(import_graph(root, ("pkg",))) == [["pkg.a", "pkg.c", "pkg.sub.b"]]


def test_a_module_importing_itself_is_a_cycle_and_a_chain_is_not(tmp_path):
    root = _tree(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "from pkg import a\n",
                            "pkg/b.py": "from pkg.c import x\n", "pkg/c.py": "x = 1\n"})
    assert cycles(import_graph(root, ("pkg",))) == [["pkg.a"]]


def test_the_profiler_has_few_top_level_modules():
    top = [p for p in (ROOT / "profiler").glob("*.py")]
    assert len(top) <= 12, sorted(p.name for p in top)
