"""Check and coerce a selector's constructor settings before anything heavy runs.

A setting's type comes from the constructor's annotation (``int``, ``float | None``,
``str | Sequence[str]``, ...), else from its default value. Two entry points:

- :func:`coerce_params` for values that are already JSON values (a saved
  ``config.json``): a name the constructor does not take, or a value of the wrong kind,
  is one error naming the setting and where it came from.
- ``text=True`` for ``--param KEY=VALUE`` strings: ``VALUE`` is read as JSON when it
  parses (``null``, ``1e-3``, ``["hs", "chunk"]``) and as plain text otherwise, then
  coerced to the setting's kind (``5`` for an ``int``, ``false`` for a ``bool``, ``0``
  kept as the text ``"0"`` for a ``str``).

This module never imports torch.
"""

from __future__ import annotations

import difflib
import inspect
import json
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from chunksel.errors import ChunkselError, ConfigError

_DESCRIBE = {
    "none": "null",
    "bool": "true or false",
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "seq_str": "a list of strings",
}
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def _kinds_of_hint(hint: Any) -> list[str]:
    """The value kinds an annotation allows, in its order; ``["any"]`` when unknown."""
    if hint is type(None):
        return ["none"]
    for typ, kind in ((bool, "bool"), (int, "int"), (float, "float"), (str, "str")):
        if hint is typ:
            return [kind]
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        out: list[str] = []
        for arg in typing.get_args(hint):
            out += [k for k in _kinds_of_hint(arg) if k not in out]
        return out
    if origin in (list, tuple, Sequence):
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        return ["seq_str"] if args and all(a is str for a in args) else ["any"]
    return ["any"]


def param_kinds(cls: type) -> dict[str, list[str]]:
    """``{setting: allowed kinds}`` of a selector class's constructor."""
    sig = inspect.signature(cls.__init__)
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # an annotation that does not resolve: fall back to defaults
        hints = {}
    out = {}
    for p in sig.parameters.values():
        if p.name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name in hints:
            kinds = _kinds_of_hint(hints[p.name])
        elif p.default is inspect.Parameter.empty or p.default is None:
            kinds = ["any"]
        else:
            kinds = _kinds_of_hint(type(p.default)) if not isinstance(p.default, (list, tuple)) else ["seq_str"]
        out[p.name] = kinds
    return out


def _coerce(value: Any, kinds: list[str]) -> tuple[bool, Any]:
    """(ok, value converted to the first kind that takes it)."""
    if "any" in kinds:
        return True, value
    if value is None:
        return ("none" in kinds), None
    for kind in kinds:
        if kind == "bool":
            if isinstance(value, bool):
                return True, value
            if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
                return True, value.strip().lower() in _TRUE
        elif kind == "int" and not isinstance(value, bool):
            if isinstance(value, int):
                return True, value
            if isinstance(value, float) and value.is_integer():
                return True, int(value)
            if isinstance(value, str):
                try:
                    return True, int(value.strip())
                except ValueError:
                    pass
        elif kind == "float" and not isinstance(value, bool):
            if isinstance(value, (int, float)):
                return True, float(value)
            if isinstance(value, str):
                try:
                    return True, float(value.strip())
                except ValueError:
                    pass
        elif kind == "str" and isinstance(value, str):
            return True, value
        elif kind == "seq_str" and isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return True, list(value)
    return False, value


def coerce_params(
    cls: type,
    params: Any,
    source: str,
    text: bool = False,
    error: type[ChunkselError] = ConfigError,
) -> dict[str, Any]:
    """Check ``params`` against ``cls``'s constructor and coerce each value to its kind.

    Args:
        cls: a selector class.
        params: ``{setting: value}``; with ``text=True`` the values are command-line
            strings (see the module docstring).
        source: where the settings come from, first in every message (``--param``, a
            config.json path).
        text: read string values as command-line text.
        error: the error class raised.

    Returns:
        The settings with coerced values.

    Raises:
        ``error``: ``params`` is not a mapping, names a setting the constructor does not
            take, or holds a value of the wrong kind; the message names the setting.
    """
    name = getattr(cls, "name", "") or cls.__name__
    if not isinstance(params, Mapping):
        raise error(f"{source}: the settings of selector {name!r} must be a JSON object, got {json.dumps(params)}")
    kinds = param_kinds(cls)
    out = {}
    for key, value in params.items():
        if key not in kinds:
            close = difflib.get_close_matches(str(key), list(kinds), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            known = ", ".join(kinds) or "none"
            raise error(f"{source}: unknown parameter {key!r} for selector {name!r}{hint}; known: {known}")
        allowed = kinds[key]
        ok, got = False, value
        if text and isinstance(value, str):
            raw = value
            if raw.strip().lower() in ("null", "none") and "none" in allowed:
                ok, got = True, None
            else:
                try:
                    parsed = json.loads(raw)
                except json.JSONDecodeError:
                    parsed = raw
                ok, got = _coerce(parsed, allowed)
                if not ok and parsed is not raw:
                    ok, got = _coerce(raw, allowed)  # e.g. device=0 for a str setting
        else:
            ok, got = _coerce(value, allowed)
        if not ok:
            want = " or ".join(_DESCRIBE.get(k, k) for k in allowed)
            raise error(f"{source}: parameter {key!r} of selector {name!r} expects {want}, got {value!r}")
        out[key] = got
    return out
