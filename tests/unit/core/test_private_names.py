"""Private names stay private: no ``_name`` imported from another package, and no
``obj._member`` reached on another module's objects. Source scans only (ast): numpy-only tier.

- **Imports.** ``from chunksel.a.m import _name`` (or a private module) inside package ``b``
  is refused: what one package needs of another is public. Sibling modules of one package
  may share private helpers.
- **Reach-ins.** ``x._member`` is refused where ``_member`` is a private member defined in
  another chunksel module (a method, an attribute set on an object, a class attribute) and
  not in this one: the module reaches into an object it does not own. ``self._x``,
  ``cls._x``, ``super()._x`` and dunder names are fine, and so are the private members of
  third-party objects (``argparse._SubParsersAction``), which no chunksel module defines.

Each exception is listed with why; a stale entry fails the test.
"""

from __future__ import annotations

import ast
from pathlib import Path

import chunksel

ROOT = Path(chunksel.__file__).resolve().parent

#: (importing module, imported name) -> why
PRIVATE_IMPORTS: dict[tuple[str, str], str] = {}
#: (module, member) -> why
REACH_INS: dict[tuple[str, str], str] = {}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_name(root: Path, path: Path) -> str:
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _trees(root: Path) -> dict[str, tuple[ast.Module, bool]]:
    """Each module's syntax tree, and whether it is a package's ``__init__``."""
    return {_module_name(root, p): (ast.parse(p.read_text(encoding="utf-8")), p.name == "__init__.py")
            for p in sorted(root.rglob("*.py"))}


def _resolve(module: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    base = node.module or ""
    if node.level:
        pkg = module.split(".") if is_pkg else module.split(".")[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join(pkg + ([base] if base else []))
    return base


def private_imports(root: Path) -> list[tuple[str, str]]:
    """``(importing module, imported name)`` for each private name or private module of
    package A imported in package B."""
    top = root.name
    out = []
    for module, (tree, is_pkg) in _trees(root).items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = _resolve(module, is_pkg, node)
                names = [f"{base}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if (name.split(".")[0] == top and any(_private(p) for p in name.split("."))
                        and _package(name) != _package(module)):
                    out.append((module, name))
    return sorted(set(out))


def _defined(tree: ast.Module) -> set[str]:
    """The private names a module defines: functions, classes, attributes it sets on
    objects, names it assigns (class attributes)."""
    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, (ast.Store, ast.Del)):
            out.add(n.attr)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
    return {x for x in out if _private(x)}


def _own(value: ast.expr) -> bool:
    """``self``, ``cls`` or ``super()``."""
    if isinstance(value, ast.Name):
        return value.id in ("self", "cls")
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super"


def reach_ins(root: Path) -> list[tuple[str, str, int, str]]:
    """``(module, member, line, expression)`` for each ``x._member`` on another module's object."""
    trees = {m: tree for m, (tree, _) in _trees(root).items()}
    defined = {m: _defined(t) for m, t in trees.items()}
    anywhere = set().union(*defined.values())
    out = []
    for module, tree in trees.items():
        for n in ast.walk(tree):
            if (isinstance(n, ast.Attribute) and _private(n.attr) and not _own(n.value)
                    and n.attr in anywhere and n.attr not in defined[module]):
                out.append((module, n.attr, n.lineno, ast.unparse(n)))
    return sorted(out)


def test_no_private_name_is_imported_from_another_package():
    found = private_imports(ROOT)
    bad = [f"{m} imports {name}" for m, name in found if (m, name) not in PRIVATE_IMPORTS]
    assert not bad, "private names imported across packages (make them public or move them): " + "; ".join(bad)
    stale = [key for key in PRIVATE_IMPORTS if key not in found]
    assert not stale, f"drop these from PRIVATE_IMPORTS (the import is gone): {stale}"


def test_no_module_reaches_into_another_modules_objects():
    found = reach_ins(ROOT)
    bad = [f"{m}:{line} {expr}" for m, member, line, expr in found if (m, member) not in REACH_INS]
    assert not bad, "private members reached from another module (give the owner a public method): " + "; ".join(bad)
    stale = [key for key in REACH_INS if key not in {(m, member) for m, member, _, _ in found}]
    assert not stale, f"drop these from REACH_INS (the access is gone): {stale}"


def test_the_checker_flags_planted_violations(tmp_path):
    pkg = tmp_path / "chunksel"
    for folder in ("a", "b"):
        (pkg / folder).mkdir(parents=True)
        (pkg / folder / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "owner.py").write_text(
        "def _helper():\n    return 1\n\n\n"
        "class Owner:\n    _limit = 3\n\n    def __init__(self):\n        self._state = {}\n\n"
        "    def _rows(self):\n        return self._state, self.__class__, cls_free(self)\n\n\n"
        "def cls_free(o):\n    return o\n"
    )
    (pkg / "a" / "sibling.py").write_text(  # same package: a shared private helper is fine
        "from chunksel.a.owner import _helper\n"
    )
    (pkg / "b" / "user.py").write_text(
        "import argparse\n\nfrom chunksel.a.owner import Owner, _helper\n\n\n"
        "def use(o: Owner):\n"
        "    from ..a import owner\n"
        "    return o._rows(), o._state, Owner._limit, owner._helper, _helper(), argparse._SubParsersAction\n\n\n"
        "class Sub(Owner):\n    def rows(self):\n        return super()._rows(), self._state, self.__dict__\n"
    )
    assert private_imports(pkg) == [("chunksel.b.user", "chunksel.a.owner._helper")]
    got = {(m, member, expr) for m, member, _, expr in reach_ins(pkg)}
    assert got == {
        ("chunksel.b.user", "_rows", "o._rows"),
        ("chunksel.b.user", "_state", "o._state"),
        ("chunksel.b.user", "_limit", "Owner._limit"),
        ("chunksel.b.user", "_helper", "owner._helper"),
    }
