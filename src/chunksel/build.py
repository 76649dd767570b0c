"""The build stage: questions -> K candidates -> labels -> benchmark instances.

``build_instances(dataset, ...)`` loads a dataset's questions (or a generic JSONL
file: its records' ``ctxs`` are the candidates, or, without ``ctxs``, candidates are
retrieved from ``corpus``, a benchmark corpus or the user's passage TSV/JSONL, embedded
and indexed on first use and cached), takes a deterministic sample when asked (``limit``),
retrieves the top-K candidates with MiniLM + FAISS or BM25 (``index="bm25"``: they carry
MiniLM embeddings too), or uses those the set ships with, labels every candidate with every
label source available, assigns the split, and writes the instances under
``CHUNKSEL_CACHE/instances/<dataset>/<key>/``. A finished build is reused; the expensive
parts under it (corpus embeddings, the index) have caches of their own.

The sample keeps the splits: a question's split is a hash of its normalised text, and
the sample takes the questions with the smallest hash of their id, so every profile is
a subset of every larger one and the split proportions stay ~70/10/20.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.config import cache_root, config_hash, data_root
from chunksel.data.grouped_splits import SPLIT_SCHEMES, check_split_scheme  # noqa: F401 (re-exported)
from chunksel.data.instances import load_instances, load_meta, save_instances
from chunksel.errors import ConfigError, DataError
from chunksel.types import SPLITS, Candidate, Instance, Question

BUILD_VERSION = 2  # 2: question embeddings travel with the instances
INDEXES = ("flat", "ivfpq", "bm25")  # MiniLM + FAISS (exact, IVF-PQ), or BM25 (selectors.bm25_lists)

# corpus-level parts reused by every build of one process (a bench run builds six
# datasets over two corpora): (corpus, index kind, data root) -> Retriever, and
# corpus name -> GoldIndex
_RETRIEVERS: dict[tuple[str, str, str], Any] = {}
_GOLD: dict[str, Any] = {}


@dataclass
class Built:
    """A finished build: where it lives, its instances, settings and statistics."""

    dataset: str
    path: Path
    instances: list[Instance]
    config: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def corpus(self) -> str | None:
        """The passage corpus behind the candidates: the benchmark corpus, the user's
        retrieval corpus, or (given ``ctxs``) a TSV of the input file's own passages
        (``passages.tsv`` in the build folder), written on first access."""
        if self.config.get("corpus"):
            return str(self.config["corpus"])
        if self.config.get("candidates") != "given" or not self.instances:
            return None
        path = self.path / "passages.tsv"
        if not path.is_file():
            write_passages_tsv(self.instances, path)
        return str(path)


def write_passages_tsv(instances: Sequence[Instance], path: str | Path) -> int:
    """Every distinct candidate (by id) of ``instances`` as a corpus TSV; returns the count."""
    seen: set[str] = set()
    path = Path(path)
    tmp = path.with_suffix(".part")
    with open(tmp, "w", encoding="utf-8", newline="") as fh:
        fh.write("id\ttext\ttitle\tsource\n")
        for inst in instances:
            for c in inst.candidates:
                if c.id in seen:
                    continue
                seen.add(c.id)
                cells = (c.id, c.text, c.title, "given")
                fh.write("\t".join(" ".join(str(x).split()) for x in cells) + "\n")
    tmp.replace(path)
    return len(seen)


def sample_questions(questions: Sequence[Question], limit: int | None) -> list[Question]:
    """A deterministic sample of at most ``limit`` questions (all when fewer), in input order."""
    if limit is None or limit >= len(questions):
        return list(questions)
    if limit < 1:
        raise ConfigError(f"--limit must be >= 1, got {limit}")

    def key(q: Question) -> str:
        return hashlib.sha256(f"sample:{q.id}".encode()).hexdigest()

    keep = {q.id for q in sorted(questions, key=key)[:limit]}
    return [q for q in questions if q.id in keep]


def _qa_checksum(dataset: str, root: Path) -> str:
    """A cheap fingerprint of a dataset's input files (names, sizes, first/last bytes)."""
    folder = root / "qa" / dataset
    h = hashlib.sha256()
    if folder.is_dir():
        for f in sorted(p for p in folder.rglob("*") if p.is_file()):
            st = f.stat()
            h.update(f"{f.relative_to(root)}:{st.st_size}".encode())
            with open(f, "rb") as fh:
                h.update(fh.read(4096))
                if st.st_size > 4096:
                    fh.seek(-4096, 2)
                    h.update(fh.read())
    return h.hexdigest()[:16]


def split_stats(instances: Sequence[Instance]) -> dict[str, dict[str, float]]:
    """Per split: questions, answerable@K, contested share, retrieval rank-1 accuracy."""
    out: dict[str, dict[str, float]] = {}
    for split in (*SPLITS, "all"):
        sub = [i for i in instances if split == "all" or i.split == split]
        n = len(sub)
        answerable = [i for i in sub if i.answerable()]
        contested = sum(i.contested() for i in sub)
        top1 = sum(bool(i.labels()[0]) for i in answerable) if answerable else 0
        out[split] = {
            "questions": n,
            "answerable": len(answerable),
            "answerable_pct": 100.0 * len(answerable) / n if n else 0.0,
            "contested_pct": 100.0 * contested / n if n else 0.0,
            "retrieval_rank1_pct": 100.0 * top1 / len(answerable) if answerable else 0.0,
        }
    return out


def format_stats(built: Built) -> str:
    """The per-split statistics table printed by ``chunksel build``."""
    k = built.config.get("k", "K")
    lines = [
        f"{built.dataset} (K={k}, label={built.config.get('label')}, candidates={built.config.get('candidates')})",
        f"{'split':<6} {'questions':>9} {'answerable@' + str(k):>13} {'contested':>10} {'retrieval@1':>12}",
    ]
    for split, s in built.stats.items():
        lines.append(
            f"{split:<6} {s['questions']:>9} {s['answerable_pct']:>12.1f}% {s['contested_pct']:>9.1f}% "
            f"{s['retrieval_rank1_pct']:>11.1f}%"
        )
    return "\n".join(lines)


def build_instances(
    dataset: str,
    k: int = 5,
    index: str = "flat",
    candidates: str = "retrieve",
    limit: int | None = None,
    input_path: str | Path | None = None,
    seed: int = 0,
    root: str | Path | None = None,
    progress: bool = True,
    rebuild: bool = False,
    corpus: str | Path | None = None,
    label: str | None = None,
    split: str = "question",
) -> Built:
    """Build (or reuse) the benchmark instances of ``dataset``; see the module docstring.

    Args:
        dataset: a name from :data:`chunksel.data.datasets.DATASETS`, or a label for
            ``input_path`` (a generic JSONL file).
        k: candidates per question (BM25: fewer where fewer passages share a term; none: left out).
        index: ``flat`` (exact inner product), ``ivfpq`` (the paper's IVF-PQ) or ``bm25``; given lists ignore it.
        candidates: ``retrieve`` from the corpus, or ``given`` (the lists a set ships).
        limit: deterministic sample of at most this many questions.
        input_path: a generic JSONL file (:mod:`chunksel.data.jsonl`) instead of a
            named dataset.
        corpus: for ``input_path`` records without ``ctxs``: the corpus to retrieve
            from (a benchmark corpus name, or a passage TSV or JSONL file).
        label: a label spec that replaces the dataset's default on every instance
            (``"semantic"``, ``"semantic|gold"``, ...); default the settings' label
            (:func:`chunksel.settings.current`: ``chunksel --label``, else ``$CHUNKSEL_LABEL``),
            else the dataset's own. Not part of the store's
            key: label sources are kept apart on the candidates, the spec only picks.
            Judge labels come from the sidecar files of ``chunksel label``.
        split: ``question`` (a hash of each question's text) or ``grouped`` (questions
            sharing an evidence passage share a split; see
            :mod:`chunksel.data.grouped_splits`). Part of the store's key when grouped.

    Raises:
        ConfigError: ``label`` names a source no candidate carries.
        DataError: ``label`` uses the judge's ``semantic`` source and some instances
            have not been judged (run ``chunksel label`` with the same ``--limit``).
    """
    from chunksel.data.datasets import DATASETS
    from chunksel.settings import current

    label = label or current().label

    if k < 1:
        raise ConfigError(f"--k must be >= 1, got {k}")
    check_split_scheme(split)
    if index not in INDEXES:
        raise ConfigError(f"unknown index {index!r}; use {', '.join(INDEXES)}")
    if candidates not in ("retrieve", "given"):
        raise ConfigError(f"unknown candidates mode {candidates!r}; use retrieve or given")
    if input_path is None and dataset not in DATASETS:
        raise ConfigError(f"unknown dataset {dataset!r}; known: {', '.join(DATASETS)}")
    if input_path is not None and dataset in DATASETS:
        raise ConfigError(
            f"--dataset {dataset!r} names a benchmark, but --input {str(input_path)!r} is your own file: its "
            "corpus statistics and labels would be the benchmark's; label it with another name "
            "(e.g. --dataset mine) or leave --dataset out"
        )
    droot = data_root(root) if input_path is None else None  # a user file needs no data root
    if corpus is not None:
        if input_path is None:
            raise ConfigError("--corpus applies to an --input file (a named dataset has its own corpus)")
        from chunksel.data.corpus import user_corpus_path

        corpus = user_corpus_path(corpus)
    spec = DATASETS.get(dataset)
    if input_path is not None:
        candidates = "given" if corpus is None else "retrieve"  # ctxs, or retrieval from corpus
    if spec is not None and spec.corpus is None:
        candidates = "given"  # e.g. wikiqa: human-labelled candidate sentences, no corpus
    config = {
        "version": BUILD_VERSION,
        "dataset": dataset,
        "k": k,
        "index": index if candidates == "retrieve" else None,
        "candidates": candidates,
        "limit": limit,
        "label": spec.default_label if spec else "given",
        "corpus": spec.corpus if spec else corpus,
        "inputs": _qa_checksum(dataset, droot) if input_path is None else _file_key(Path(input_path)),
    }
    if split != "question":  # the default scheme keeps the keys of earlier stores
        config["split"] = split
    if input_path is not None and corpus is not None:
        from chunksel.selectors.bm25_stats import corpus_checksum

        config["corpus_checksum"] = corpus_checksum(corpus)
    out = cache_root() / "instances" / dataset / config_hash(config)
    if not rebuild and (out / "instances.jsonl").is_file() and load_meta(out).get("config") == config:
        instances = load_instances(out)
        return _with_label(Built(dataset, out, instances, config, split_stats(instances)), label)

    if input_path is not None:
        instances = _build_from_jsonl(Path(input_path), dataset, k, index, limit, progress, corpus)
    else:
        instances = _build_named(dataset, spec, k, index, candidates, limit, droot, progress)
    instances = [i for i in instances if i.candidates]  # BM25: no corpus passage shares a term
    if not instances:
        raise DataError(f"{dataset}: no instances were built (no questions with candidates)")
    meta: dict = {"config": config}
    if split == "grouped":
        from chunksel.data.grouped_splits import apply_grouped_splits

        meta["evidence_overlap"] = apply_grouped_splits(instances)
    stats = split_stats(instances)
    meta["stats"] = stats
    save_instances(out, instances, meta=meta)
    from chunksel.labels.judge import attach_sidecar_labels

    attach_sidecar_labels(instances, out)
    return _with_label(Built(dataset, out, instances, config, stats), label)


def _with_label(built: Built, label: str | None) -> Built:
    """``built`` with every instance's label spec set to ``label`` (checked first)."""
    if not label:
        return built
    from chunksel.data.reference_labels import attach_reference, load_reference, names_reference
    from chunksel.types import parse_label_spec

    if names_reference(label):  # evaluation-only reference labels: keep the labelled questions
        kept = attach_reference(built.instances, load_reference(built.dataset))
        built = Built(built.dataset, built.path, kept, built.config, split_stats(kept))
    seen = {src for i in built.instances for c in i.candidates for src in c.labels}
    for src in parse_label_spec(label):
        if src not in seen:
            hint = _label_hint(built, src)
            raise ConfigError(
                f"label source {src!r} is on no candidate of {built.dataset} "
                f"(sources here: {', '.join(sorted(seen)) or 'none'}){hint}"
            )
        if src.split("@")[0] in ("semantic", "utility") and not names_reference(src):  # LLM labels (sidecars)
            from chunksel.labels.judge import missing_labels

            missing = missing_labels(built.instances, src)
            if missing:
                raise DataError(
                    f"{missing} of {len(built.instances)} {built.dataset} instances have candidates "
                    f"without the judge's {src!r} label; run chunksel label --dataset {built.dataset} "
                    f"with the same --limit/--k/--index"
                )
    for inst in built.instances:
        inst.label_source = label
    config = {**built.config, "label": label}
    return Built(built.dataset, built.path, built.instances, config, split_stats(built.instances))


def _label_hint(built: Built, src: str) -> str:
    """How to make the missing LLM label source ``src``: the ``chunksel label`` command for
    the same build (a benchmark), or the ``label`` field of an input file's ctxs."""
    from chunksel.data.datasets import DATASETS

    kind = src.split("@")[0]
    if kind not in ("semantic", "utility"):
        return ""
    if built.dataset not in DATASETS:
        return ("; chunksel label judges benchmark datasets only: for your own file, put 0/1 in each ctxs "
                "entry's 'label' field and use --label given")
    cfg = built.config
    cmd = f"chunksel label --dataset {built.dataset}{' --source utility' if kind == 'utility' else ''} " \
          f"--judge local --k {cfg.get('k', 5)}"
    if cfg.get("limit"):
        cmd += f" --limit {cfg['limit']}"
    if cfg.get("index") and cfg["index"] != "flat":
        cmd += f" --index {cfg['index']}"
    return f"; {'judge' if kind == 'semantic' else 'label'} it first: {cmd}"


def _file_key(path: Path) -> str:
    if not path.is_file():
        raise DataError(f"input file {str(path)!r} not found")
    from chunksel.config import file_checksum

    return file_checksum(path)


def _build_named(dataset, spec, k, index, candidates, limit, droot, progress) -> list[Instance]:
    from chunksel.data.datasets import given_candidates, load_questions
    from chunksel.labels.gold import GoldIndex

    questions = load_questions(dataset, root=droot, progress=progress)
    corpus = None
    if candidates == "given":
        given = given_candidates(dataset, root=droot)
        questions = [q for q in questions if given.get(q.id)]
        if not questions:
            raise DataError(f"{dataset}: the data ships no candidate lists of its own (use --candidates retrieve)")
        questions = sample_questions(questions, limit)
        cand_lists = [[_copy(c) for c in given[q.id][:k]] for q in questions]
        for cl in cand_lists:
            for r, c in enumerate(cl):
                c.rank = r
        if spec.corpus is not None:
            from chunksel.data.corpus import Corpus

            corpus = Corpus.load(spec.corpus, droot, progress=progress)
    else:
        from chunksel.selectors.bm25_lists import make_retriever

        questions = sample_questions(questions, limit)
        key = (spec.corpus, index, str(droot))
        if key not in _RETRIEVERS:
            _RETRIEVERS[key] = make_retriever(spec.corpus, index, root=droot, progress=progress)
        retriever = _RETRIEVERS[key]
        corpus = retriever.corpus
        cand_lists = retriever.retrieve(questions, k=k, progress=progress)
    gold_index = None
    if corpus is not None:
        gkey = f"{corpus.name}:{corpus.checksum}"
        if gkey not in _GOLD:
            _GOLD[gkey] = GoldIndex(corpus)
        gold_index = _GOLD[gkey]
    instances = _label(spec.default_label, questions, cand_lists, gold_index)
    if candidates == "given":
        _attach_embeddings(cand_lists, corpus, gold_index, droot, progress)
        _attach_question_embeddings(questions, progress)
    return instances


def _attach_question_embeddings(questions, progress: bool) -> None:
    """Give every question its retriever embedding (retrieval already did, where it ran)."""
    from chunksel.retrieval.encoder import Encoder

    todo = [q for q in questions if q.embedding is None]
    if todo:
        vecs = Encoder().encode_questions(todo, progress=progress)
        for q, v in zip(todo, vecs, strict=True):
            q.embedding = np.asarray(v, dtype=np.float32)


def _copy(c: Candidate) -> Candidate:
    return Candidate.from_dict(c.to_dict()) if c.embedding is None else c


def _label(label_spec, questions, cand_lists, gold_index) -> list[Instance]:
    from chunksel.data.splits import split_of
    from chunksel.data.text import normalise_question
    from chunksel.labels.gold import gold_corpus_ids, label_candidates

    instances = []
    for q, cands in zip(questions, cand_lists):
        gold = gold_corpus_ids(q, gold_index) if gold_index is not None else set()
        label_candidates(q, cands, gold)
        instances.append(
            Instance(question=q, candidates=cands, split=split_of(normalise_question(q.text)), label_source=label_spec)
        )
    return instances


def _attach_embeddings(cand_lists, corpus, gold_index, droot: Path | None, progress: bool) -> None:
    """Give every given candidate its retriever embedding: the corpus row when the
    passage is in the corpus (by id, else by normalised text), else encode it."""
    from chunksel.retrieval.encoder import Encoder

    encoder = Encoder()
    if corpus is not None:
        from chunksel.retrieval.embeddings import corpus_embeddings

        emb = corpus_embeddings(corpus, encoder, root=droot, progress=progress)
        for cl in cand_lists:
            for c in cl:
                pid = gold_index.resolve(c.id, c.text, c.title)
                row = corpus.row_of.get(pid) if pid is not None else None
                if row is not None:
                    c.embedding = np.array(emb[row], dtype=np.float32)
    todo = [c for cl in cand_lists for c in cl if c.embedding is None]
    if todo:
        vecs = encoder.encode([(c.title + " " + c.text).strip() for c in todo], progress=progress)
        for c, v in zip(todo, vecs):
            c.embedding = v.astype(np.float32)


def _build_from_jsonl(path: Path, dataset: str, k: int, index: str, limit, progress,
                      corpus: str | None = None) -> list[Instance]:
    from chunksel.data.jsonl import read_generic_jsonl

    records = read_generic_jsonl(path)
    questions = sample_questions([q for q, _ in records], limit)
    keep = {q.id for q in questions}
    records = [(q, c) for q, c in records if q.id in keep]
    given = [(q, c) for q, c in records if c]
    if given and len(given) != len(records):
        raise DataError(f"{path}: either every record has ctxs or none does")
    questions = [q for q, _ in records]
    if given:
        if corpus is not None:
            raise DataError(f"{path}: the records carry ctxs (their candidates); leave out --corpus")
        cand_lists = [[_copy(x) for x in c[:k]] for _, c in records]
        for cl in cand_lists:
            for r, c in enumerate(cl):
                c.rank = r
        _attach_embeddings(cand_lists, None, None, None, progress)
        _attach_question_embeddings(questions, progress)
        return _label("given|containment", questions, cand_lists, None)
    if corpus is None:
        raise DataError(
            f"{path}: records without ctxs need a corpus to retrieve from: give --corpus "
            "(a corpus name, or a passage TSV/JSONL file), or add ctxs to each record"
        )
    from chunksel.labels.gold import GoldIndex
    from chunksel.selectors.bm25_lists import make_retriever

    key = (str(corpus), index, "")
    if key not in _RETRIEVERS:
        _RETRIEVERS[key] = make_retriever(corpus, index, progress=progress)
    retriever = _RETRIEVERS[key]
    cand_lists = retriever.retrieve(questions, k=k, progress=progress)
    has_gold = any(q.gold_ids or q.gold_texts for q in questions)
    gold_index = None
    if has_gold:
        gkey = f"{retriever.corpus.name}:{retriever.corpus.checksum}"
        if gkey not in _GOLD:
            _GOLD[gkey] = GoldIndex(retriever.corpus)
        gold_index = _GOLD[gkey]
    return _label("gold|containment" if has_gold else "containment", questions, cand_lists, gold_index)


# ------------------------------------------------------------------ features
def generator_store(generator: str | None = None):
    """The feature store of a generator (default SmolLM2) and the loaded model."""
    from chunksel.features.store import FeatureStore
    from chunksel.llm.models import load_generator

    model, tokenizer, gen_id = load_generator(generator)
    return FeatureStore.open(gen_id, tokenizer), model, tokenizer


def extract_question_features(
    questions: Sequence[Question], generator: str | None = None, batch_size: int = 32, progress: bool = True
):
    """Extract h and r for ``questions`` into the store (only the missing ones)."""
    store, model, tokenizer = generator_store(generator)
    store.extract(list(questions), model, tokenizer, batch_size=batch_size, progress=progress)
    return store


def features_for(instances: Sequence[Instance], selector, generator: str | None = None, progress: bool = True):
    """The question features a selector needs (None unless it reads the warm-up pass:
    ``query_cost`` names it and, for the prototype family, its ``blocks`` include hs or rw)."""
    from chunksel.selectors.provenance import selector_inputs

    if "warmup" not in selector_inputs(selector):
        return None
    return extract_question_features([i.question for i in instances], generator, progress=progress)
