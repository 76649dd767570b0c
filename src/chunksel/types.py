"""Core records: Question, Candidate, Instance, Selection (no torch).

A candidate's ``labels`` keep every label source apart (``containment``, ``gold``,
``qrels``, ``human``, ``given``, and the LLM judge's ``semantic`` / ``semantic@<judge>``,
see :mod:`chunksel.labels.judge`); a value >= 1 is positive. A label *spec*
names one source or several joined by ``|`` (positive if any is), e.g.
``"containment|gold"``. Candidates of an instance are kept in retrieval order, so a
candidate's column in a score matrix is its retrieval rank.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

SPLITS = ("train", "val", "test")
#: the reference semantic labels' sources (evaluation only: :mod:`chunksel.data.reference_labels`)
REFERENCE_SOURCES = ("semantic@reference", "supports@reference")


def parse_label_spec(spec: str) -> tuple[str, ...]:
    """``"containment|gold"`` -> ``("containment", "gold")``."""
    parts = tuple(p.strip() for p in spec.split("|") if p.strip())
    if not parts:
        raise ValueError(f"empty label spec {spec!r}")
    return parts


@dataclass
class Question:
    """A question with its reference answers and, where given, gold passages."""

    id: str
    text: str
    answers: list[str] = field(default_factory=list)
    gold_ids: list[str] = field(default_factory=list)
    gold_texts: list[str] = field(default_factory=list)
    dataset: str = ""
    answer_type: str = "string"  # "string" or "regex" (CuratedTREC-style patterns)
    meta: dict[str, Any] = field(default_factory=dict)
    # the L2-normalised retriever embedding of the question text; kept in a sidecar
    # array, never in JSONL (the retrieval-anchored selectors start from it)
    embedding: np.ndarray | None = field(default=None, repr=False, compare=False)
    # its (tokens, dim) unit token vectors from the retriever encoder, when the caller gave
    # them (late interaction, :mod:`chunksel.selectors.maxsim`); never in JSONL
    tokens: np.ndarray | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "text": self.text,
            "answers": list(self.answers),
            "gold_ids": list(self.gold_ids),
            "gold_texts": list(self.gold_texts),
            "dataset": self.dataset,
            "answer_type": self.answer_type,
            "meta": dict(self.meta),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Question:
        return cls(
            id=str(d["id"]),
            text=d["text"],
            answers=list(d.get("answers", [])),
            gold_ids=list(d.get("gold_ids", [])),
            gold_texts=list(d.get("gold_texts", [])),
            dataset=d.get("dataset", ""),
            answer_type=d.get("answer_type", "string"),
            meta=dict(d.get("meta", {})),
        )


@dataclass
class Candidate:
    """One retrieved (or given) passage of an instance."""

    id: str
    text: str
    title: str = ""
    score: float = math.nan  # retrieval score (inner product for MiniLM + FAISS)
    rank: int = 0  # 0-based retrieval rank
    labels: dict[str, int] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    # the L2-normalised retriever embedding; kept in a sidecar array, never in JSONL
    embedding: np.ndarray | None = field(default=None, repr=False, compare=False)
    # its token vectors as stored int8 codes (:mod:`chunksel.retrieval.tokens`), when the
    # caller gave them; never in JSONL
    tokens: np.ndarray | None = field(default=None, repr=False, compare=False)

    def is_positive(self, spec: str) -> bool:
        return any(self.labels.get(src, 0) >= 1 for src in parse_label_spec(spec))

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "text": self.text,
            "score": None if math.isnan(self.score) else float(self.score),
            "rank": self.rank,
            "labels": dict(self.labels),
            "meta": dict(self.meta),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Candidate:
        score = d.get("score")
        return cls(
            id=str(d["id"]),
            text=d.get("text", ""),
            title=d.get("title", "") or "",
            score=math.nan if score is None else float(score),
            rank=int(d.get("rank", 0)),
            labels={k: int(v) for k, v in (d.get("labels") or {}).items()},
            meta=dict(d.get("meta") or {}),
        )


@dataclass
class Instance:
    """A question, its K candidates (retrieval order) and its split."""

    question: Question
    candidates: list[Candidate]
    split: str = "test"
    label_source: str = "containment"  # the dataset's default label spec

    @property
    def id(self) -> str:
        return self.question.id

    def labels(self, spec: str | None = None) -> np.ndarray:
        """0/1 vector over the candidates under ``spec`` (default: the instance's)."""
        spec = spec or self.label_source
        if "@reference" in spec:  # evaluation-only labels: a missing one is an error, never a 0
            for src in parse_label_spec(spec):
                lost = [c.id for c in self.candidates if src in REFERENCE_SOURCES and src not in c.labels]
                if lost:
                    from chunksel.errors import DataError

                    raise DataError(f"question {self.question.id!r} has no {src!r} label for candidate(s) "
                                    f"{', '.join(lost)}: the reference labels cover a sample of test questions "
                                    "only (a label spec naming them keeps the labelled questions)")
        return np.array([c.is_positive(spec) for c in self.candidates], dtype=np.int8)

    def answerable(self, spec: str | None = None) -> bool:
        """At least one positive candidate."""
        return bool(self.labels(spec).any())

    def contested(self, spec: str | None = None) -> bool:
        """At least one positive and one negative candidate."""
        lab = self.labels(spec)
        return bool(lab.any() and not lab.all())

    def to_dict(self) -> dict[str, Any]:
        return {
            "question": self.question.to_dict(),
            "candidates": [c.to_dict() for c in self.candidates],
            "split": self.split,
            "label_source": self.label_source,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Instance:
        return cls(
            question=Question.from_dict(d["question"]),
            candidates=[Candidate.from_dict(c) for c in d["candidates"]],
            split=d.get("split", "test"),
            label_source=d.get("label_source", "containment"),
        )


@dataclass
class Selection:
    """What a selector chose for one instance: candidate indices, ids and scores."""

    question_id: str
    indices: list[int]
    candidate_ids: list[str]
    scores: list[float]

    def to_dict(self) -> dict[str, Any]:
        return {
            "question_id": self.question_id,
            "indices": list(self.indices),
            "candidate_ids": list(self.candidate_ids),
            "scores": [float(s) for s in self.scores],
        }


def refuse_reference_labels(*splits: Sequence[Instance] | None) -> None:
    """Raise when an instance of ``splits`` is labelled by a reference source: those labels
    are for evaluation only (no fit, calibration, selection or stacking reads them)."""
    for batch in splits:
        for inst in batch or ():
            if "@reference" in inst.label_source and any(
                    src in REFERENCE_SOURCES for src in parse_label_spec(inst.label_source)):
                from chunksel.errors import DataError

                raise DataError(f"question {inst.question.id!r} is labelled {inst.label_source!r}: the reference "
                                "semantic labels are for evaluation only; train on the dataset's own labels "
                                "(leave --label out) and evaluate with --label semantic@reference")


def candidate_mask(batch: Sequence[Instance], k: int | None = None) -> np.ndarray:
    """(B, K) bool, True at real candidates; K = ``k`` or the longest instance."""
    k = k if k is not None else max((len(i.candidates) for i in batch), default=0)
    mask = np.zeros((len(batch), k), dtype=bool)
    for b, inst in enumerate(batch):
        mask[b, : min(k, len(inst.candidates))] = True
    return mask


def label_matrix(batch: Sequence[Instance], spec: str | None = None, k: int | None = None) -> np.ndarray:
    """(B, K) int8 labels under ``spec``; 0 at padded slots."""
    k = k if k is not None else max((len(i.candidates) for i in batch), default=0)
    out = np.zeros((len(batch), k), dtype=np.int8)
    for b, inst in enumerate(batch):
        lab = inst.labels(spec)[:k]
        out[b, : len(lab)] = lab
    return out


def write_jsonl(path: str | Path, records: Iterable[Any]) -> int:
    """Write dataclasses with ``to_dict`` (or plain dicts) as JSON lines; returns the count."""
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        for rec in records:
            obj = rec.to_dict() if hasattr(rec, "to_dict") else rec
            fh.write(json.dumps(obj, ensure_ascii=False) + "\n")
            n += 1
    return n


def read_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield the JSON objects of a JSON-lines file, naming the line of a broken record."""
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as err:
                from chunksel.errors import DataError

                raise DataError(f"{path}:{lineno}: malformed JSON ({err.msg})") from None
