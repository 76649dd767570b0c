"""WikiQA sentence selection, ``WikiQASent-{train,dev,test}.txt``.

Rows are ``question \\t sentence \\t 0/1``.

Consecutive rows with the same question form one question; ids ``wikiqa:SPLIT:N`` with N
the question's 0-based order of appearance in that file (the files carry no ids). Its
candidate sentences are given candidates ``wikiqa:SPLIT:N:J`` with the human label in
``labels["human"]`` (its only label source). WikiQA has no
corpus, so its candidates are always the given ones.
"""

from __future__ import annotations

import csv
from pathlib import Path

from chunksel.data.loaders.common import Record, qa_file
from chunksel.errors import DataError
from chunksel.types import Candidate, Question


def read_wikiqa(root: Path, half: str) -> list[Record]:
    path = qa_file(root, f"wikiqa/WikiQASent-{half}.txt")
    out: list[Record] = []
    current: str | None = None
    with open(path, encoding="utf-8", newline="") as fh:
        for n, row in enumerate(csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE), 1):
            if not row:
                continue
            if len(row) != 3 or row[2].strip() not in ("0", "1"):
                raise DataError(f"{path}:{n}: expected 'question<TAB>sentence<TAB>0|1'")
            qtext, sent, label = row[0].strip(), row[1].strip(), int(row[2])
            if qtext != current:
                current = qtext
                idx = len(out)
                q = Question(
                    id=f"wikiqa:{half}:{idx}", text=qtext, dataset="wikiqa", meta={"source": half}
                )
                out.append(Record(q, []))
            rec = out[-1]
            assert rec.candidates is not None
            j = len(rec.candidates)
            rec.candidates.append(
                Candidate(
                    id=f"{rec.question.id}:{j}",
                    text=sent,
                    rank=j,
                    labels={"human": label},
                    meta={"source": half},
                )
            )
    return out


SOURCES = {
    "train": lambda root: read_wikiqa(root, "train"),
    "dev": lambda root: read_wikiqa(root, "dev"),
    "test": lambda root: read_wikiqa(root, "test"),
}
