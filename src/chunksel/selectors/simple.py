"""Selectors that learn nothing: retrieval order, random, and the oracle upper bound."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.selectors.base import QuestionFeatures, Selector
from chunksel.types import Instance


class RetrievalSelector(Selector):
    """Keep the retriever's order (the plain RAG baseline): score = -rank.

    Its calibrator (fitted when ``fit`` gets a validation split) reads the candidates'
    retrieval scores, not ``-rank``: the retriever's cosine is what carries confidence.
    """

    name = "retrieval"
    display_name = "RAG baseline (retrieval order)"
    family = "retrieval"
    role = "baseline"
    requires_fit = False
    calibration_source = "retrieval_score"

    def __init__(self) -> None:
        pass

    def _score(self, batch: Sequence[Instance], features: QuestionFeatures | None, k: int) -> np.ndarray:
        return np.tile(-np.arange(k, dtype=np.float64), (len(batch), 1))


class RandomSelector(Selector):
    """Uniformly random scores, reproducible per (seed, question id)."""

    name = "random"
    display_name = "Random"
    family = "reference"
    role = "reference"
    requires_fit = False

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def _score(self, batch: Sequence[Instance], features: QuestionFeatures | None, k: int) -> np.ndarray:
        out = np.empty((len(batch), k))
        for b, inst in enumerate(batch):
            key = [self.seed, *inst.id.encode("utf-8")]
            out[b] = np.random.default_rng(key).random(k)
        return out


class OracleSelector(Selector):
    """Scores 1 for positives under the label spec and 0 otherwise: the upper bound.

    Reads the candidates' labels, so it is only meaningful on labelled instances.
    """

    name = "oracle"
    display_name = "Oracle"
    family = "reference"
    role = "reference"
    requires_fit = False

    def __init__(self, label: str | None = None) -> None:
        self.label = label

    def _score(self, batch: Sequence[Instance], features: QuestionFeatures | None, k: int) -> np.ndarray:
        out = np.zeros((len(batch), k))
        for b, inst in enumerate(batch):
            lab = inst.labels(self.label)
            out[b, : len(lab)] = lab
        return out

    def _load_state(self, path: Path, state: dict[str, Any]) -> None:
        return None
