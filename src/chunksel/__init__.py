"""chunksel: lightweight chunk selection for retrieval-augmented generation.

The top-level namespace stays light (no torch import): heavy parts are imported from
their subpackages, and selectors are reached through the registry in
:mod:`chunksel.selectors`. The application API, ``from chunksel import ChunkSelector``
(:mod:`chunksel.pipeline.chunk_selector`), is imported on first access.
"""

from __future__ import annotations

from chunksel.errors import ChunkselError
from chunksel.types import Candidate, Instance, Question, Selection

__version__ = "0.1.0"

__all__ = [
    "Candidate", "ChunkSelection", "ChunkSelector", "ChunkselError", "Instance", "Question", "Selection",
    "__version__",
]

_LAZY = {
    "ChunkSelector": "chunksel.pipeline.chunk_selector",
    "ChunkSelection": "chunksel.pipeline.selection",
}


def __getattr__(name: str):
    """Lazy exports: the application API loads its module on first access."""
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'chunksel' has no attribute {name!r}")
