"""The package's import graph: no cycles, and no arrow from a lower layer to a higher one.

Every ``import`` / ``from ... import`` of a ``chunksel`` module counts, also those inside
functions (a lazy import still ties the two modules together). Layers, lowest first; a
module may import its own layer or a lower one:

    types, config, errors, settings, threads  <-  data, nn  <-  retrieval, labels, llm, features, export
    <-  training, selectors, bulk  <-  eval, build, pipeline  <-  study  <-  cli

``export`` (every ONNX graph) sits right above ``nn``, not beside ``pipeline``: the
prototype selector's ``onnxruntime`` engine runs the exported graph. ``study`` (the
benchmark study) is above everything it measures; ``cli`` is on top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import chunksel

ROOT = Path(chunksel.__file__).resolve().parent
LAYERS: list[set[str]] = [
    {"types", "config", "errors", "settings", "threads", "__init__"},
    {"data", "nn"},
    {"retrieval", "labels", "llm", "features", "export"},
    {"training", "selectors", "bulk"},
    {"eval", "build", "pipeline"},
    {"study"},
    {"cli", "__main__"},
]


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = ["chunksel", *rel.parts]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _layer(module: str) -> int:
    top = module.split(".")[1] if "." in module else "__init__"
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    raise AssertionError(f"{module}: its package {top!r} has no layer in LAYERS")


def _imports(path: Path, module: str, modules: set[str]) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module.split(".") if is_pkg else module.split(".")[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        for t in targets:
            # the longest known module the name points at (a submodule, or its package)
            while t and t not in modules:
                t = t.rpartition(".")[0]
            if t and t.startswith("chunksel") and t != module:
                out.add(t)
    return out


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in ROOT.rglob("*.py")}
    modules = set(files)
    graph = {m: _imports(p, m, modules) for m, p in files.items()}
    # importing a submodule runs its package's __init__: ignore package -> own child edges
    return {m: {t for t in deps if not t.startswith(m + ".")} for m, deps in graph.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_no_upward_imports():
    bad = []
    for module, deps in _graph().items():
        for dep in deps:
            if dep != "chunksel" and _layer(dep) > _layer(module):
                bad.append(f"{module} -> {dep}")
    assert not bad, "imports from a lower layer to a higher one: " + ", ".join(sorted(bad))


def test_the_checker_sees_lazy_imports(tmp_path):
    """The walk counts imports inside functions (so it could fail on a hidden cycle)."""
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from chunksel.study.run import run_bench\n    return run_bench\n")
    assert _imports(src, "chunksel.types", {"chunksel.study.run", "chunksel.types"}) == {"chunksel.study.run"}
