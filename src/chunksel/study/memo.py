"""The study's result memo: every fit + evaluation is stored as JSON under
``<cache>/bench/<key>.json``, the key made of the selector's settings, its seed, the exact
train/val/test instances (ids, candidates, labels), the question features and a hash of
the package's code a study runs (all of it but the serving and bulk-job modules it never
imports, :data:`NOT_STUDY`), so a warm re-run reuses every trained result and any change
to that code retrains."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.config import json_default


def digest(obj: Any) -> str:
    import hashlib
    import json

    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:20]


#: the package's modules a study never imports (the server, the framework adapters, the
#: serving encoder and its export, the bulk jobs), left out of :func:`code_fingerprint` so
#: that work on them keeps a long study's memo; tests/integration/test_study.py checks that a
#: study (and a ``bench`` worker's command line) imports none of them
NOT_STUDY: tuple[str, ...] = (
    "bulk/", "pipeline/serve_", "pipeline/server.py", "pipeline/langchain.py", "pipeline/llamaindex.py",
    "pipeline/adapters.py", "export/encoder.py", "retrieval/onnx_encoder.py",
)


def study_sources() -> list[Path]:
    """The package's Python sources a study may run: all but :data:`NOT_STUDY`."""
    root = Path(__file__).resolve().parent.parent  # the chunksel package
    return [f for f in sorted(root.rglob("*.py"))
            if not f.relative_to(root).as_posix().startswith(NOT_STUDY)]


def code_fingerprint() -> str:
    """sha256 over the Python sources a study may run (:func:`study_sources`): a change to
    any of them invalidates the memo."""
    import hashlib

    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for f in study_sources():
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:20]


def instances_fingerprint(instances: Sequence[Any]) -> str:
    return digest([
        (i.id, i.split, i.label_source, [(c.id, sorted(c.labels.items())) for c in i.candidates])
        for i in instances
    ])


def features_fingerprint(features: Any, ids: Sequence[str]) -> str | None:
    """sha256 over the features of ``ids``."""
    if features is None:
        return None
    import hashlib

    h = hashlib.sha256()
    ids = sorted(set(ids))
    h.update("\n".join(ids).encode())
    if ids:
        for name, arr in sorted(features.lookup(ids).items()):
            h.update(name.encode())
            h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()[:20]


class Memo:
    """JSON results under ``<cache>/bench/<key>.json`` (off: never read, never written)."""

    def __init__(self, enabled: bool, base: dict[str, Any]) -> None:
        from chunksel.config import cache_root

        self.enabled = enabled
        self.base = base
        self.dir = cache_root() / "bench"
        self._written: set[str] = set()
        self._reused: set[str] = set()

    @property
    def hits(self) -> int:
        """Distinct results read back from an earlier run (not this run's own)."""
        return len(self._reused)

    def key(self, **parts: Any) -> str:
        return digest({**self.base, **parts})

    def get(self, key: str) -> Any:
        import json

        path = self.dir / f"{key}.json"
        if not self.enabled or not path.is_file():
            return None
        try:
            value = json.loads(path.read_text())
        except (OSError, ValueError):
            return None  # a torn write: recompute
        if key not in self._written:  # a later stage re-reading this run's result is no reuse
            self._reused.add(key)
        return value

    def put(self, key: str, value: Any) -> Any:
        import json

        if self.enabled:
            self.dir.mkdir(parents=True, exist_ok=True)
            tmp = self.dir / f"{key}.json.tmp"
            tmp.write_text(json.dumps(value, default=json_default))
            tmp.replace(self.dir / f"{key}.json")
            self._written.add(key)
        return value
