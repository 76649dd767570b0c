"""Deterministic train/val/test assignment by hashing the normalised question text.

``u = int(sha256(key)[:16 hex], 16) / 2**64`` is uniform on [0, 1); the split is
``train`` if ``u < r_train``, ``val`` if ``u < r_train + r_val``, else ``test``. The same
question text therefore lands in the same split whichever source or dataset carries it,
and re-running never moves a question.
"""

from __future__ import annotations

import hashlib

from chunksel.data.text import normalise_question
from chunksel.errors import ConfigError

DEFAULT_RATIOS = (0.7, 0.1, 0.2)


def _check_ratios(ratios: tuple[float, float, float]) -> None:
    if len(ratios) != 3 or any(r < 0 for r in ratios) or abs(sum(ratios) - 1.0) > 1e-6:
        raise ConfigError(
            f"split ratios must be three non-negative numbers summing to 1, got {ratios}"
        )


def hash_unit(key: str) -> float:
    """sha256 of ``key`` (UTF-8) mapped to a float in [0, 1)."""
    return int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:16], 16) / float(1 << 64)


def split_of(normalised_question: str, ratios: tuple[float, float, float] = DEFAULT_RATIOS) -> str:
    """``"train"``, ``"val"`` or ``"test"`` for a normalised question text.

    Args:
        normalised_question: the output of :func:`chunksel.data.text.normalise_question`
            (the text is hashed as given).
        ratios: (train, val, test) fractions summing to 1.
    """
    _check_ratios(ratios)
    u = hash_unit(normalised_question)
    if u < ratios[0]:
        return "train"
    if u < ratios[0] + ratios[1]:
        return "val"
    return "test"


def split_of_text(question_text: str, ratios: tuple[float, float, float] = DEFAULT_RATIOS) -> str:
    """:func:`split_of` of ``normalise_question(question_text)``."""
    return split_of(normalise_question(question_text), ratios)
