"""HotpotQA: the IRCoT dev subsample and AMOR's dev/test files, deduplicated downstream.

Two formats:

- IRCoT (``ircot_dev_subsampled.jsonl``): ``contexts = [{id, title, paragraph_text,
  is_supporting}]``; ids ``hotpotqa:ircot:QID``; paragraph corpus ids
  ``hotpot-ircot:QID:CTX``; answers from ``answers_objects[*].spans`` (or the number /
  date when there is no span).
- AMOR (``amor_{dev,test}.jsonl``): the original distractor format, ``context = [[title,
  [sentences]], ...]``; a paragraph is supporting when its title appears in
  ``supporting_facts`` (test: ``[title, sent_id]``; dev: ``[title, [ids], [sentences],
  {id, title, text, score}]``). Ids ``hotpotqa:amor-dev|amor-test:QID``; paragraph corpus
  ids ``hotpot-amor:QID:J``. Two test rows have an empty context: their gold comes from
  the supporting facts' own text where the dev format gives it, else they have none.
  In 78 test rows the context holds none of the supporting paragraphs; unless another
  source carries the same question (dedup merges its gold in), such a question has no
  gold passage and ``meta["gold_missing"] = True`` (titles in ``meta["supporting_titles"]``).

Every question's paragraphs are its given candidates (``labels["given"]`` =
supporting); the supporting ones are also its gold passages (ids and texts).
"""

from __future__ import annotations

from pathlib import Path

from chunksel.data.loaders.common import Record, iter_json_lines, passage_text, qa_file, unique
from chunksel.types import Candidate, Question


def _question(
    qid: str, text: str, answers: list[str], cands: list[Candidate], source: str, extra: dict
) -> Question:
    gold = [c for c in cands if c.labels.get("given")]
    return Question(
        id=qid,
        text=text,
        answers=answers,
        gold_ids=[c.id for c in gold],
        gold_texts=[c.text for c in gold],
        dataset="hotpotqa",
        meta={"source": source, "gold_titles": [c.title for c in gold], **extra},
    )


def read_ircot(root: Path) -> list[Record]:
    path = qa_file(root, "hotpotqa/ircot_dev_subsampled.jsonl")
    out = []
    for _, rec in iter_json_lines(path):
        qid = rec["question_id"]
        answers: list[str] = []
        for obj in rec.get("answers_objects") or []:
            spans = obj.get("spans") or []
            if spans:
                answers += spans
            elif obj.get("number"):
                answers.append(str(obj["number"]))
            else:
                d = obj.get("date") or {}
                answers.append(
                    " ".join(str(d.get(k, "")) for k in ("day", "month", "year")).strip()
                )
        cands = [
            Candidate(
                id=f"hotpot-ircot:{qid}:{ctx['id']}",
                title=ctx.get("title", "") or "",
                text=passage_text(ctx.get("paragraph_text", "")),
                rank=j,
                labels={"given": int(bool(ctx.get("is_supporting")))},
                meta={"source": "ircot"},
            )
            for j, ctx in enumerate(rec.get("contexts") or [])
        ]
        q = _question(
            f"hotpotqa:ircot:{qid}", rec["question_text"], unique(answers), cands, "ircot", {}
        )
        out.append(Record(q, cands))
    return out


def read_amor(root: Path, half: str) -> list[Record]:
    path = qa_file(root, f"hotpotqa/amor_{half}.jsonl")
    out = []
    for _, rec in iter_json_lines(path):
        qid = rec["_id"]
        facts = rec.get("supporting_facts") or []
        sup_titles = {f[0] for f in facts if f}
        cands = [
            Candidate(
                id=f"hotpot-amor:{qid}:{j}",
                title=title,
                text=passage_text("".join(sents) if isinstance(sents, list) else str(sents)),
                rank=j,
                labels={"given": int(title in sup_titles)},
                meta={"source": f"amor-{half}"},
            )
            for j, (title, sents) in enumerate(rec.get("context") or [])
        ]
        extra = {
            "type": rec.get("type", ""),
            "level": rec.get("level", ""),
            "supporting_titles": sorted(sup_titles),
        }
        q = _question(
            f"hotpotqa:amor-{half}:{qid}",
            rec["question"],
            unique([rec.get("answer", "")]),
            cands,
            f"amor-{half}",
            extra,
        )
        if not cands:  # empty context: fall back to the dev format's paragraph dicts
            for f in facts:
                if len(f) >= 4 and isinstance(f[3], dict) and f[3].get("text"):
                    if passage_text(f[3]["text"]) not in q.gold_texts:
                        q.gold_texts.append(passage_text(f[3]["text"]))
                        q.meta["gold_titles"].append(f[3].get("title", f[0]))
        if not q.gold_texts:
            q.meta["gold_missing"] = True
        out.append(Record(q, cands or None))
    return out


SOURCES = {
    "ircot": read_ircot,
    "amor-dev": lambda root: read_amor(root, "dev"),
    "amor-test": lambda root: read_amor(root, "test"),
}
