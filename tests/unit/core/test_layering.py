"""The package's import graph: no cycles, no arrow from a lower layer to a higher one, and
no two packages that import each other.

Every ``import`` / ``from ... import`` of a ``chunksel`` module counts, also those inside
functions (a lazy import still ties the two modules together). Layers, lowest first; a
module may import its own layer or a lower one:

    types, config, errors, settings, threads  <-  data, nn, pretrained  <-  retrieval, labels, llm, features, export
    <-  training, selectors, bulk  <-  eval, build, pipeline  <-  study  <-  cli

``pretrained`` (the names and folder of the shipped models; their recipe is
``study/pretrain.py``) sits beside ``data``. ``export`` (every ONNX graph) sits right above ``nn``, not beside ``pipeline``: the
prototype selector's ``onnxruntime`` engine runs the exported graph. ``study`` (the
benchmark study) is above everything it measures; ``cli`` is on top.

Packages of one layer may import each other, but one way only: two packages where each
imports the other somewhere (a two-way tie, lazy imports included) fail, even when the
module graph has no cycle. Today's arrows inside the layer above ``nn``: ``features`` ->
``llm`` (the prompts; answer generation lives in ``features/generation.py``, beside the
decoding loop it drives) and ``retrieval`` -> ``export`` (``export_encoder`` takes a model
folder, not the retriever's encoder).
"""

from __future__ import annotations

import ast
from pathlib import Path

import chunksel

ROOT = Path(chunksel.__file__).resolve().parent
LAYERS: list[set[str]] = [
    {"types", "config", "errors", "settings", "threads", "__init__"},
    {"data", "nn", "pretrained"},
    {"retrieval", "labels", "llm", "features", "export"},
    {"training", "selectors", "bulk"},
    {"eval", "build", "pipeline"},
    {"study"},
    {"cli", "__main__"},
]

#: module imports left out of the two-way-tie check, each with why; an entry goes once its
#: import does (a stale entry fails the test)
TIE_EXCEPTIONS: dict[tuple[str, str], str] = {}


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


def _package(module: str) -> str:
    return module.split(".")[1] if "." in module else "__init__"


def _ties(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """Package pairs ``(a, b)``, ``a < b``, where each imports the other: the imports behind
    both directions. ``chunksel`` itself and :data:`TIE_EXCEPTIONS` do not count."""
    edges: dict[tuple[str, str], list[str]] = {}
    for module, deps in graph.items():
        for dep in deps:
            a, b = _package(module), _package(dep)
            if dep != "chunksel" and a != b and (module, dep) not in TIE_EXCEPTIONS:
                edges.setdefault((a, b), []).append(f"{module} -> {dep}")
    return {(a, b): sorted(why + edges[(b, a)]) for (a, b), why in edges.items() if a < b and (b, a) in edges}


def test_no_two_way_ties_between_packages():
    ties = _ties(_graph())
    assert not ties, "packages importing each other: " + "; ".join(
        f"{a} <-> {b} ({', '.join(why)})" for (a, b), why in sorted(ties.items()))


def test_the_tie_exceptions_are_current():
    graph = _graph()
    stale = [f"{m} -> {d}" for m, d in TIE_EXCEPTIONS if d not in graph.get(m, set())]
    assert not stale, f"drop these from TIE_EXCEPTIONS (the import is gone): {stale}"


def test_the_checker_sees_a_two_way_tie():
    """A lazy import each way between two packages of one layer, no module cycle: refused."""
    graph = {"chunksel.llm.a": {"chunksel.features.b"}, "chunksel.features.b": set(),
             "chunksel.features.c": {"chunksel.llm.d"}, "chunksel.llm.d": {"chunksel.types"}, "chunksel.types": set()}
    assert not _cycles(graph)
    assert _ties(graph) == {("features", "llm"): ["chunksel.features.c -> chunksel.llm.d",
                                                  "chunksel.llm.a -> chunksel.features.b"]}
    del graph["chunksel.features.c"]
    assert _ties(graph) == {}
