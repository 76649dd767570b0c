"""The study's result memo: every fit + evaluation is stored as JSON under
``<cache>/bench/<key>.json``, the key made of the selector's settings, its seed, the exact
train/val/test instances (ids, candidates, labels), the question features and a hash of
the package's code, so a warm re-run reuses every trained result and any change retrains."""

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


def code_fingerprint() -> str:
    """sha256 over the package's Python sources (a code change invalidates the memo)."""
    import hashlib

    root = Path(__file__).resolve().parent.parent  # the chunksel package
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
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
