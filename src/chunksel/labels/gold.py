"""Gold-passage resolution and the per-candidate label sources.

The corpus keeps a source's own passage id where it could (``nqgold:LINE``,
``hotpot-ircot:QID:CTX``, ``autorag:ID``, ``msmarco:PID``, ...), but it was deduplicated by
normalised title + text, so a dataset's gold passage may live under another source's id.
:func:`gold_corpus_ids` therefore resolves a question's gold passages in three steps:

1. every ``Question.gold_ids`` entry that is a corpus id;
2. every ``Question.gold_texts`` entry (with its title from ``meta["gold_titles"]`` when
   given) looked up by :func:`chunksel.data.text.normalise_passage` (title + text);
3. failing that, by the normalised text alone (a repeated leading title removed).

:func:`label_candidates` then fills ``Candidate.labels`` with one entry per source, kept
apart: ``containment`` (DPR has_answer on the passage text, only for questions with
answers), ``gold`` (the candidate is a resolved gold passage, by id or by text) and
``qrels`` (MS MARCO judgments: ``grade >= 2`` -> 1, unjudged -> 0; the raw grade of a
judged candidate is kept in ``Candidate.meta["grade"]``).
"""

from __future__ import annotations

from collections.abc import Sequence

from chunksel.data.corpus import Corpus
from chunksel.data.text import normalise_text, passage_keys, passage_text_variants
from chunksel.labels.containment import ContainmentLabeler
from chunksel.types import Candidate, Question

#: TREC DL convention: a passage is relevant when its graded judgment is >= 2
QRELS_POSITIVE_GRADE = 2


class GoldIndex:
    """Normalised passage keys of a corpus -> corpus id (first occurrence wins).

    Built once per corpus (193k wiki passages: a few seconds).

    Attributes:
        ids: the set of corpus ids.
        by_key: ``normalise_passage(title, text)`` -> id.
        by_text: every :func:`~chunksel.data.text.passage_text_variants` of a passage
            (its normalised text with 0, 1, 2 leading titles removed) -> id.
    """

    def __init__(self, corpus: Corpus) -> None:
        self.name = corpus.name
        self.ids: set[str] = set(corpus.ids)
        self.by_key: dict[str, str] = {}
        self.by_text: dict[str, str] = {}
        for pid, title, text in zip(corpus.ids, corpus.titles, corpus.texts, strict=True):
            variants = passage_text_variants(title, text)
            if not variants:
                continue
            self.by_key.setdefault(normalise_text(title) + " || " + variants[-1], pid)
            for variant in variants:
                self.by_text.setdefault(variant, pid)

    def __len__(self) -> int:
        return len(self.ids)

    def lookup(self, text: str, title: str = "") -> str | None:
        """The corpus id of a passage given by text (and title), or None."""
        key, text_key = passage_keys(title, text)
        if title:
            pid = self.by_key.get(key)
            if pid is not None:
                return pid
        if text_key in self.by_text:
            return self.by_text[text_key]
        for variant in passage_text_variants(title, text):
            if variant in self.by_text:
                return self.by_text[variant]
        return None

    def resolve(self, pid: str, text: str = "", title: str = "") -> str | None:
        """``pid`` if it is a corpus id, else the id of the same text, else None."""
        if pid in self.ids:
            return pid
        return self.lookup(text, title) if text else None


def attach_corpus_ids(candidates: Sequence[Candidate], gold_index: GoldIndex) -> int:
    """Point given candidates at corpus ids (so corpus embeddings can be looked up).

    A candidate whose id is not a corpus id but whose text is in the corpus gets that
    passage's id; its own id moves to ``meta["source_id"]``. Candidates found neither way
    keep their id and get ``meta["in_corpus"] = False``.

    Returns:
        The number of candidates not found in the corpus.
    """
    missing = 0
    for c in candidates:
        pid = gold_index.resolve(c.id, c.text, c.title)
        if pid is None:
            c.meta["in_corpus"] = False
            missing += 1
        elif pid != c.id:
            c.meta["source_id"] = c.id
            c.id = pid
    return missing


def _gold_titles(question: Question) -> list[str]:
    titles = question.meta.get("gold_titles") or []
    return [titles[i] if i < len(titles) else "" for i in range(len(question.gold_texts))]


def gold_corpus_ids(question: Question, gold_index: GoldIndex) -> set[str]:
    """The corpus ids of ``question``'s gold passages (by id, then by text; see module doc)."""
    out = {g for g in question.gold_ids if g in gold_index.ids}
    for text, title in zip(question.gold_texts, _gold_titles(question), strict=True):
        pid = gold_index.lookup(text, title)
        if pid is not None:
            out.add(pid)
    return out


def label_candidates(
    question: Question, candidates: Sequence[Candidate], gold_ids: set[str]
) -> Sequence[Candidate]:
    """Fill each candidate's ``labels`` (in place) with every applicable source.

    - ``containment``: 1 if the candidate text contains an answer (DPR rules, text only);
      set only when the question has answers.
    - ``gold``: 1 if the candidate id is in ``gold_ids`` (see :func:`gold_corpus_ids`) or in
      ``question.gold_ids``, or its normalised text equals one of ``question.gold_texts``;
      set only when the question has gold passages.
    - ``qrels``: 1 if ``question.meta["qrels"][candidate.id] >= 2``, 0 if lower or unjudged;
      set only when the question carries qrels. The raw grade goes to ``meta["grade"]``.

    Labels already present from other sources (``given``, ``human``) are kept.

    Returns:
        ``candidates`` (the same objects).
    """
    if question.answers:
        contains = ContainmentLabeler(question.answers, question.answer_type)
        for c in candidates:
            c.labels["containment"] = int(contains(c.text))
    if question.gold_ids or question.gold_texts or gold_ids:
        ids = set(gold_ids) | set(question.gold_ids)
        texts: set[str] = set()
        for t, x in zip(_gold_titles(question), question.gold_texts, strict=True):
            texts.update(passage_text_variants(t, x))
        for c in candidates:
            hit = c.id in ids or any(v in texts for v in passage_text_variants(c.title, c.text))
            c.labels["gold"] = int(hit)
    qrels = question.meta.get("qrels")
    if qrels:
        for c in candidates:
            grade = qrels.get(c.id)
            if grade is not None:
                c.meta["grade"] = int(grade)
            c.labels["qrels"] = int(grade is not None and grade >= QRELS_POSITIVE_GRADE)
    return candidates
