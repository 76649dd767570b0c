"""The result of a selection: :class:`ChunkSelection` (the chosen chunks, every chunk's
score and calibrated probability, the timings) and :class:`ChosenChunk`, both valid JSON
through ``to_dict``; :func:`max_chunks` is a selector's fixed candidate count K."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chunksel.pipeline.select_rules import json_probability


@dataclass
class ChosenChunk:
    """One selected chunk: its position in the given list, its rank (1 = best), score and
    calibrated P(evidence) (None when the selector has no calibrator)."""

    index: int
    rank: int
    score: float
    text: str
    probability: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "rank": self.rank, "score": _json_score(self.score), "text": self.text,
                "probability": json_probability(self.probability)}


@dataclass
class ChunkSelection:
    """The chosen chunk(s) of one question, best first, with every chunk's score.

    Attributes:
        question: the question text.
        selected: the chosen chunks, best first (at most ``k``, never an unscored one).
        all_scores: one entry per given chunk; ``None`` for a chunk the model did not
            score (past its K).
        n_scored: how many chunks were scored (the first ``n_scored``).
        selector: the selector's registry name.
        timings: milliseconds per stage (``encode``, ``warmup``, ``score``, ``total``) of
            the call that produced it (of the whole batch for :meth:`ChunkSelector.select_batch`).
        warm_up: the warm-up pass (its KV cache feeds generation), when one ran for this
            question alone.
        probabilities: one calibrated P(evidence) per given chunk (None past the scored
            chunks, or every one when the selector has no calibrator).
        p_answerable: P(some scored chunk holds the evidence), calibrated per set.
        abstained: nothing was selected because of ``k="auto"``, ``threshold`` or ``min_p``.
    """

    question: str
    selected: list[ChosenChunk]
    all_scores: list[float | None]
    n_scored: int
    selector: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    warm_up: Any = field(default=None, repr=False)
    probabilities: list[float | None] = field(default_factory=list)
    p_answerable: float | None = None
    abstained: bool = False

    @property
    def indices(self) -> list[int]:
        return [c.index for c in self.selected]

    @property
    def chunks(self) -> list[str]:
        return [c.text for c in self.selected]

    @property
    def scores(self) -> list[float]:
        return [c.score for c in self.selected]

    def top_k(self, n: int) -> list[ChosenChunk]:
        """The best ``n`` chosen chunks."""
        return self.selected[:n]

    def to_dict(self) -> dict[str, Any]:
        """Valid JSON: non-finite scores become ``null``."""
        return {
            "question": self.question,
            "selector": self.selector,
            "selected": [c.to_dict() for c in self.selected],
            "indices": self.indices,
            "chunks": self.chunks,
            "scores": [_json_score(s) for s in self.scores],
            "all_scores": [_json_score(s) for s in self.all_scores],
            "n_scored": self.n_scored,
            "probabilities": [json_probability(p) for p in self.probabilities],
            "p_answerable": json_probability(self.p_answerable),
            "abstained": self.abstained,
            "timings_ms": {k: round(v, 3) for k, v in self.timings.items()},
        }


def _json_score(s: float | None) -> float | None:
    """A score as JSON allows it: a finite float, else None (null)."""
    return float(s) if s is not None and np.isfinite(s) else None



def max_chunks(selector: Any) -> int | None:
    """The selector's fixed candidate count K (None: it scores any number)."""
    layout = getattr(selector, "layout_", None)
    if layout is not None and getattr(layout, "k", None):
        return int(layout.k)
    if hasattr(type(selector), "fixed_k"):  # a selector that says which K it scores
        fixed = selector.fixed_k
        return None if fixed is None else int(fixed)
    k = getattr(selector, "k", None)
    return int(k) if isinstance(k, int) and not isinstance(k, bool) and k > 0 else None
