"""The source tree's shape: modules stay under 500 lines, only the command line and the
settings object read ``CHUNKSEL_*`` environment variables, and the command line imports
nothing heavy until a command runs. Source scans only (ast): numpy-only tier."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import chunksel

ROOT = Path(chunksel.__file__).resolve().parent
LIMIT = 500

#: modules allowed at LIMIT lines or more, each with why; an entry goes once its module is
#: split (a stale entry fails the test)
LONG_MODULES: dict[str, str] = {}

#: where CHUNKSEL_* environment variables may be read: the command line and the settings
ENV_READERS = ("cli/", "settings.py")
#: other modules naming one, each with why (a stale entry fails the test)
ENV_EXCEPTIONS: dict[str, str] = {}
ENV_NAME = re.compile(r"CHUNKSEL_[A-Z0-9_]+")


def _modules() -> dict[str, Path]:
    return {p.relative_to(ROOT).as_posix(): p for p in sorted(ROOT.rglob("*.py"))}


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_every_module_is_under_500_lines():
    over = {rel: n for rel, p in _modules().items() if (n := _lines(p)) >= LIMIT and rel not in LONG_MODULES}
    assert not over, f"modules of {LIMIT}+ lines (split them): {over}"


def test_the_long_module_allow_list_is_current():
    mods = _modules()
    stale = [rel for rel in LONG_MODULES if rel not in mods or _lines(mods[rel]) < LIMIT]
    assert not stale, f"drop these from LONG_MODULES (gone or now under {LIMIT} lines): {stale}"


def _env_names(path: Path) -> set[str]:
    """``CHUNKSEL_*`` variable names used as values in a module (an ``os.environ`` key, a
    ``getenv`` argument, a constant naming one); prose in docstrings and messages does not
    count."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and ENV_NAME.fullmatch(n.value)}


def test_only_the_command_line_and_settings_read_chunksel_environment_variables():
    bad = {rel: sorted(names) for rel, p in _modules().items()
           if not rel.startswith(ENV_READERS) and rel not in ENV_EXCEPTIONS and (names := _env_names(p))}
    assert not bad, f"CHUNKSEL_* environment variables read outside cli/ and settings.py: {bad}"
    stale = [rel for rel in ENV_EXCEPTIONS if rel not in _modules() or not _env_names(_modules()[rel])]
    assert not stale, f"drop these from ENV_EXCEPTIONS: {stale}"


def test_the_scan_sees_an_environment_read(tmp_path):
    src = tmp_path / "m.py"
    src.write_text('"""Reads CHUNKSEL_DATA (prose)."""\nimport os\n\nKEY = "CHUNKSEL_X"\n'
                   'def f():\n    return os.environ.get("CHUNKSEL_CACHE"), os.getenv(KEY)\n')
    assert _env_names(src) == {"CHUNKSEL_CACHE", "CHUNKSEL_X"}


def test_threads_are_limited_in_one_place():
    """torch/FAISS/BLAS thread counts are set only by chunksel.threads."""
    setters = {"set_num_threads", "omp_set_num_threads", "threadpool_limits"}
    bad = {}
    for rel, p in _modules().items():
        if rel == "threads.py":
            continue
        tree = ast.parse(p.read_text(encoding="utf-8"))
        names = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        names |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        names |= {v for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(v := n.value, str)
                  and re.fullmatch(r"(OMP|MKL|OPENBLAS)_NUM_THREADS", v)}
        if hit := (names & setters) | {x for x in names if x.endswith("_NUM_THREADS")}:
            bad[rel] = sorted(hit)
    assert not bad, f"thread limits set outside chunksel/threads.py: {bad}"


def test_the_command_line_imports_nothing_heavy_until_a_command_runs():
    code = ("import sys\nfrom chunksel.cli import build_parser\nbuild_parser()\n"
            "heavy = ('torch', 'transformers', 'faiss', 'onnx', 'onnxruntime', 'sklearn', 'lightgbm', 'bm25s',"
            " 'scipy', 'fastapi', 'ray', 'sentence_transformers')\n"
            "print(','.join(m for m in heavy if sys.modules.get(m) is not None))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"imported by the parser alone: {out.stdout.strip()}"


def test_every_command_module_has_a_parser_and_a_run_function():
    """cli/__init__ only dispatches: each command lives in one module of chunksel.cli."""
    import argparse

    from chunksel.cli import MODULES, build_parser

    owned = [c for m in MODULES for c in m.COMMANDS]
    assert all(callable(m.add_parser) and callable(m.run) for m in MODULES)
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert sorted(owned) == sorted(sub.choices) and len(owned) == len(set(owned))
