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

:func:`check_ranges` then checks each numeric setting's range (:data:`RANGES`, by setting
name, with per-selector overrides in :data:`SELECTOR_RANGES`); every selector runs it at
construction (``Selector.__init_subclass__``), so ``max_epochs=-5`` or ``lr=nan`` fails
before any data loads or any training starts.

This module never imports torch.
"""

from __future__ import annotations

import difflib
import inspect
import json
import math
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Range:
    """An allowed interval of a numeric setting (``None`` = unbounded; ``integer``: a
    whole number is required)."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False

    def describe(self) -> str:
        kind = "a whole number" if self.integer else "a finite number"
        if self.lo is not None and self.hi is not None:
            return f"{kind} in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}{')' if self.hi_open else ']'}"
        if self.lo is not None:
            return f"{kind} {'>' if self.lo_open else '>='} {self.lo:g}"
        if self.hi is not None:
            return f"{kind} {'<' if self.hi_open else '<='} {self.hi:g}"
        return kind

    def ok(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if not math.isfinite(value) or (self.integer and not float(value).is_integer()):
            return False
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            return False
        return not (self.hi is not None and (value >= self.hi if self.hi_open else value > self.hi))


_COUNT = Range(1, integer=True)
_ZERO_OR_MORE = Range(0, integer=True)
_POSITIVE = Range(0, lo_open=True)
_NON_NEGATIVE = Range(0)
_UNIT = Range(0, 1)

#: ranges by setting name, shared by every selector that takes the setting
RANGES: dict[str, Range] = {
    **{n: _COUNT for n in (
        "k", "select_k", "batch_size", "max_epochs", "patience", "hidden", "depth", "phi_hidden", "phi_depth",
        "members", "n_estimators", "min_child_samples", "early_stopping_rounds", "max_iter", "max_query_len",
        "max_doc_len", "embedding_dim", "n_kernels", "n_bins", "n_filters", "update_epochs", "value_hidden",
        "max_questions", "max_new_tokens", "window", "step", "max_passage_words", "epochs", "max_length")},
    **{n: _ZERO_OR_MORE for n in ("seed", "warmup_epochs", "ppo_epochs", "carry", "negatives")},
    **{n: _POSITIVE for n in ("lr", "learning_rate", "warmup_lr", "value_lr", "tau", "C")},
    **{n: _NON_NEGATIVE for n in ("weight_decay", "k1", "entropy_coef", "value_coef")},
    **{n: _UNIT for n in ("b", "gamma", "gae_lambda", "alpha")},
    "dropout": Range(0, 1, hi_open=True),
    "num_leaves": Range(2, integer=True),
    "ltr_folds": Range(2, integer=True),
    "budget": Range(0, 100, lo_open=True),
    "clip_eps": Range(0, 1, lo_open=True, hi_open=True),
    "curriculum_start": Range(0, 1, lo_open=True),
    "curriculum_ramp": Range(0, 1, lo_open=True),
}
#: per-selector overrides of :data:`RANGES`
SELECTOR_RANGES: dict[str, dict[str, Range]] = {
    "crossencoder": {"layers": Range(1, 6, integer=True)},  # MiniLM-L6's layers kept
}


def check_ranges(name: str, values: Mapping[str, Any], error: type[ChunkselError] = ConfigError) -> None:
    """Check the numeric settings in ``values`` (``None`` = the selector's default).

    Raises:
        ``error``: the first setting out of its range, naming it, the range and the value.
    """
    ranges = {**RANGES, **SELECTOR_RANGES.get(name, {})}
    for key, value in values.items():
        rng = ranges.get(key)
        if rng is None or value is None or rng.ok(value):
            continue
        raise error(f"parameter {key!r} of selector {name!r} must be {rng.describe()}, got {value!r}")
