"""SQuAD 2.0 (the CS224N half of the official dev set, ``cs224n_dev-v2.0.json``).

Ids ``squad2:dev:QID``; the gold passage is the question's paragraph, corpus id
``squad:dev:TITLE:J`` (J = the paragraph's 0-based index in its article), its text in
``gold_texts``. Unanswerable questions (``is_impossible``) are kept aside: they are read
only with ``include_unanswerable=True`` and then carry no answers,
``meta["unanswerable"] = True``, the plausible answers in ``meta["plausible_answers"]`` and
no gold passage (their paragraph's id stays in ``meta["paragraph_id"]``).
"""

from __future__ import annotations

from pathlib import Path

from chunksel.data.loaders.common import Record, load_json, passage_text, qa_file, unique
from chunksel.types import Question


def read_squad2(root: Path, include_unanswerable: bool = False) -> list[Record]:
    path = qa_file(root, "squad2/cs224n_dev-v2.0.json")
    data = load_json(path)
    out = []
    for art in data["data"]:
        title = art["title"]
        for j, para in enumerate(art["paragraphs"]):
            ctx = passage_text(para["context"])
            for qa in para["qas"]:
                impossible = bool(qa.get("is_impossible"))
                if impossible and not include_unanswerable:
                    continue
                pid = f"squad:dev:{title}:{j}"
                meta = {"source": "dev", "paragraph_id": pid}
                if impossible:
                    meta["unanswerable"] = True
                    meta["plausible_answers"] = unique(
                        [a["text"] for a in qa.get("plausible_answers") or []]
                    )
                else:
                    meta["gold_titles"] = [title.replace("_", " ")]
                q = Question(
                    id=f"squad2:dev:{qa['id']}",
                    text=qa["question"],
                    answers=unique([a["text"] for a in qa.get("answers") or []]),
                    gold_ids=[] if impossible else [pid],
                    gold_texts=[] if impossible else [ctx],
                    dataset="squad2",
                    meta=meta,
                )
                out.append(Record(q))
    return out


SOURCES = {"dev": read_squad2}
