"""Moved to :mod:`chunksel.features.generation`, beside the decoding loop it drives
(:mod:`chunksel.features.kv`). These names stay importable from here only until
:mod:`chunksel.study.answer_table` imports them from their new home; then this module goes
(it is the one import from ``llm`` to ``features``: ``tests/unit/core/test_layering.py``).
"""

from __future__ import annotations

from chunksel.features.generation import Answer, AnswerCache, Generator
from chunksel.features.generation import ids_hash as _ids_hash

__all__ = ["Answer", "AnswerCache", "Generator", "_ids_hash"]
