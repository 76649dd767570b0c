"""How many chunks to keep: a fixed ``k``, ``k="auto"``, a probability ``threshold``, and
abstention below ``min_p`` (:meth:`chunksel.ChunkSelector.select`).

- ``k``: an int >= 1 keeps at most that many chunks (best first); ``"auto"`` keeps every
  chunk whose calibrated P(evidence) reaches the selector's operating point, chosen on
  validation when it was fitted (the highest threshold whose evidence recall reaches a
  fixed k=2's, :mod:`chunksel.selectors.calibration`); it may keep none.
- ``threshold``: keep only chunks with P(evidence) >= it (with ``k="auto"``, the higher
  of the two thresholds applies).
- ``min_p``: keep nothing when the set's P(some chunk holds the evidence) is below it.

The three need a calibrated selector (fitted with a validation split); a selection that
keeps nothing because of them is ``abstained``. Chunks are always taken best score first
(ties: the given order), so thresholds never reorder them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from chunksel.errors import ArgumentTypeError, ConfigError

AUTO = "auto"


def check_rule(k: Any, threshold: Any, min_p: Any, calibrator: Any, name: str) -> None:
    """Raise :class:`ConfigError` naming the bad argument (or the missing calibration)."""
    whole = isinstance(k, (int, np.integer)) and not isinstance(k, bool)
    if not whole and k != AUTO:
        what = f"the string {k!r}" if isinstance(k, str) else f"{k!r} ({type(k).__name__})"
        raise ArgumentTypeError(f'k must be a whole number >= 1 (an int) or the string "auto", got {what}')
    if whole and k < 1:
        raise ConfigError(f'k must be >= 1, got {k!r} (a whole number, or "auto")')
    for what, v in (("threshold", threshold), ("min_p", min_p)):
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)) or not 0.0 <= float(v) <= 1.0:
            raise ConfigError(f"{what} must be a probability in [0, 1], got {v!r}")
    if calibrator is None and (k == AUTO or threshold is not None or min_p is not None):
        used = "k='auto'" if k == AUTO else "threshold" if threshold is not None else "min_p"
        raise ConfigError(f"{used} needs calibrated probabilities, but the {name} selector has no calibrator: "
                          "train it with a validation split (chunksel train does) and save it again")


def choose(
    row: np.ndarray,
    chunk_p: np.ndarray | None,
    p_set: float | None,
    k: int | str,
    threshold: float | None,
    min_p: float | None,
    auto_threshold: float | None,
) -> tuple[list[int], bool]:
    """The kept positions of one scored row, best first, and whether it abstained.

    Args:
        row: the scores of the scored chunks (non-finite ones are never kept).
        chunk_p: their calibrated probabilities (None: not calibrated).
        p_set: the set-level probability.
        k, threshold, min_p: the rule (checked by :func:`check_rule`).
        auto_threshold: the calibrator's ``k="auto"`` operating point.
    """
    order = np.lexsort((np.arange(len(row)), -row))  # score desc, ties: given order
    kept = [int(j) for j in order if np.isfinite(row[j])]
    bar = None
    if k == AUTO:
        bar = float(auto_threshold)
    if threshold is not None:
        bar = float(threshold) if bar is None else max(bar, float(threshold))
    if bar is not None and chunk_p is not None:
        kept = [j for j in kept if chunk_p[j] >= bar]
    if min_p is not None and p_set is not None and p_set < float(min_p):
        kept = []
    if k != AUTO:
        kept = kept[: int(k)]
    ruled = k == AUTO or threshold is not None or min_p is not None
    return kept, bool(ruled and not kept)


def json_probability(p: float | None) -> float | None:
    """A probability as JSON allows it (None for a missing or non-finite one)."""
    return float(p) if p is not None and math.isfinite(p) else None


def probability_list(chunk_p: Sequence[float] | None, n_scored: int, n_given: int) -> list[float | None]:
    """One entry per given chunk: its probability, None past the scored ones or when uncalibrated."""
    if chunk_p is None:
        return [None] * n_given
    return [json_probability(float(chunk_p[j])) if j < n_scored else None for j in range(n_given)]


def restrict(sel: Any, k: int | str, threshold: float | None, min_p: float | None, auto_threshold: float | None) -> Any:
    """Apply a rule to a :class:`~chunksel.pipeline.chunk_selector.ChunkSelection` made
    with a large enough fixed ``k`` and no rule (the server scores a batch of requests
    with different rules in one pass): its ``selected`` become what ``select`` with this
    rule returns, and ``abstained`` is set."""
    row = np.array([c.score for c in sel.selected], dtype=np.float64)
    p = None if auto_threshold is None else np.array(
        [np.nan if c.probability is None else c.probability for c in sel.selected])
    kept, sel.abstained = choose(row, p, sel.p_answerable, k, threshold, min_p, auto_threshold)
    chosen = [sel.selected[j] for j in kept]
    for r, c in enumerate(chosen):
        c.rank = r + 1
    sel.selected = chosen
    return sel
