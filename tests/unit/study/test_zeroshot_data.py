"""Zero-shot benchmark instances (chunksel.study.zeroshot_data) on the real data.

The BEIR tests build from a BEIR folder made under tmp: the real ``queries.jsonl`` and
``qrels/test.tsv``, and a slice of the real corpus (the judged documents of the first
queries, ArguAna's query arguments themselves, and the first documents of the file), so
that embedding it with MiniLM takes seconds; ``limit`` keeps the first judged queries.
TREC DL runs on the real ``msmarco-sub`` corpus (precomputed embeddings).
"""

from __future__ import annotations

import gzip
import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from chunksel.errors import ConfigError, DataError
from chunksel.study import zeroshot_data as zs

pytestmark = [pytest.mark.data, pytest.mark.model]

LIMITS = {"nfcorpus": 2, "arguana": 3}
FILLERS = {"nfcorpus": 40, "arguana": 60}


@pytest.fixture(scope="session")
def beir_root(data_root: Path) -> Path:
    if not (data_root / "beir").is_dir():
        pytest.skip(f"no BEIR collections under {data_root / 'beir'}")
    return data_root


@pytest.fixture(scope="session")
def small_beir(beir_root: Path, tmp_path_factory) -> Path:
    """A data root whose ``beir/<name>/`` holds the real queries and qrels and a corpus
    slice (see the module doc)."""
    root = tmp_path_factory.mktemp("beir-small")
    for name, limit in LIMITS.items():
        src, dst = beir_root / "beir" / name, root / "beir" / name
        (dst / "qrels").mkdir(parents=True)
        shutil.copy(src / "queries.jsonl", dst / "queries.jsonl")
        shutil.copy(src / "qrels" / "test.tsv", dst / "qrels" / "test.tsv")
        qs = zs.read_beir_questions(name, beir_root, limit)
        keep = {d for q in qs for d in q.meta["qrels"]} | {q.meta["qid"] for q in qs}
        with gzip.open(src / "corpus.jsonl.gz", "rt", encoding="utf-8") as fh:
            docs = [json.loads(line) for line in fh]
        rows = [d for i, d in enumerate(docs) if d["_id"] in keep or i < FILLERS[name]]
        with gzip.open(dst / "corpus.jsonl.gz", "wt", encoding="utf-8") as fh:
            fh.writelines(json.dumps(d) + "\n" for d in rows)
    return root


@pytest.fixture(scope="session")
def encoder():
    from chunksel.retrieval.encoder import Encoder

    return Encoder()


def _corpus(name: str, root: Path):
    from chunksel.data.corpus import Corpus

    return Corpus.load(zs.beir_corpus_path(name, root), progress=False)


# ------------------------------------------------------------------ bad input
def test_bad_input_names_the_problem(tmp_path, data_root):
    with pytest.raises(ConfigError, match="unknown BEIR collection 'scifact'"):
        zs.beir_instances("scifact", "bm25", root=data_root)
    with pytest.raises(ConfigError, match="unknown retriever 'splade'"):
        zs.beir_instances("nfcorpus", "splade", root=data_root)
    with pytest.raises(ConfigError, match="unknown retriever"):
        zs.trec_dl_instances("19", "dense", root=data_root)
    with pytest.raises(ConfigError, match="unknown TREC DL year '21'"):
        zs.trec_dl_instances("21", "bm25", root=data_root)
    with pytest.raises(ConfigError, match="k must be"):
        zs.beir_instances("nfcorpus", "minilm", k=0, root=data_root)
    with pytest.raises(DataError, match="CHUNKSEL_DATA") as err:
        zs.beir_instances("arguana", "bm25", root=tmp_path)
    assert str(tmp_path / "beir" / "arguana") in str(err.value)
    with pytest.raises(DataError, match="CHUNKSEL_DATA") as err:
        zs.trec_dl_instances("20", "bm25", root=tmp_path)
    assert "topics.dl20.tsv" in str(err.value)


# ------------------------------------------------------------------ BEIR
def test_beir_questions_are_the_judged_test_queries(beir_root):
    for name, n in (("nfcorpus", 323), ("arguana", 1406)):
        qs = zs.read_beir_questions(name, beir_root)
        assert len(qs) == n
        assert all(q.meta["qrels"] and q.dataset == name for q in qs)
    qs = zs.read_beir_questions("nfcorpus", beir_root, limit=3)
    assert [q.meta["qid"] for q in qs] == ["PLAIN-2", "PLAIN-12", "PLAIN-23"]
    assert len(qs[0].meta["qrels"]) == 24 and qs[0].meta["qrels"]["MED-2427"] == 2
    assert qs[0].meta["positive_grade"] == 2


@pytest.mark.parametrize("retriever", ["bm25", "minilm"])
@pytest.mark.parametrize("name", ["nfcorpus", "arguana"])
def test_beir_labels_follow_the_qrels(small_beir, encoder, name, retriever):
    insts = zs.beir_instances(name, retriever, k=5, limit=LIMITS[name], root=small_beir, encoder=encoder,
                              progress=False)
    top = zs.BEIR_TOP_GRADE[name]
    assert len(insts) == LIMITS[name]
    for inst in insts:
        q = inst.question
        assert inst.split == "test" and q.dataset == name and inst.label_source == zs.LABEL_SOURCE
        assert q.embedding is not None and q.embedding.shape == (384,) and q.embedding.dtype == np.float32
        assert abs(float(np.linalg.norm(q.embedding)) - 1) < 1e-5
        assert 0 < len(inst.candidates) <= 5
        assert [c.rank for c in inst.candidates] == list(range(len(inst.candidates)))
        grades = [q.meta["qrels"].get(c.id, 0) for c in inst.candidates]
        assert [c.labels[zs.GRADE_SOURCE] for c in inst.candidates] == grades
        assert inst.labels().tolist() == [int(g >= top) for g in grades]
        for c in inst.candidates:
            assert c.embedding is not None and c.embedding.shape == (384,) and c.text
    assert sum(inst.labels().sum() for inst in insts) > 0  # the judged documents are in the slice


def test_arguana_never_returns_the_query_argument(small_beir, encoder):
    from chunksel.selectors.bm25_stats import corpus_stats, passage_text, terms, words

    corpus = _corpus("arguana", small_beir)
    stats = corpus_stats(str(zs.beir_corpus_path("arguana", small_beir)), progress=False)
    docs = [terms(words(passage_text(t, x))) for t, x in zip(corpus.titles, corpus.texts, strict=True)]
    for retriever in ("bm25", "minilm"):
        insts = zs.beir_instances("arguana", retriever, k=5, limit=3, root=small_beir, encoder=encoder,
                                  progress=False)
        for inst in insts:
            qid = inst.question.meta["qid"]
            assert qid in corpus.row_of
            assert qid not in [c.id for c in inst.candidates]
            assert len(inst.candidates) == 5
            if retriever == "bm25":  # unfiltered, the query argument would be the top BM25 hit
                full = stats.score_docs(terms(words(inst.question.text)), docs)
                assert corpus.ids[int(np.argmax(full))] == qid


def test_bm25_lists_are_the_project_bm25_top_k(small_beir, encoder):
    from chunksel.selectors.bm25_stats import bm25_matrix, corpus_stats, passage_text, terms, words

    tsv = str(zs.beir_corpus_path("nfcorpus", small_beir))
    insts = zs.beir_instances("nfcorpus", "bm25", k=5, limit=2, root=small_beir, encoder=encoder, progress=False)
    scores = zs.retrieval_scores(insts)
    assert np.all(np.diff(scores, axis=1) <= 0)
    np.testing.assert_array_equal(bm25_matrix(insts, tsv, zs.BM25_K1, zs.BM25_B, progress=False), scores)
    corpus, stats = _corpus("nfcorpus", small_beir), corpus_stats(tsv, progress=False)
    docs = [terms(words(passage_text(t, x))) for t, x in zip(corpus.titles, corpus.texts, strict=True)]
    for inst in insts:
        full = stats.score_docs(terms(words(inst.question.text)), docs)
        best = np.lexsort((np.arange(len(full)), -full))[:5]
        assert [c.id for c in inst.candidates] == [corpus.ids[r] for r in best]


def test_bm25_lists_hold_only_documents_sharing_a_term(tmp_path, encoder):
    from chunksel.selectors.bm25_stats import bm25_matrix

    folder = tmp_path / "beir" / "nfcorpus"
    (folder / "qrels").mkdir(parents=True)
    docs = ["Statins and breast cancer survival.", "Okra-free diets.", "Vitamin D in winter.",
            "Statin use in older adults.", "Green tea and sleep.", "Fibre and the gut."]
    with gzip.open(folder / "corpus.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps({"_id": f"MED-{i}", "title": "", "text": t}) + "\n" for i, t in enumerate(docs))
    (folder / "queries.jsonl").write_text(json.dumps({"_id": "PLAIN-1", "text": "amnesia"}) + "\n"
                                          + json.dumps({"_id": "PLAIN-2", "text": "statins and vitamin"}) + "\n")
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nPLAIN-1\tMED-2\t1\n"
                                               "PLAIN-2\tMED-0\t2\n")
    insts = zs.beir_instances("nfcorpus", "bm25", k=4, root=tmp_path, encoder=encoder, progress=False)
    unmatched, matched = insts
    assert unmatched.candidates == [] and unmatched.question.embedding is not None
    assert sorted(c.id for c in matched.candidates) == ["MED-0", "MED-2"]  # no stemming: not "Statin"
    assert matched.labels().tolist() == [int(c.id == "MED-0") for c in matched.candidates]
    assert all(c.score > 0 for c in matched.candidates)
    np.testing.assert_array_equal(bm25_matrix(insts[1:], str(zs.beir_corpus_path("nfcorpus", tmp_path)),
                                              zs.BM25_K1, zs.BM25_B, progress=False), zs.retrieval_scores(insts[1:]))
    stats = zs.instance_stats(insts)
    assert stats["empty_lists"] == 1 and stats["short_lists"] == 0 and stats["questions"] == 2
    scores = zs.retrieval_scores(insts)  # an empty list scores 0, and the metrics take it
    assert zs.graded_ndcg_at_10(scores, insts)[0] == 0 and zs.mrr_at_10(scores, insts)[0] == 0


def test_minilm_lists_are_the_exact_faiss_top_k(small_beir, encoder):
    import faiss

    from chunksel.retrieval.embeddings import corpus_embeddings

    insts = zs.beir_instances("nfcorpus", "minilm", k=5, limit=2, root=small_beir, encoder=encoder, progress=False)
    corpus = _corpus("nfcorpus", small_beir)
    emb = corpus_embeddings(corpus, encoder, progress=False, use_precomputed=False, shard_rows=zs.BEIR_SHARD_ROWS)
    index = faiss.IndexFlatIP(emb.shape[1])
    index.add(emb)
    fresh = encoder.encode_questions([i.question for i in insts], progress=False)
    for inst, qv in zip(insts, fresh, strict=True):
        np.testing.assert_allclose(inst.question.embedding, qv, atol=1e-5)
        s, rows = index.search(qv[None, :], 5)
        assert [c.id for c in inst.candidates] == [corpus.ids[r] for r in rows[0]]
        np.testing.assert_allclose([c.score for c in inst.candidates], s[0], atol=1e-5)
        for c in inst.candidates:
            np.testing.assert_array_equal(c.embedding, emb[corpus.row_of[c.id]])


# ------------------------------------------------------------------ TREC DL
@pytest.mark.parametrize("retriever", ["bm25", "minilm"])
def test_trec_dl_labels_follow_the_graded_qrels(data_root, encoder, retriever):
    from chunksel.data.loaders.msmarco import read_trec_dl

    insts = zs.trec_dl_instances("19", retriever, k=5, limit=3, root=data_root, encoder=encoder, progress=False)
    ref = [r.question for r in read_trec_dl(data_root, "19")][:3]
    assert [i.id for i in insts] == [q.id for q in ref]
    for inst, q in zip(insts, ref, strict=True):
        assert inst.question.dataset == "trec-dl-2019" and inst.question.meta["qrels"] == q.meta["qrels"]
        assert len(inst.candidates) == 5 and inst.question.embedding is not None
        grades = [q.meta["qrels"].get(c.id, 0) for c in inst.candidates]
        assert [c.labels["grade"] for c in inst.candidates] == grades
        assert inst.labels().tolist() == [int(g >= 2) for g in grades]
        assert all(c.id.startswith("msmarco:") and c.embedding.shape == (384,) for c in inst.candidates)
    assert np.all(np.diff(zs.retrieval_scores(insts), axis=1) <= 0)


def _crosscheck(insts, scores, positive, with_ranx=False):
    ir_measures = pytest.importorskip("ir_measures")
    ranx = pytest.importorskip("ranx")
    qrels = {i.id: {d: int(g) for d, g in i.question.meta["qrels"].items()} for i in insts}
    run = {i.id: {c.id: float(scores[b, j]) for j, c in enumerate(i.candidates)} for b, i in enumerate(insts)}
    ndcg, rr = zs.graded_ndcg_at_10(scores, insts), zs.mrr_at_10(scores, insts)
    ref = {(m.query_id, str(m.measure)): m.value
           for m in ir_measures.iter_calc([ir_measures.nDCG @ 10, ir_measures.RR(rel=positive) @ 10], qrels, run)}
    for b, inst in enumerate(insts):
        assert ndcg[b] == pytest.approx(ref[(inst.id, "nDCG@10")], abs=1e-9)
        assert rr[b] == pytest.approx(ref.get((inst.id, f"RR(rel={positive})@10"), 0.0), abs=1e-9)
    if not with_ranx:  # ranx compiles its metrics with numba: one check is enough
        return ndcg, rr
    binary = {q: {d: 1 for d, g in j.items() if g >= positive} for q, j in qrels.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graded = ranx.evaluate(ranx.Qrels({q: {d: g for d, g in j.items() if g > 0} for q, j in qrels.items()}),
                               ranx.Run(run), "ndcg@10", return_mean=False)
        keep = [q for q in run if binary[q]]  # ranx wants every query to have a relevant document
        mrr = ranx.evaluate(ranx.Qrels({q: binary[q] for q in keep}), ranx.Run({q: run[q] for q in keep}),
                            "mrr@10", return_mean=False)
    by_id = {i.id: b for b, i in enumerate(insts)}
    np.testing.assert_allclose([ndcg[by_id[q]] for q in ranx.Run(run).keys()], graded, atol=1e-9)
    np.testing.assert_allclose([rr[by_id[q]] for q in ranx.Run({q: run[q] for q in keep}).keys()], mrr, atol=1e-9)
    return ndcg, rr


def test_ndcg_and_mrr_match_ir_measures_and_ranx_on_trec_dl(data_root, encoder):
    insts = zs.trec_dl_instances("19", "bm25", k=20, limit=6, root=data_root, encoder=encoder, progress=False)
    assert any(i.question.meta["qrels"].get(c.id, 0) == 1 for i in insts for c in i.candidates)
    rng = np.random.default_rng(3)
    # BM25 ties (duplicate passages) are broken by retrieval rank here, by document id in
    # trec_eval (which also reads scores in single precision): the retrieval ranking is
    # given as its ranks
    retrieval = np.broadcast_to(20.0 - np.arange(20), (len(insts), 20))
    assert np.all(np.diff(zs.retrieval_scores(insts), axis=1) <= 0)
    for n, scores in enumerate((retrieval, rng.normal(size=(len(insts), 20)), -retrieval)):
        ndcg, rr = _crosscheck(insts, scores, positive=2, with_ranx=n == 1)
        assert ndcg.max() > 0 and rr.max() > 0
    # a padded column: scores past a list are ignored
    padded = np.concatenate([rng.normal(size=(len(insts), 20)), np.full((len(insts), 3), 9.0)], axis=1)
    np.testing.assert_array_equal(zs.graded_ndcg_at_10(padded, insts), zs.graded_ndcg_at_10(padded[:, :20], insts))
    with pytest.raises(DataError, match="do not fit"):
        zs.mrr_at_10(padded[:, :5], insts)


def test_ndcg_and_mrr_match_ir_measures_on_nfcorpus(small_beir, encoder):
    insts = zs.beir_instances("nfcorpus", "minilm", k=5, limit=2, root=small_beir, encoder=encoder, progress=False)
    _crosscheck(insts, np.random.default_rng(0).normal(size=(len(insts), 5)), positive=2)


# ------------------------------------------------------------------ cache
def test_second_call_reads_the_cache_and_a_broken_run_resumes(small_beir, encoder, tmp_path, monkeypatch):
    from chunksel.retrieval.embeddings import embeddings_dir

    monkeypatch.setenv("CHUNKSEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(zs, "BEIR_SHARD_ROWS", 16)
    first = zs.beir_instances("arguana", "minilm", k=5, limit=3, root=small_beir, encoder=encoder, progress=False)
    encoded: list[int] = []
    real = type(encoder).encode

    def counting(self, texts, *args, **kwargs):
        encoded.append(len(texts))
        return real(self, texts, *args, **kwargs)

    monkeypatch.setattr(type(encoder), "encode", counting)
    again = zs.beir_instances("arguana", "minilm", k=5, limit=3, root=small_beir, encoder=encoder, progress=False)
    assert encoded == []  # read back: nothing encoded
    assert [i.to_dict() for i in again] == [i.to_dict() for i in first]
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a.question.embedding, b.question.embedding)
        for ca, cb in zip(a.candidates, b.candidates, strict=True):
            np.testing.assert_array_equal(ca.embedding, cb.embedding)
    # a run that died after some shards: only the missing shard is encoded again
    corpus = _corpus("arguana", small_beir)
    shards = sorted(embeddings_dir(corpus, encoder).glob("shard_*.npy"))
    assert len(shards) == -(-len(corpus) // 16)
    shards[1].unlink()
    bm25 = zs.beir_instances("arguana", "bm25", k=5, limit=3, root=small_beir, encoder=encoder, progress=False)
    assert sorted(encoded) == [3, 16]  # the three questions, then one shard of passages
    assert all(c.embedding is not None for i in bm25 for c in i.candidates)
