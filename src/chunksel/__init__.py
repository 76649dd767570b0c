"""chunksel: lightweight chunk selection for retrieval-augmented generation.

The top-level namespace stays light (no torch import): heavy parts are imported from
their subpackages, and selectors are reached through the registry in
:mod:`chunksel.selectors`.
"""

from __future__ import annotations

from chunksel.errors import ChunkselError
from chunksel.types import Candidate, Instance, Question, Selection

__version__ = "0.1.0"

__all__ = ["Candidate", "ChunkselError", "Instance", "Question", "Selection", "__version__"]
