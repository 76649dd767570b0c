"""PopQA: NeuroPath (gold paragraphs) + the e5 top-3 set + the S2RAG long-tail set.

- ``neuropath_popqa.json``: a JSON list; ``possible_answers`` / ``s_aliases`` /
  ``o_aliases`` are JSON-encoded strings and are decoded here. Its two ``paragraphs`` are
  the gold passages (corpus ids ``popqa-np:ID:J``). Ids ``popqa:neuropath:ID``.
- ``popqa_test1000_e5top3.jsonl``: ids ``popqa:e5top3:test_N`` (N is PopQA's own index);
  its e5 top-3 passages are given candidates.
- ``s2rag_popqa_longtail_w_gs_example100.jsonl``: ids ``popqa:s2rag:ID``; 25 DPR-retrieved
  passages each, given candidates: ``dpr:ID`` when the passage has a psgs_w100 id, else
  ``popqa-gs:ID:J`` (the corpus's id for them); the source's retrieval score is kept.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chunksel.data.loaders.common import (
    Record,
    e5top3_records,
    iter_json_lines,
    load_json,
    passage_text,
    qa_file,
    unique,
)
from chunksel.errors import DataError
from chunksel.types import Candidate, Question


def decode_json_list(value: Any, where: str) -> list[str]:
    """A list given either as a list or as a JSON-encoded string of one."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise DataError(f"{where}: expected a JSON-encoded list, got {value[:80]!r}") from None
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise DataError(f"{where}: expected a list, got {type(value).__name__}")
    return [str(v) for v in value]


def read_neuropath(root: Path) -> list[Record]:
    path = qa_file(root, "popqa/neuropath_popqa.json")
    data = load_json(path)
    out = []
    for rec in data:
        nid = rec["id"]
        where = f"{path}: id {nid}"
        answers = unique(
            decode_json_list(rec.get("possible_answers"), where)
            + [rec.get("obj") or ""]
            + decode_json_list(rec.get("o_aliases"), where)
        )
        paras = rec.get("paragraphs") or []
        gold = [(j, p) for j, p in enumerate(paras) if p.get("is_supporting", True)]
        q = Question(
            id=f"popqa:neuropath:{nid}",
            text=rec["question"],
            answers=answers,
            gold_ids=[f"popqa-np:{nid}:{j}" for j, _ in gold],
            gold_texts=[passage_text(p["text"]) for _, p in gold],
            dataset="popqa",
            meta={
                "source": "neuropath",
                "gold_titles": [p.get("title", "") for _, p in gold],
                "prop": rec.get("prop", ""),
                "subj": rec.get("subj", ""),
                "s_aliases": decode_json_list(rec.get("s_aliases"), where),
                "s_pop": rec.get("s_pop"),
            },
        )
        out.append(Record(q))
    return out


def read_s2rag(root: Path) -> list[Record]:
    path = qa_file(root, "popqa/s2rag_popqa_longtail_w_gs_example100.jsonl")
    out = []
    for _, rec in iter_json_lines(path):
        nid = rec["id"]
        cands = []
        for j, ctx in enumerate(rec.get("ctxs") or []):
            pid = ctx.get("id")
            score = ctx.get("score")
            cands.append(
                Candidate(
                    id=f"dpr:{pid}" if pid not in (None, "") else f"popqa-gs:{nid}:{j}",
                    title=ctx.get("title", "") or "",
                    text=passage_text(ctx.get("text", "")),
                    score=float(score) if score not in (None, "") else float("nan"),
                    rank=j,
                    meta={"source": "s2rag"},
                )
            )
        q = Question(
            id=f"popqa:s2rag:{nid}",
            text=rec["question"],
            answers=unique(list(rec.get("answers") or [])),
            dataset="popqa",
            meta={"source": "s2rag", "prop": rec.get("prop", ""), "s_pop": rec.get("pop")},
        )
        out.append(Record(q, cands))
    return out


SOURCES = {
    "neuropath": read_neuropath,
    "e5top3": lambda root: e5top3_records(root, "popqa", with_questions=True),
    "s2rag": read_s2rag,
}
