"""The benchmark datasets: registry, question loading with dedup, given candidates.

``load_questions(name)`` reads every source of a dataset (docs/architecture.md, "How to add a
dataset"), gives each question the id ``dataset:source:native-id`` (the 0-based line
where a file has no id), and deduplicates within the dataset by
:func:`~chunksel.data.text.normalise_question`: the first occurrence (in source order)
keeps its id and text; answers, gold ids/texts and qrels of later duplicates are merged
into it, and their ids are listed in ``meta["merged_ids"]``, their sources in
``meta["sources"]``.

``given_candidates(name)`` returns the candidate lists that sources ship themselves (e5
top-3, BM25 top-20, S2RAG DPR top-25, HotpotQA paragraphs, WikiQA sentences), keyed by
the ids ``load_questions`` gives.

Typical build flow (one dataset)::

    questions = load_questions("nq")
    index = GoldIndex(Corpus.load(DATASETS["nq"].corpus))
    for q in questions:
        cands = retrieve(q, k)                      # or given_candidates("nq")[q.id]
        label_candidates(q, cands, gold_corpus_ids(q, index))
        inst = Instance(q, cands, split_of(normalise_question(q.text)),
                        DATASETS["nq"].default_label)
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chunksel.config import data_root, show_progress
from chunksel.data.loaders import dpr_topics, hotpotqa, msmarco, popqa, squad2, wikiqa
from chunksel.data.loaders.common import Record
from chunksel.data.splits import split_of
from chunksel.data.text import normalise_question
from chunksel.errors import ConfigError
from chunksel.types import Candidate, Question, parse_label_spec

Reader = Callable[[Path], list[Record]]


@dataclass(frozen=True)
class DatasetSpec:
    """A benchmark dataset.

    Attributes:
        name: the ``--dataset`` name.
        corpus: the corpus its retrieval runs against (``wiki-w100``, ``msmarco-sub``) or
            None when only given candidates exist (WikiQA).
        default_label: the label spec of its instances (e.g. ``"containment|gold"``).
        description: one line.
        sources: ordered source name -> reader; the order decides which duplicate keeps
            its id.
        candidate_only: sources that only attach given candidates to other sources'
            questions (the TriviaQA / NQ e5 top-3 lists, which map to DPR test lines).
        display_name: how reports name it.
        stats_corpus: the corpus whose term statistics its BM25 / LETOR features read
            (default: ``corpus``; WikiQA, which has no corpus of its own: the Wikipedia one).
        benchmark: one of the study's datasets (``chunksel bench``), in registry order; the
            others (WikiQA) are only held out.

    The registry is the one record of a dataset: the study's order, the reports' names and
    the statistics corpus all come from it (docs/architecture.md, "How to add a dataset").
    """

    name: str
    corpus: str | None
    default_label: str
    description: str
    sources: Mapping[str, Reader] = field(repr=False)
    candidate_only: frozenset[str] = frozenset()
    display_name: str = ""
    stats_corpus: str | None = None
    benchmark: bool = True

    @property
    def statistics_corpus(self) -> str | None:
        """The corpus of its term statistics: ``stats_corpus``, else ``corpus``."""
        return self.stats_corpus or self.corpus


DATASETS: dict[str, DatasetSpec] = {  # the study's order: the paper's three datasets first
    "triviaqa": DatasetSpec(
        "triviaqa",
        "wiki-w100",
        "containment",
        "TriviaQA open (DPR dev + test topics); e5 top-3 lists for 999 test questions",
        dpr_topics.TRIVIAQA_SOURCES,
        frozenset({"e5top3"}),
        display_name="TriviaQA",
    ),
    "popqa": DatasetSpec(
        "popqa",
        "wiki-w100",
        "containment|gold",
        "PopQA: NeuroPath (gold paragraphs) + e5 top-3 set + S2RAG DPR top-25 set",
        popqa.SOURCES,
        display_name="PopQA",
    ),
    "msmarco": DatasetSpec(
        "msmarco",
        "msmarco-sub",
        "qrels|gold",
        "MS MARCO: TREC DL 2019-2021 graded qrels, 600-query BM25 top-20, QA sample gold",
        msmarco.SOURCES,
        display_name="MS MARCO",
    ),
    "nq": DatasetSpec(
        "nq",
        "wiki-w100",
        "containment|gold",
        "NQ-open (DPR dev + test topics) with oracle gold passages; e5 top-3 lists",
        dpr_topics.NQ_SOURCES,
        frozenset({"e5top3"}),
        display_name="NQ",
    ),
    "squad2": DatasetSpec(
        "squad2",
        "wiki-w100",
        "containment|gold",
        "SQuAD 2.0 dev half (answerable questions; gold = the question's paragraph)",
        squad2.SOURCES,
        display_name="SQuAD 2.0",
    ),
    "hotpotqa": DatasetSpec(
        "hotpotqa",
        "wiki-w100",
        "gold",
        "HotpotQA: IRCoT dev subsample + AMOR dev/test; gold = supporting paragraphs",
        hotpotqa.SOURCES,
        display_name="HotpotQA",
    ),
    "wikiqa": DatasetSpec(
        "wikiqa",
        None,
        "human",
        "WikiQA answer-sentence selection (extra): given candidates, human labels",
        wikiqa.SOURCES,
        display_name="WikiQA",
        # its candidate sentences come from Wikipedia articles: the Wikipedia passages' statistics
        stats_corpus="wiki-w100",
        benchmark=False,
    ),
}

#: the study's datasets, in report order
BENCHMARK_DATASETS: tuple[str, ...] = tuple(n for n, s in DATASETS.items() if s.benchmark)

for _spec in DATASETS.values():  # a spec with an unknown source name is a programming error
    parse_label_spec(_spec.default_label)


def get_spec(name: str) -> DatasetSpec:
    """The :class:`DatasetSpec` of ``name``; ConfigError listing the known names otherwise."""
    try:
        return DATASETS[name]
    except KeyError:
        raise ConfigError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}") from None


def _read_sources(
    spec: DatasetSpec, root: str | os.PathLike | None, progress: bool, include_unanswerable: bool
) -> list[tuple[str, list[Record]]]:
    from tqdm.auto import tqdm

    base = data_root(root)
    out = []
    for src, reader in tqdm(
        list(spec.sources.items()),
        desc=f"reading {spec.name}",
        unit=" source",
        disable=not show_progress(progress),
        leave=False,
    ):
        if spec.name == "squad2":
            records = squad2.read_squad2(base, include_unanswerable=include_unanswerable)
        else:
            records = reader(base)
        out.append((src, records))
    return out


def _merge_into(kept: Question, dup: Question) -> None:
    for attr in ("answers", "gold_ids"):
        have = getattr(kept, attr)
        have.extend(x for x in getattr(dup, attr) if x not in have)
    titles = kept.meta.setdefault("gold_titles", [""] * len(kept.gold_texts))
    titles.extend([""] * (len(kept.gold_texts) - len(titles)))
    dup_titles = dup.meta.get("gold_titles") or []
    for i, t in enumerate(dup.gold_texts):
        if t not in kept.gold_texts:
            kept.gold_texts.append(t)
            titles.append(dup_titles[i] if i < len(dup_titles) else "")
    if not kept.meta["gold_titles"]:
        del kept.meta["gold_titles"]
    if "qrels" in dup.meta:
        qrels = kept.meta.setdefault("qrels", {})
        for pid, grade in dup.meta["qrels"].items():
            qrels[pid] = max(grade, qrels.get(pid, grade))
    kept.meta["merged_ids"].append(dup.id)
    src = dup.meta.get("source")
    if src and src not in kept.meta["sources"]:
        kept.meta["sources"].append(src)


def _dedup(
    name: str, per_source: list[tuple[str, list[Record]]], candidate_only: frozenset[str]
) -> tuple[list[Question], dict[str, str]]:
    """Deduplicated questions and an alias map (every raw id -> the kept id)."""
    kept: dict[str, Question] = {}
    alias: dict[str, str] = {}
    for src, records in per_source:
        if src in candidate_only:
            continue
        for rec in records:
            q = rec.question
            key = normalise_question(q.text)
            if not key:
                continue  # an empty question carries nothing to ask
            if key not in kept:
                q.dataset = name
                q.meta.setdefault("sources", [q.meta.get("source", src)])
                q.meta.setdefault("merged_ids", [])
                kept[key] = q
                alias[q.id] = q.id
            else:
                _merge_into(kept[key], q)
                alias[q.id] = kept[key].id
    return list(kept.values()), alias


def load_questions(
    name: str,
    root: str | os.PathLike | None = None,
    progress: bool = True,
    include_unanswerable: bool = False,
) -> list[Question]:
    """Every question of a benchmark dataset, deduplicated, in source order.

    Args:
        name: a key of :data:`DATASETS`.
        root: the data root (default ``$CHUNKSEL_DATA``).
        progress: show a progress bar over the sources.
        include_unanswerable: SQuAD 2.0 only: also return the unanswerable questions
            (``meta["unanswerable"]``, no answers, no gold), kept aside by default.

    Raises:
        ConfigError: unknown dataset name. DataError: missing data root or file.
    """
    spec = get_spec(name)
    per_source = _read_sources(spec, root, progress, include_unanswerable)
    questions, _ = _dedup(spec.name, per_source, spec.candidate_only)
    return questions


def given_candidates(
    name: str,
    root: str | os.PathLike | None = None,
    source: str | None = None,
    progress: bool = False,
) -> dict[str, list[Candidate]]:
    """The candidate lists a dataset's sources ship, keyed by ``load_questions`` ids.

    Candidate ids follow the corpus's id schemes (``e5top3:DATASET:ID:J``, ``dpr:N``,
    ``popqa-gs:ID:J``, ``msmarco:PID``, ``hotpot-ircot:QID:CTX``, ``hotpot-amor:QID:J``);
    the corpus deduplicated passages by text, so an id may be absent from it (resolve with
    :meth:`chunksel.labels.gold.GoldIndex.resolve`). WikiQA's ids are ``wikiqa:SPLIT:N:J``.
    Source labels are already set: ``given`` (e5 has_answer, HotpotQA supporting),
    ``qrels`` (BM25 top-20 official label), ``human`` (WikiQA).

    When duplicates of one question carry lists from several sources, the first source (in
    :attr:`DatasetSpec.sources` order) wins unless ``source`` picks one.

    Candidates without text are dropped (98 empty category pages in S2RAG's lists); the
    others keep the source's order, ``rank`` renumbered, the source's in ``meta["source_rank"]``.

    Returns:
        {question id: candidates in the source's order}; questions without a list are absent.
    """
    spec = get_spec(name)
    if source is not None and source not in spec.sources:
        raise ConfigError(
            f"dataset {name!r} has no source {source!r}; known: {', '.join(spec.sources)}"
        )
    per_source = _read_sources(spec, root, progress, include_unanswerable=False)
    _, alias = _dedup(spec.name, per_source, spec.candidate_only)
    out: dict[str, list[Candidate]] = {}
    for src, records in per_source:
        if source is not None and src != source:
            continue
        for rec in records:
            if not rec.candidates:
                continue
            qid = alias.get(rec.question.id)
            if qid is not None and qid not in out:
                out[qid] = _drop_empty(rec.candidates)
    return out


def _drop_empty(cands: list[Candidate]) -> list[Candidate]:
    """Drop candidates without text (S2RAG lists some empty category pages); ranks renumbered."""
    kept = [c for c in cands if c.text.strip()]
    if len(kept) != len(cands):
        for j, c in enumerate(kept):
            c.meta.setdefault("source_rank", c.rank)
            c.rank = j
    return kept


def describe(name: str, root: str | os.PathLike | None = None) -> dict[str, Any]:
    """Counts of a dataset: questions, per source (raw and after dedup), per split.

    Returns:
        ``{"dataset", "questions", "raw_per_source", "kept_per_source", "per_split",
        "with_answers", "with_gold", "with_qrels", "given_candidate_lists"}``;
        ``given_candidate_lists`` counts the sources' lists before deduplication.
    """
    spec = get_spec(name)
    per_source = _read_sources(spec, root, progress=False, include_unanswerable=False)
    questions, _ = _dedup(spec.name, per_source, spec.candidate_only)
    raw = {src: len(recs) for src, recs in per_source}
    kept = Counter(q.meta["sources"][0] for q in questions)
    splits = Counter(split_of(normalise_question(q.text)) for q in questions)
    return {
        "dataset": spec.name,
        "questions": len(questions),
        "raw_per_source": raw,
        "kept_per_source": dict(kept),
        "per_split": {s: splits.get(s, 0) for s in ("train", "val", "test")},
        "with_answers": sum(bool(q.answers) for q in questions),
        "with_gold": sum(bool(q.gold_ids or q.gold_texts) for q in questions),
        "with_qrels": sum(bool(q.meta.get("qrels")) for q in questions),
        "given_candidate_lists": sum(1 for _, recs in per_source for r in recs if r.candidates),
    }
