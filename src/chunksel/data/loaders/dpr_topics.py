"""TriviaQA and NQ: DPR open-domain topics, NQ's oracle passages, the e5 top-3 lists.

``topics.dpr.{trivia,nq}.{dev,test}.txt``: ``question \\t ['alias', ...]``, TSV with
CSV-style quoting -> :func:`csv.reader` (``delimiter="\\t"``), answers parsed with
:func:`ast.literal_eval`. About 1,800 TriviaQA test questions stay wrapped in a second
layer of quotes after that (``"Who wrote ""X""?"``); it is removed by
:func:`chunksel.data.text.unquote_csv_field`. Question ids: ``DATASET:dpr-dev|dpr-test:N``
with N the 0-based line; the e5 top-3 lists (``test_N``) attach to ``dpr-test:N``.

NQ gold passages: ``nq-open-oracle.jsonl.gz`` (no id: ``nq:oracle:LINE``, gold corpus id
``nqgold:LINE``) and ``nq-open-oracle-doc.jsonl.gz`` (``nq:oracle-doc:LINE``, gold corpus
id ``dpr:GOLD_ID``); both also put the gold text in ``gold_texts`` for text matching.
"""

from __future__ import annotations

import ast
import csv
from pathlib import Path

from chunksel.data.loaders.common import (
    Record,
    e5top3_records,
    iter_json_lines,
    passage_text,
    qa_file,
    unique,
)
from chunksel.data.text import unquote_csv_field
from chunksel.errors import DataError
from chunksel.types import Question

_FILES = {"triviaqa": "triviaqa/topics.dpr.trivia.{}.txt", "nq": "nq/topics.dpr.nq.{}.txt"}


def parse_answer_list(raw: str, where: str) -> list[str]:
    """``"['a', \\"b's\\"]"`` -> ``['a', "b's"]``; DataError naming ``where`` otherwise."""
    try:
        val = ast.literal_eval(unquote_csv_field(raw.strip()))
    except (ValueError, SyntaxError):
        raise DataError(f"{where}: answers are not a Python list literal: {raw[:80]!r}") from None
    if isinstance(val, str):
        val = [val]
    if not isinstance(val, (list, tuple)):
        raise DataError(f"{where}: answers are not a list: {raw[:80]!r}")
    return unique([str(a) for a in val])


def read_topics(root: Path, dataset: str, half: str) -> list[Record]:
    """DPR topics ``dev`` or ``test`` of ``triviaqa`` or ``nq``."""
    path = qa_file(root, _FILES[dataset].format(half))
    out = []
    with open(path, encoding="utf-8", newline="") as fh:
        for n, row in enumerate(csv.reader(fh, delimiter="\t")):
            if len(row) != 2:
                raise DataError(
                    f"{path}: record {n + 1}: expected 'question<TAB>answers', "
                    f"got {len(row)} fields"
                )
            text = unquote_csv_field(row[0]).strip()
            q = Question(
                id=f"{dataset}:dpr-{half}:{n}",
                text=text,
                answers=parse_answer_list(row[1], f"{path}: record {n + 1}"),
                dataset=dataset,
                meta={"source": f"dpr-{half}"},
            )
            out.append(Record(q))
    return out


def read_nq_oracle(root: Path) -> list[Record]:
    path = qa_file(root, "nq/nq-open-oracle.jsonl.gz")
    out = []
    for line, rec in iter_json_lines(path):
        gold = [c for c in rec.get("ctxs") or [] if c.get("isgold", True)][:1] or (
            rec.get("ctxs") or []
        )[:1]
        q = Question(
            id=f"nq:oracle:{line}",
            text=rec["question"],
            answers=unique(list(rec.get("answers") or [])),
            gold_ids=[f"nqgold:{line}"],
            gold_texts=[passage_text(c["text"]) for c in gold],
            dataset="nq",
            meta={"source": "oracle", "gold_titles": [c.get("title", "") for c in gold]},
        )
        out.append(Record(q))
    return out


def read_nq_oracle_doc(root: Path) -> list[Record]:
    path = qa_file(root, "nq/nq-open-oracle-doc.jsonl.gz")
    out = []
    for line, rec in iter_json_lines(path):
        gold = [c for c in rec.get("ctxs") or [] if c.get("isgold")][:1] or (rec.get("ctxs") or [])[
            :1
        ]
        gid = rec.get("gold_id")
        q = Question(
            id=f"nq:oracle-doc:{line}",
            text=rec["question"],
            answers=unique(list(rec.get("answers") or [])),
            gold_ids=[f"dpr:{gid}"] if gid not in (None, "") else [],
            gold_texts=[passage_text(c["text"]) for c in gold],
            dataset="nq",
            meta={"source": "oracle-doc", "gold_titles": [c.get("title", "") for c in gold]},
        )
        out.append(Record(q))
    return out


def _e5(dataset: str):
    def read(root: Path) -> list[Record]:
        return e5top3_records(
            root, dataset, qid_of=lambda native: f"{dataset}:dpr-test:{native.split('_', 1)[1]}"
        )

    return read


TRIVIAQA_SOURCES = {
    "dpr-dev": lambda root: read_topics(root, "triviaqa", "dev"),
    "dpr-test": lambda root: read_topics(root, "triviaqa", "test"),
    "e5top3": _e5("triviaqa"),
}
NQ_SOURCES = {
    "dpr-dev": lambda root: read_topics(root, "nq", "dev"),
    "dpr-test": lambda root: read_topics(root, "nq", "test"),
    "oracle": read_nq_oracle,
    "oracle-doc": read_nq_oracle_doc,
    "e5top3": _e5("nq"),
}
#: sources that only attach candidates to questions of other sources (no question of their own)
CANDIDATE_ONLY = {"e5top3"}
