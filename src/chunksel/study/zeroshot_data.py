"""Benchmark instances of *unseen* collections, for the zero-shot evaluation of the
pretrained chunk selectors: two BEIR test collections (NFCorpus, ArguAna) and TREC DL
2019/2020 over ``msmarco-sub``.

Every instance carries what the selectors read: ``question.text`` and its MiniLM
embedding, and per candidate ``id``, ``title``, ``text``, ``score`` (the retriever's),
``rank`` (0-based), MiniLM ``embedding`` and labels. Two retrievers make the lists:

- ``minilm``: exact inner-product top-K (FAISS flat index, :class:`Retriever`) over the
  collection's own corpus embedded with all-MiniLM-L6-v2 (the packaged
  sentence-transformers :class:`Encoder`). A BEIR corpus is embedded on first use into the
  resumable shard cache of :func:`corpus_embeddings` (``cache_root()/embeddings/``, keyed
  by the corpus file's checksum, :data:`BEIR_SHARD_ROWS` rows a shard, so an interrupted
  run loses at most one shard); ``msmarco-sub`` uses its shipped precomputed embeddings.
- ``bm25``: bm25s (Lucene, k1 = 1.5, b = 0.75, the project's tokenisation) over the same
  corpus (:func:`chunksel.selectors.bm25_lists.bm25_top_k`, shared with the build stage's
  ``index="bm25"``). The top of bm25s's float32 ranking (every document tied with the last one kept)
  is re-scored with :meth:`BM25Stats.score_docs`, so a candidate's ``score`` is exactly
  what the BM25 selector gives it (``bm25_matrix`` with the corpus of
  :func:`beir_corpus_path` / ``msmarco-sub``); ties go to the lower corpus row. A document
  sharing no term with the question is never a candidate, so a list may be shorter than K,
  or empty (NFCorpus's one-word queries, no stemming: 25 of 323). No selector scores an
  empty list (``Selector.score`` refuses it): leave those questions out and count them
  (``instance_stats``'s ``empty_lists``).

Candidates carry MiniLM embeddings whichever retriever ranked them. A BEIR corpus is read
from ``corpus.jsonl.gz`` into a TSV under ``cache_root()/zeroshot/corpora/`` (whitespace
runs collapsed, which changes neither MiniLM's nor BM25's tokens), the layout the
project's corpus readers take.

Labels (:data:`LABEL_SOURCE`, the instances' default spec): a candidate is positive at the
collection's top grade (:data:`BEIR_TOP_GRADE`: NFCorpus 2, ArguAna 1) and, for TREC DL,
at grade >= 2 (the TREC convention); :data:`GRADE_SOURCE` holds the graded judgement (0 when
unjudged; as a label spec it means "any grade >= 1"). ``Question.meta["qrels"]`` keeps every
judgement of the question (``{doc_id: grade}``, as the MS MARCO loader does), so
:func:`graded_ndcg_at_10` takes its ideal DCG from all judged documents, as trec_eval does,
and ``meta["positive_grade"]`` the binary threshold. BEIR convention: a candidate whose id
is the query's own id is dropped (ArguAna's queries are corpus arguments).

Built instances are cached under ``cache_root()/zeroshot/<dataset>/`` keyed by a hash of
the settings and the input files' checksums (:func:`chunksel.data.instances.save_instances`).
"""

from __future__ import annotations

import csv
import gzip
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.config import cache_root, config_hash, data_root, file_checksum
from chunksel.errors import ConfigError, DataError
from chunksel.labels.gold import QRELS_POSITIVE_GRADE
from chunksel.selectors.bm25_lists import BM25_B, BM25_K1, bm25_top_k
from chunksel.types import Candidate, Instance, Question, candidate_mask

#: the BEIR collections under ``$CHUNKSEL_DATA/beir/`` and their top grade (= positive)
BEIR_TOP_GRADE: dict[str, int] = {"nfcorpus": 2, "arguana": 1}
RETRIEVERS = ("minilm", "bm25")
TREC_DL_YEARS = ("19", "20")
#: the intended list length of each retriever on TREC DL
TREC_DL_K = {"bm25": 100, "minilm": 20}
#: the binary label source (each instance's default spec) and the graded one
LABEL_SOURCE = "qrels"
GRADE_SOURCE = "grade"
#: rows per embedding cache shard of a BEIR corpus (the resume granularity)
BEIR_SHARD_ROWS = 256
CUTOFF = 10
VERSION = 1
BEIR_FILES = ("corpus.jsonl.gz", "queries.jsonl", "qrels/test.tsv")


# ------------------------------------------------------------------ inputs
def _check_retriever(retriever: str, k: int) -> None:
    if retriever not in RETRIEVERS:
        raise ConfigError(f"unknown retriever {retriever!r}; use one of {', '.join(RETRIEVERS)}")
    if not isinstance(k, int) or k < 1:
        raise ConfigError(f"k must be an integer >= 1, got {k!r}")


def _check_limit(limit: int | None) -> None:
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"limit must be None or an integer >= 1, got {limit!r}")


def beir_folder(name: str, root: str | Path | None = None) -> Path:
    """``<data root>/beir/<name>/``, checked to hold the BEIR files."""
    if name not in BEIR_TOP_GRADE:
        raise ConfigError(f"unknown BEIR collection {name!r}; known: {', '.join(BEIR_TOP_GRADE)}")
    droot = data_root(root)
    folder = droot / "beir" / name
    missing = [f for f in BEIR_FILES if not (folder / f).is_file()]
    if missing:
        raise DataError(
            f"BEIR collection {name!r} not found: expected {folder} holding {', '.join(BEIR_FILES)} "
            f"(missing {', '.join(missing)}); CHUNKSEL_DATA (here {droot}) must be the benchmark data folder"
        )
    return folder


def _data_file(root: Path, rel: str) -> Path:
    path = root / rel
    if not path.is_file():
        raise DataError(f"data file {str(path)!r} not found: CHUNKSEL_DATA (here {root}) must be the "
                        f"benchmark data folder, with {rel} in it")
    return path


def beir_corpus_path(name: str, root: str | Path | None = None) -> Path:
    """The BEIR corpus as a corpus TSV (``id, text, title, source``), written once under
    ``cache_root()/zeroshot/corpora/`` and named by the source file's checksum. Give it as
    ``corpus=`` to the BM25-based selectors."""
    src = beir_folder(name, root) / "corpus.jsonl.gz"
    out = cache_root() / "zeroshot" / "corpora" / f"beir-{name}.{file_checksum(src)}.tsv"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".part")
    seen: set[str] = set()
    with gzip.open(src, "rt", encoding="utf-8") as fh, open(tmp, "w", encoding="utf-8", newline="") as dst:
        dst.write("id\ttext\ttitle\tsource\n")
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(f"{src}:{lineno}: malformed JSON ({err.msg})") from None
            pid = " ".join(str(rec.get("_id", "")).split())
            if not pid or pid in seen:
                raise DataError(f"{src}:{lineno}: {'duplicate' if pid else 'missing'} _id {pid!r}")
            seen.add(pid)
            cells = (pid, str(rec.get("text") or ""), str(rec.get("title") or ""), f"beir-{name}")
            dst.write("\t".join(" ".join(c.split()) for c in cells) + "\n")
    tmp.replace(out)
    return out


def read_beir_qrels(path: Path) -> dict[str, dict[str, int]]:
    """``qrels/test.tsv`` (header ``query-id corpus-id score``) -> ``{qid: {doc_id: grade}}``."""
    out: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8", newline="") as fh:
        rows = csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(rows, None)
        if header is None or [h.strip() for h in header[:3]] != ["query-id", "corpus-id", "score"]:
            raise DataError(f"{path}: expected the header 'query-id<TAB>corpus-id<TAB>score', got {header}")
        for lineno, row in enumerate(rows, 2):
            if not row:
                continue
            if len(row) < 3:
                raise DataError(f"{path}:{lineno}: expected 'query-id<TAB>corpus-id<TAB>score'")
            try:
                out.setdefault(row[0].strip(), {})[row[1].strip()] = int(row[2])
            except ValueError:
                raise DataError(f"{path}:{lineno}: score {row[2]!r} is not an integer") from None
    return out


def read_beir_questions(name: str, root: str | Path | None = None, limit: int | None = None) -> list[Question]:
    """The judged test queries of a BEIR collection, in ``queries.jsonl`` order (the first
    ``limit`` of them), with ``meta["qrels"]`` and ``meta["positive_grade"]``."""
    _check_limit(limit)
    folder = beir_folder(name, root)
    qrels = read_beir_qrels(folder / "qrels" / "test.tsv")
    top = max((g for judged in qrels.values() for g in judged.values()), default=0)
    if top != BEIR_TOP_GRADE[name]:
        raise DataError(f"{folder}: the top grade of qrels/test.tsv is {top}, expected {BEIR_TOP_GRADE[name]}")
    out: list[Question] = []
    with open(folder / "queries.jsonl", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if limit is not None and len(out) >= limit:
                break
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(f"{folder / 'queries.jsonl'}:{lineno}: malformed JSON ({err.msg})") from None
            qid = str(rec.get("_id", ""))
            if qid not in qrels:
                continue  # another split's query, or unjudged
            out.append(Question(id=f"{name}:{qid}", text=" ".join(str(rec.get("text") or "").split()),
                                dataset=name, meta={"source": f"beir:{name}", "qid": qid, "qrels": qrels[qid],
                                                    "positive_grade": BEIR_TOP_GRADE[name]}))
    return out


# ------------------------------------------------------------------ public builders
def beir_instances(name: str, retriever: str, k: int = 20, progress: bool = True, limit: int | None = None,
                   root: str | Path | None = None, encoder: Any = None, rebuild: bool = False) -> list[Instance]:
    """The test instances of BEIR collection ``name`` (``nfcorpus``, ``arguana``): its judged
    test queries (the first ``limit`` in file order), each with the top ``k`` candidates of
    ``retriever`` (``minilm`` or ``bm25``) over the whole corpus; see the module doc.

    ``encoder`` (default the packaged all-MiniLM-L6-v2) embeds questions and corpus.
    Cached: a second call with the same settings and data reads the instances back."""
    if name not in BEIR_TOP_GRADE:
        raise ConfigError(f"unknown BEIR collection {name!r}; known: {', '.join(BEIR_TOP_GRADE)}")
    _check_retriever(retriever, k)
    _check_limit(limit)
    folder = beir_folder(name, root)
    enc = encoder if encoder is not None else _encoder()
    config = {"version": VERSION, "dataset": name, "retriever": retriever, "k": k, "limit": limit,
              "encoder": enc.model_id, "files": {f: file_checksum(folder / f) for f in BEIR_FILES}}
    if retriever == "bm25":
        config.update(k1=BM25_K1, b=BM25_B)

    def build() -> list[Instance]:
        from chunksel.data.corpus import Corpus
        from chunksel.retrieval.embeddings import corpus_embeddings

        questions = read_beir_questions(name, root, limit)
        tsv = beir_corpus_path(name, root)
        corpus = Corpus.load(tsv, progress=progress)
        emb = corpus_embeddings(corpus, enc, progress=progress, use_precomputed=False, shard_rows=BEIR_SHARD_ROWS)
        return _instances(questions, corpus, tsv, emb, enc, retriever, k, progress)

    return _cached(name, config, build, rebuild)


def trec_dl_instances(year: str | int, retriever: str, k: int | None = None, progress: bool = True,
                      limit: int | None = None, root: str | Path | None = None, encoder: Any = None,
                      rebuild: bool = False) -> list[Instance]:
    """TREC DL 20``year`` (``"19"`` or ``"20"``) passage topics with graded NIST qrels over
    the ``msmarco-sub`` corpus: the top ``k`` of ``retriever`` (default :data:`TREC_DL_K`:
    bm25 100, minilm 20) for every judged topic (the first ``limit``, topic-file order).
    MiniLM corpus embeddings are the shipped precomputed ones (checked, never re-encoded)."""
    from chunksel.data.corpus import CORPORA, PRECOMPUTED

    yy = str(year)[-2:] if str(year) in ("2019", "2020") else str(year)
    if yy not in TREC_DL_YEARS:
        raise ConfigError(f"unknown TREC DL year {year!r}; use one of {', '.join(TREC_DL_YEARS)}")
    if retriever in TREC_DL_K and k is None:
        k = TREC_DL_K[retriever]
    _check_retriever(retriever, k)  # type: ignore[arg-type]
    _check_limit(limit)
    droot = data_root(root)
    files = [f"qa/msmarco/trec-dl/topics.dl{yy}.tsv", f"qa/msmarco/trec-dl/qrels.dl{yy}-passage.txt",
             CORPORA["msmarco-sub"], PRECOMPUTED["msmarco-sub"]]
    enc = encoder if encoder is not None else _encoder()
    config = {"version": VERSION, "dataset": f"trec-dl-20{yy}", "retriever": retriever, "k": k, "limit": limit,
              "encoder": enc.model_id, "files": {f: file_checksum(_data_file(droot, f)) for f in files}}
    if retriever == "bm25":
        config.update(k1=BM25_K1, b=BM25_B)

    def build() -> list[Instance]:
        from chunksel.data.corpus import Corpus
        from chunksel.data.loaders.msmarco import read_trec_dl
        from chunksel.retrieval.embeddings import corpus_embeddings

        questions = [r.question for r in read_trec_dl(droot, yy)][:limit]
        for q in questions:
            q.dataset = f"trec-dl-20{yy}"
            q.meta.update(qid=q.id.rsplit(":", 1)[1], positive_grade=QRELS_POSITIVE_GRADE)
        tsv = droot / CORPORA["msmarco-sub"]
        corpus = Corpus.load("msmarco-sub", droot, progress=progress)
        emb = corpus_embeddings(corpus, enc, root=droot, progress=progress, use_precomputed=True)
        return _instances(questions, corpus, tsv, emb, enc, retriever, k, progress)

    return _cached(f"trec-dl-20{yy}", config, build, rebuild)


def _encoder() -> Any:
    from chunksel.retrieval.encoder import Encoder

    return Encoder()


# ------------------------------------------------------------------ retrieval and labels
def _instances(questions: list[Question], corpus, tsv: Path, emb: np.ndarray, encoder, retriever: str, k: int,
               progress: bool) -> list[Instance]:
    if not questions:
        raise DataError("no judged questions to build instances of")
    if k > len(corpus):
        raise ConfigError(f"k={k} exceeds the {len(corpus)} passages of corpus {corpus.name!r}")
    if retriever == "minilm":
        lists = _dense_lists(questions, corpus, emb, encoder, k, progress)
    else:
        lists = bm25_top_k(questions, corpus, tsv, emb, k, progress, exclude=[q.meta["qid"] for q in questions])
        vecs = encoder.encode_questions(questions, progress=progress)
        for q, v in zip(questions, vecs, strict=True):
            q.embedding = np.asarray(v, dtype=np.float32)
    out = []
    for q, cands in zip(questions, lists, strict=True):
        q.meta["retriever"] = retriever
        _label(q, cands)
        out.append(Instance(question=q, candidates=cands, split="test", label_source=LABEL_SOURCE))
    return out


def _dense_lists(questions, corpus, emb, encoder, k: int, progress: bool) -> list[list[Candidate]]:
    """MiniLM exact top-k (one more where a question's own id is in the corpus)."""
    from chunksel.retrieval.embeddings import corpus_key
    from chunksel.retrieval.index import cached_index
    from chunksel.retrieval.retriever import Retriever

    index = cached_index(emb, corpus_key(corpus), encoder.model_id, kind="flat", progress=False)
    dense = Retriever(corpus, emb, index, encoder)
    fetch = min(len(corpus), k + any(q.meta["qid"] in corpus.row_of for q in questions))
    lists = dense.retrieve(questions, k=fetch, progress=progress)
    return [[c for c in cands if c.id != q.meta["qid"]][:k] for q, cands in zip(questions, lists, strict=True)]


def _label(q: Question, cands: list[Candidate]) -> None:
    """Ranks 0..n-1, the binary label at the positive grade, the graded label."""
    qrels, positive = q.meta["qrels"], int(q.meta["positive_grade"])
    for rank, c in enumerate(cands):
        grade = int(qrels.get(c.id, 0))
        c.rank = rank
        c.labels[LABEL_SOURCE] = int(grade >= positive)
        c.labels[GRADE_SOURCE] = grade
        if c.id in qrels:
            c.meta["grade"] = grade


# ------------------------------------------------------------------ cache
def instances_dir(dataset: str, config: dict[str, Any]) -> Path:
    """The cache folder of one build."""
    return cache_root() / "zeroshot" / dataset / f"{config['retriever']}-k{config['k']}-{config_hash(config)}"


def _cached(dataset: str, config: dict[str, Any], build: Callable[[], list[Instance]],
            rebuild: bool) -> list[Instance]:
    from chunksel.data.instances import INSTANCES, load_instances, load_meta, save_instances

    folder = instances_dir(dataset, config)
    if not rebuild and (folder / INSTANCES).is_file() and load_meta(folder).get("config") == config:
        return load_instances(folder)
    instances = build()
    save_instances(folder, instances, meta={"config": config, "stats": instance_stats(instances)})
    return instances


def instance_stats(instances: Sequence[Instance]) -> dict[str, float]:
    """Questions, mean list length, mean positives per list (binary label), the share of
    questions with a positive, the mean judged candidates per list, and the lists shorter
    than the longest (BM25: few documents share a term) or empty."""
    n = len(instances)
    longest = max((len(i.candidates) for i in instances), default=0)
    pos = [int(i.labels(LABEL_SOURCE).sum()) for i in instances]
    return {
        "questions": n,
        "mean_candidates": float(np.mean([len(i.candidates) for i in instances])) if n else 0.0,
        "mean_positives": float(np.mean(pos)) if n else 0.0,
        "answerable_pct": 100.0 * sum(p > 0 for p in pos) / n if n else 0.0,
        "mean_judged": float(np.mean([sum(c.id in i.question.meta.get("qrels", {}) for c in i.candidates)
                                      for i in instances])) if n else 0.0,
        "short_lists": sum(0 < len(i.candidates) < longest for i in instances),
        "empty_lists": sum(not i.candidates for i in instances),
    }


# ------------------------------------------------------------------ metrics
def _ranking(scores: np.ndarray, instances: Sequence[Instance]) -> list[list[Candidate]]:
    """Each instance's candidates re-ordered by ``scores`` (ties: retrieval rank), top 10."""
    from chunksel.eval.metrics import rank_matrix

    s = np.asarray(scores, dtype=np.float64)
    longest = max((len(i.candidates) for i in instances), default=0)
    if s.ndim != 2 or s.shape[0] != len(instances) or s.shape[1] < longest:
        raise DataError(f"scores of shape {s.shape} do not fit {len(instances)} instances of up to "
                        f"{longest} candidates: expected ({len(instances)}, >= {longest})")
    order = rank_matrix(s, candidate_mask(instances, s.shape[1]))
    out = []
    for inst, row in zip(instances, order, strict=True):
        if "qrels" not in inst.question.meta:
            raise DataError(f"question {inst.id!r} carries no qrels (meta['qrels']): not a zero-shot instance")
        out.append([inst.candidates[j] for j in row[:CUTOFF] if j < len(inst.candidates)])
    return out


def graded_ndcg_at_10(scores: np.ndarray, instances: Sequence[Instance]) -> np.ndarray:
    """(B,) nDCG@10 of the candidate lists re-ordered by ``scores`` ((B, K), higher first),
    trec_eval's ``ndcg_cut_10``: linear gain = the qrels grade (0 unjudged), discount
    ``log2(r + 1)``, ideal DCG from every judged grade of the question (also documents not
    in the list or the corpus); 0 where the question has no positive grade. Ties in
    ``scores`` go to the lower retrieval rank (trec_eval breaks them by document id)."""
    discount = 1.0 / np.log2(np.arange(2, CUTOFF + 2))
    out = np.zeros(len(instances))
    for b, (inst, ranked) in enumerate(zip(instances, _ranking(scores, instances), strict=True)):
        qrels = inst.question.meta["qrels"]
        gains = [max(0, int(qrels.get(c.id, 0))) for c in ranked]
        ideal = sorted((max(0, int(g)) for g in qrels.values()), reverse=True)[:CUTOFF]
        idcg = float(np.dot(ideal, discount[: len(ideal)]))
        out[b] = float(np.dot(gains, discount[: len(gains)])) / idcg if idcg > 0 else 0.0
    return out


def mrr_at_10(scores: np.ndarray, instances: Sequence[Instance]) -> np.ndarray:
    """(B,) reciprocal rank of the first binary-positive candidate (grade >=
    ``meta["positive_grade"]``) in the top 10 of the re-ordered list, else 0."""
    out = np.zeros(len(instances))
    for b, (inst, ranked) in enumerate(zip(instances, _ranking(scores, instances), strict=True)):
        qrels, positive = inst.question.meta["qrels"], inst.question.meta.get("positive_grade", QRELS_POSITIVE_GRADE)
        first = next((r for r, c in enumerate(ranked) if int(qrels.get(c.id, 0)) >= positive), None)
        out[b] = 0.0 if first is None else 1.0 / (first + 1)
    return out


def retrieval_scores(instances: Sequence[Instance], k: int | None = None) -> np.ndarray:
    """(B, K) the candidates' retriever scores, -inf at padded slots (the retriever's own
    ranking, for :func:`graded_ndcg_at_10` / :func:`mrr_at_10`)."""
    k = k if k is not None else max((len(i.candidates) for i in instances), default=0)
    out = np.full((len(instances), k), -math.inf)
    for b, inst in enumerate(instances):
        for j, c in enumerate(inst.candidates[:k]):
            out[b, j] = c.score
    return out
