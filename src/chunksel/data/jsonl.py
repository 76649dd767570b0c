"""The generic user format: one JSON object per line.

``{"id", "question", "answers"?, "ctxs"?: [{"id", "title"?, "text", "label"?}]}``

- ``id`` and a non-empty ``question`` are required; ``answers`` (a list of strings, or one
  string) defaults to none.
- ``ctxs``, when present, are the question's candidates in the given order (retrieval is
  skipped); each needs ``id`` and ``text``; ``label`` (0/1 or bool) -> ``labels["given"]``;
  ``score`` is kept as the retrieval score. ``"ctxs": []`` gives an empty candidate list,
  no ``ctxs`` gives None (retrieve them).
- Optional ``gold_ids`` / ``gold_texts`` / ``answer_type`` (``"string"`` or ``"regex"``)
  fill the same :class:`~chunksel.types.Question` fields; any other key goes to ``meta``.

The file must be UTF-8 (a byte-order mark is allowed). Every error names the file and line.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from chunksel.errors import DataError
from chunksel.types import Candidate, Question

_KNOWN = {"id", "question", "answers", "ctxs", "gold_ids", "gold_texts", "answer_type"}


def _str_list(value: Any, what: str, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
        raise DataError(f"{where}: '{what}' must be a list of strings")
    return [str(v) for v in value]


def parse_record(
    rec: Any, where: str, dataset: str = "user"
) -> tuple[Question, list[Candidate] | None]:
    """One user record -> (Question, candidates or None). ``where`` names it in errors."""
    if not isinstance(rec, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    for key in ("id", "question"):
        if key not in rec or rec[key] is None:
            raise DataError(f"{where}: missing field '{key}'")
    text = rec["question"]
    if not isinstance(text, str) or not text.strip():
        raise DataError(f"{where}: empty question")
    qid = str(rec["id"])
    if not qid.strip():
        raise DataError(f"{where}: empty id")
    answer_type = rec.get("answer_type", "string")
    if answer_type not in ("string", "regex"):
        raise DataError(f"{where}: answer_type must be 'string' or 'regex', got {answer_type!r}")
    q = Question(
        id=qid,
        text=text.strip(),
        answers=_str_list(rec.get("answers"), "answers", where),
        gold_ids=_str_list(rec.get("gold_ids"), "gold_ids", where),
        gold_texts=_str_list(rec.get("gold_texts"), "gold_texts", where),
        dataset=dataset,
        answer_type=answer_type,
        meta={k: v for k, v in rec.items() if k not in _KNOWN},
    )
    ctxs = rec.get("ctxs")
    if ctxs is None:
        return q, None
    if not isinstance(ctxs, list):
        raise DataError(f"{where}: 'ctxs' must be a list")
    cands = []
    for j, ctx in enumerate(ctxs):
        cw = f"{where}: ctxs[{j}]"
        if not isinstance(ctx, dict):
            raise DataError(f"{cw}: expected an object")
        for key in ("id", "text"):
            if key not in ctx or ctx[key] is None:
                raise DataError(f"{cw}: missing field '{key}'")
        if not isinstance(ctx["text"], str):
            raise DataError(f"{cw}: 'text' must be a string")
        labels: dict[str, int] = {}
        if ctx.get("label") is not None:
            lab = ctx["label"]
            if isinstance(lab, bool) or (isinstance(lab, (int, float)) and float(lab).is_integer()):
                labels["given"] = int(lab)
            else:
                raise DataError(f"{cw}: 'label' must be 0/1 or true/false, got {lab!r}")
        score = ctx.get("score")
        try:
            score_f = float(score) if score is not None else math.nan
        except (TypeError, ValueError):
            raise DataError(f"{cw}: 'score' must be a number") from None
        extra = {k: v for k, v in ctx.items() if k not in {"id", "title", "text", "label", "score"}}
        cands.append(
            Candidate(
                id=str(ctx["id"]),
                title=str(ctx.get("title") or ""),
                text=ctx["text"],
                score=score_f,
                rank=j,
                labels=labels,
                meta=extra,
            )
        )
    return q, cands


def decode_line(raw: bytes, where: str, first: bool = False) -> str:
    """One line of a user file as text: UTF-8 (a leading byte-order mark is dropped).

    Raises:
        DataError: the bytes are not UTF-8; the message names ``where`` (file:line),
            the column and the offending byte.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(
            f"{where}: not UTF-8 text (byte 0x{raw[err.start]:02x} at byte {err.start + 1} of the line); "
            "save the file as UTF-8"
        ) from None
    return text[1:] if first and text.startswith("\ufeff") else text


def iter_user_jsonl(
    path: str | os.PathLike, dataset: str = "user"
) -> Iterator[tuple[Question, list[Candidate] | None]]:
    """Stream (Question, candidates or None) from a user JSONL file."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"input file {str(path)!r} not found")
    seen: set[str] = set()
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            where = f"{path}:{lineno}"
            line = decode_line(raw, where, first=lineno == 1)
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(f"{where}: malformed JSON at column {err.colno} ({err.msg})") from None
            except RecursionError:
                raise DataError(f"{where}: the JSON is nested too deeply") from None
            q, cands = parse_record(rec, where, dataset)
            if q.id in seen:
                raise DataError(f"{where}: duplicate id {q.id!r}")
            seen.add(q.id)
            yield q, cands
    if not seen:
        raise DataError(f"input file {str(path)!r} holds no records (it is empty or only blank lines); "
                        "expected one JSON object per line: {\"id\": ..., \"question\": ..., \"ctxs\"?: [...]}")


def load_user_jsonl(
    path: str | os.PathLike, dataset: str = "user"
) -> list[tuple[Question, list[Candidate] | None]]:
    """All records of a user JSONL file (see the module docstring for the format)."""
    return list(iter_user_jsonl(path, dataset))


#: the name :mod:`chunksel.build` imports
read_generic_jsonl = load_user_jsonl
