"""MS MARCO against the ``msmarco-sub`` corpus: TREC DL 2019-2021, the 600-query BM25
top-20 set and the AutoRAG QA sample.

Relevance is kept as TREC-style graded judgments in ``Question.meta["qrels"] =
{corpus_id: grade}``; a passage is relevant when ``grade >= 2`` (the TREC DL convention;
unjudged passages are not relevant).

- TREC DL (``trec-dl/topics.dlYY.tsv`` + ``qrels.dlYY-passage.txt``, YY = 19, 20, 21):
  ids ``msmarco:dlYY:QID``; every NIST grade (0-3) is kept under ``msmarco:PID`` (2021's
  PIDs are MS MARCO v2 ids ``msmarco_passage_..``). DL22 has no judgments and is not read.
- BM25 top-20 (``bm25top20/msmarco_bm25top20_600q.jsonl``): ids ``msmarco:bm25top20:QID``;
  the official binary label maps to a grade: label 1 -> 2 (relevant), label 0 -> not
  entered (MS MARCO's 0 means "not marked", i.e. unjudged). Its 20 passages are given
  candidates (``msmarco:PID``, ``labels["qrels"]`` = the label, ``meta["bm25_rank"]``, and
  the 1-5 assessor grades of the 125 re-assessed queries in ``meta["assessor_grades"]``).
- QA sample (``msmarco_qa.parquet``, needs pyarrow): ids ``msmarco:qa:QID``; answers =
  ``generation_gt``; gold passages ``retrieval_gt`` (bare ``0_2`` -> ``autorag:0_2``).
"""

from __future__ import annotations

import ast
import csv
from pathlib import Path
from typing import Any

from chunksel.data.loaders.common import Record, iter_json_lines, passage_text, qa_file, unique
from chunksel.errors import DataError, require
from chunksel.types import Candidate, Question

#: grade given to a passage the BM25 top-20 set labels relevant (official label 1)
BM25TOP20_RELEVANT_GRADE = 2


def read_trec_dl(root: Path, year: str) -> list[Record]:
    topics = qa_file(root, f"msmarco/trec-dl/topics.dl{year}.tsv")
    qrels_path = qa_file(root, f"msmarco/trec-dl/qrels.dl{year}-passage.txt")
    qrels: dict[str, dict[str, int]] = {}
    with open(qrels_path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 4:
                raise DataError(f"{qrels_path}:{n}: expected 'qid iter pid grade'")
            qid, _, pid, grade = parts
            qrels.setdefault(qid, {})[f"msmarco:{pid}"] = int(grade)
    out = []
    with open(topics, encoding="utf-8", newline="") as fh:
        for n, row in enumerate(csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE), 1):
            if not row:
                continue
            if len(row) < 2:
                raise DataError(f"{topics}:{n}: expected 'qid<TAB>query'")
            qid, text = row[0].strip(), row[1].strip()
            if qid not in qrels:
                continue  # an unjudged topic cannot be evaluated
            q = Question(
                id=f"msmarco:dl{year}:{qid}",
                text=text,
                dataset="msmarco",
                meta={"source": f"dl{year}", "qrels": qrels[qid]},
            )
            out.append(Record(q))
    return out


def read_bm25top20(root: Path) -> list[Record]:
    path = qa_file(root, "msmarco/bm25top20/msmarco_bm25top20_600q.jsonl")
    out = []
    for _, rec in iter_json_lines(path):
        qid = rec["qid"]
        cands = []
        qrels: dict[str, int] = {}
        for j, c in enumerate(rec.get("candidates") or []):
            pid = f"msmarco:{c['pid']}"
            label = int(c.get("msmarco_label") or 0)
            meta: dict[str, Any] = {"source": "bm25top20", "bm25_rank": c.get("bm25_rank")}
            grades = c.get("assessor_grades_1to5") or []
            if grades:
                meta["assessor_grades"] = grades
            cands.append(
                Candidate(
                    id=pid,
                    text=passage_text(c.get("text", "")),
                    rank=j,
                    labels={"qrels": label},
                    meta=meta,
                )
            )
            if label:
                qrels[pid] = BM25TOP20_RELEVANT_GRADE
        q = Question(
            id=f"msmarco:bm25top20:{qid}",
            text=rec["query"],
            dataset="msmarco",
            meta={"source": "bm25top20", "qrels": qrels},
        )
        out.append(Record(q, cands))
    return out


def _str_list(value: Any) -> list[str]:
    """A list column that may hold a list or its Python repr (``"['0_2']"``)."""
    if value is None:
        return []
    if isinstance(value, str):
        s = value.strip()
        if not s:
            return []
        if s.startswith("["):
            try:
                value = ast.literal_eval(s)
            except (ValueError, SyntaxError):
                return [s]
        else:
            return [s]
    out: list[str] = []
    for v in value:
        out += _str_list(v) if isinstance(v, (list, tuple)) else [str(v)]
    return out


def read_qa_sample(root: Path) -> list[Record]:
    path = qa_file(root, "msmarco/msmarco_qa.parquet")
    pq = require("pyarrow.parquet", "data")
    rows = pq.read_table(path).to_pylist()
    out = []
    for rec in rows:
        qid = str(rec["qid"])
        text = str(rec["query"]).strip()
        q = Question(
            id=f"msmarco:qa:{qid}",
            text=text,
            answers=unique(_str_list(rec.get("generation_gt"))),
            gold_ids=unique([f"autorag:{g}" for g in _str_list(rec.get("retrieval_gt"))]),
            dataset="msmarco",
            meta={"source": "qa"},
        )
        out.append(Record(q))
    return out


SOURCES = {
    "dl19": lambda root: read_trec_dl(root, "19"),
    "dl20": lambda root: read_trec_dl(root, "20"),
    "dl21": lambda root: read_trec_dl(root, "21"),
    "bm25top20": read_bm25top20,
    "qa": read_qa_sample,
}
