"""Shared helpers of the dataset readers: file access, records, e5 top-3 lists."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chunksel.data.text import collapse_ws
from chunksel.errors import DataError
from chunksel.types import Candidate, Question


@dataclass
class Record:
    """A question as one source gives it, with the source's own candidates if any."""

    question: Question
    candidates: list[Candidate] | None = None


def qa_file(root: Path, rel: str) -> Path:
    """``root/qa/rel``, which must exist."""
    path = root / "qa" / rel
    if not path.is_file():
        raise DataError(
            f"dataset file {str(path)!r} not found (is CHUNKSEL_DATA the benchmark data?)"
        )
    return path


def iter_json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(0-based line number, object) of a JSON-lines file, gzip or plain; blank lines skipped."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
        for i, line in enumerate(fh):
            if not line.strip():
                continue
            try:
                yield i, json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(f"{path}:{i + 1}: malformed JSON ({err.msg})") from None


def load_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except json.JSONDecodeError as err:
        raise DataError(f"{path}: malformed JSON ({err.msg} at line {err.lineno})") from None


def unique(items: list[str]) -> list[str]:
    """Order-preserving dedup of non-empty strings (surrounding whitespace stripped)."""
    seen: set[str] = set()
    out = []
    for x in items:
        x = x.strip() if isinstance(x, str) else str(x)
        if x and x not in seen:
            seen.add(x)
            out.append(x)
    return out


def passage_text(text: str) -> str:
    """Passage text as the corpus stores it: whitespace runs (newlines) -> one space."""
    return collapse_ws(text)


def e5top3_records(
    root: Path, dataset: str, qid_of: Any = None, with_questions: bool = False
) -> list[Record]:
    """The FlashRAG-style e5 top-3 lists ``qa/DATASET/DATASET_test1000_e5top3.jsonl``.

    Candidate ids follow the corpus scheme ``e5top3:DATASET:ID:J`` (J = 0-based position);
    the text (which repeats the title at its start, like the corpus row) is kept as given;
    ``has_answer`` -> ``labels["given"]``.

    Args:
        qid_of: maps the native id (``test_N``) to the question id the dataset uses;
            default ``DATASET:e5top3:ID``.
        with_questions: keep the question text and answers (a question source) rather
            than only attaching candidates to another source's question.
    """
    path = qa_file(root, f"{dataset}/{dataset}_test1000_e5top3.jsonl")
    out = []
    for _, rec in iter_json_lines(path):
        native = str(rec["id"])
        qid = qid_of(native) if qid_of else f"{dataset}:e5top3:{native}"
        cands = [
            Candidate(
                id=f"e5top3:{dataset}:{native}:{j}",
                title=ctx.get("title", "") or "",
                text=passage_text(ctx.get("text", "")),
                rank=j,
                labels={"given": int(bool(ctx.get("has_answer")))},
                meta={"source": "e5top3"},
            )
            for j, ctx in enumerate(rec.get("ctxs") or [])
        ]
        q = Question(
            id=qid,
            text=rec["question"] if with_questions else "",
            answers=unique(list(rec.get("answers") or [])) if with_questions else [],
            dataset=dataset,
            meta={
                "source": "e5top3",
                "native_id": native,
                "search_query": rec.get("search_query", ""),
            },
        )
        out.append(Record(q, cands))
    return out
