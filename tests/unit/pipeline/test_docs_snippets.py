"""The LangChain and LlamaIndex examples of docs/serving.md and of the adapters' module
docstrings are self-contained: every name they use is imported or defined in them, and
each runs as it stands (with the extras installed) against a selector saved in
``models/anchored``. Every other Python block of serving.md defines the names it uses too."""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _docs_blocks() -> list[tuple[str, str]]:
    text = (ROOT / "docs" / "serving.md").read_text()
    section = text[text.index("## LangChain and LlamaIndex"):]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    return [(f"docs/serving.md block {i}", b) for i, b in enumerate(blocks)]


def _docstring_example(module: str) -> tuple[str, str]:
    path = ROOT / "src" / "chunksel" / "pipeline" / f"{module}.py"
    doc = ast.get_docstring(ast.parse(path.read_text()))
    body = doc.split("::\n\n", 1)[1]
    lines = []
    for line in body.splitlines():
        if line and not line.startswith("    "):
            break
        lines.append(line[4:])
    return f"pipeline/{module}.py docstring", "\n".join(lines)


SNIPPETS = [*_docs_blocks(), _docstring_example("langchain"), _docstring_example("llamaindex")]


def undefined_names(code: str) -> set[str]:
    """Names read by ``code`` that it neither imports nor assigns (builtins allowed)."""
    tree = ast.parse(code)
    bound, used = set(dir(builtins)), set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, ast.Store) else used).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return used - bound


def test_the_snippets_are_found():
    names = [name for name, _ in SNIPPETS]
    assert len(SNIPPETS) == 4, names
    kinds = [("langchain" in code, "llama_index" in code) for _, code in SNIPPETS]
    assert kinds == [(True, False), (False, True), (True, False), (False, True)], names


def _all_python_blocks() -> list[tuple[str, str]]:
    """Every ```python block of docs/serving.md (names only: some need a trained model)."""
    out = []
    for path in [ROOT / "docs" / "serving.md"]:
        for i, block in enumerate(re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)):
            out.append((f"docs/{path.name} block {i}", block))
    return out


@pytest.mark.parametrize(("where", "code"), SNIPPETS + _all_python_blocks(),
                         ids=[n for n, _ in SNIPPETS + _all_python_blocks()])
def test_every_name_a_snippet_uses_is_defined_in_it(where, code):
    assert undefined_names(code) == set(), f"{where} uses names it never defines"


def test_the_name_check_catches_an_undefined_name():
    assert undefined_names("best = compressor.compress_documents(retriever.invoke(q), q)") == {
        "compressor", "retriever", "q"}
    assert undefined_names("from x import y\nfor d in y(1):\n    print(d)") == set()


@pytest.mark.parametrize(("where", "code"), SNIPPETS, ids=[n for n, _ in SNIPPETS])
def test_each_snippet_runs_as_it_stands(where, code, tmp_path, monkeypatch):
    pytest.importorskip("langchain_core" if "langchain" in code else "llama_index.core")
    from chunksel.selectors import make_selector

    make_selector("retrieval").save(tmp_path / "models" / "anchored")  # the snippets' model folder
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, where, "exec"), {"__name__": "__snippet__"})
    printed = out.getvalue().splitlines()
    assert printed and len(printed) <= 2, printed  # k / top_n documents kept, best first
    if '"anchored-base"' in code:  # the shipped model: the evidence first, its P(evidence) as the score
        assert "Hamlet is a tragedy" in printed[0], printed
        assert 0.0 <= float(printed[0].split()[1 if "langchain" in code else 0]) <= 1.0, printed
    else:
        assert "1599" in printed[0]  # the retriever's first, under the retrieval-order selector
