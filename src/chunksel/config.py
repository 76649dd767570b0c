"""Roots and dataclass configs.

- :func:`data_root`: the read-only input root (the shared benchmark data). No default
  inside the library; the Makefile sets ``CHUNKSEL_DATA`` to ``../shared/data``.
- :func:`cache_root`: every generated artifact (embeddings, indexes, instances, features,
  models, reports). Default ``~/.cache/chunksel``.

Both take an explicit path; without one they use the process's
:func:`chunksel.settings.current` settings (the command line's, else the environment's).

Configs are dataclasses with ``to_dict``/``from_dict``; :func:`config_hash` gives the
short stable key under which a stage caches what it produced.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from chunksel.errors import DataError
from chunksel.settings import current

T = TypeVar("T")


def data_root(path: str | os.PathLike | None = None) -> Path:
    """The input data root: ``path``, else the settings' (``$CHUNKSEL_DATA``); it must exist."""
    raw = path if path is not None else current().data_root
    if not raw:
        raise DataError("no data root: set CHUNKSEL_DATA or pass --data-root")
    root = Path(raw).expanduser()
    if not root.is_dir():
        raise DataError(f"data root {str(root)!r} does not exist (CHUNKSEL_DATA)")
    return root


def cache_root(path: str | os.PathLike | None = None) -> Path:
    """The cache root: ``path``, else the settings' (``$CHUNKSEL_CACHE``), else ``~/.cache/chunksel``."""
    raw = path if path is not None else current().cache_dir
    root = Path(raw).expanduser() if raw else Path.home() / ".cache" / "chunksel"
    root.mkdir(parents=True, exist_ok=True)
    return root


def to_dict(cfg: Any) -> dict[str, Any]:
    """A JSON-ready dict of a dataclass config (nested dataclasses included)."""
    return dataclasses.asdict(cfg)


def from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """Build ``cls`` from ``data``, rejecting unknown keys with a clear error."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - names)
    if unknown:
        raise DataError(f"unknown {cls.__name__} settings: {', '.join(unknown)}")
    return cls(**data)


def stable_json(obj: Any) -> str:
    """Canonical JSON (sorted keys, no spaces) for hashing."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def config_hash(obj: Any, length: int = 12) -> str:
    """Short sha256 of a config (dataclass or JSON-ready object)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = to_dict(obj)
    return hashlib.sha256(stable_json(obj).encode()).hexdigest()[:length]


def file_checksum(path: str | os.PathLike, length: int = 16) -> str:
    """sha256 of a file's bytes (streamed), shortened; used to key caches on inputs."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:length]


def show_progress(flag: Any = True) -> bool:
    """Whether a progress bar shows: ``flag``, unless ``TQDM_DISABLE`` is set (what
    ``chunksel --quiet`` sets), which silences every bar, including those whose caller
    asked for one."""
    return bool(flag) and os.environ.get("TQDM_DISABLE", "").strip().lower() in ("", "0", "false", "no")


_QUIET_LOCK = threading.Lock()
_QUIET_DEPTH = 0
_QUIET_RESTORE = False


@contextlib.contextmanager
def quiet_loading(quiet: bool = True) -> Iterator[None]:
    """Hide transformers' and huggingface_hub's progress bars ("Loading weights") while a
    model loads inside a library call (``quiet``); a long CLI job passes ``quiet=False``
    and keeps them. Nested and threaded uses restore the setting once, after the last."""
    global _QUIET_DEPTH, _QUIET_RESTORE
    if not quiet:
        yield
        return
    try:
        from transformers.utils import logging as tf_logging
    except ImportError:  # nothing of transformers loads here, so nothing to hide
        yield
        return
    with _QUIET_LOCK:
        if _QUIET_DEPTH == 0:
            _QUIET_RESTORE = tf_logging.is_progress_bar_enabled()
            tf_logging.disable_progress_bar()
        _QUIET_DEPTH += 1
    try:
        yield
    finally:
        with _QUIET_LOCK:
            _QUIET_DEPTH -= 1
            if _QUIET_DEPTH == 0 and _QUIET_RESTORE:
                tf_logging.enable_progress_bar()


def json_default(obj: Any) -> Any:
    """``json.dumps(default=...)`` for numpy scalars and arrays, paths and tuples."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
