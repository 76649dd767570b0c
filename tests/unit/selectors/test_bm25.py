from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from chunksel.errors import ConfigError
from chunksel.selectors import bm25_stats as bm25_mod
from chunksel.selectors.bm25 import BM25Selector, BM25Stats, corpus_stats, tokenize
from chunksel.types import Candidate, Instance, Question

DOCS = ["apple banana apple", "banana cherry", "cherry date elder fig"]


def _corpus(tmp_path: Path) -> Path:
    path = tmp_path / "three.tsv"
    rows = ["id\ttext\ttitle\tsource"] + [f"d{i}\t{t}\t\tx" for i, t in enumerate(DOCS)]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def _instance(texts: list[str], question: str = "Is the apple a cherry?") -> Instance:
    cands = [Candidate(id=f"c{j}", text=t, rank=j) for j, t in enumerate(texts)]
    return Instance(Question(id="toy:q:0", text=question, dataset="toy"), cands)


def _lucene(tf: int, dl: int, df: int, n: int = 3, avgdl: float = 3.0, k1: float = 1.5, b: float = 0.75) -> float:
    # bm25s method="lucene": idf = ln(1 + (N - df + .5)/(df + .5)); tf / (tf + k1 (1 - b + b dl/avgdl))
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    return idf * tf / (tf + k1 * (1 - b + b * dl / avgdl))


def test_tokenizer_is_bm25s_default_without_stemming() -> None:
    assert tokenize(["Is the Apple a cherry? apples"]) == [["apple", "cherry", "apples"]]


def test_scores_match_hand_computed_lucene_bm25(tmp_path: Path) -> None:
    # tokens: [apple, banana, apple] (3), [banana, cherry] (2), [cherry, date, elder, fig] (4)
    # N = 3, avgdl = 3; query terms: apple (df 1), cherry (df 2)
    texts = DOCS + ["apple apple apple pie"]  # the last is not in the corpus: |d| = 4
    scores = BM25Selector(corpus=str(_corpus(tmp_path))).score([_instance(texts)])
    expected = [
        _lucene(tf=2, dl=3, df=1),
        _lucene(tf=1, dl=2, df=2),
        _lucene(tf=1, dl=4, df=2),
        _lucene(tf=3, dl=4, df=1),  # "pie" is absent from the corpus: only the length counts
    ]
    np.testing.assert_allclose(scores[0], expected, rtol=1e-12)


def test_corpus_passages_get_bm25s_own_scores(tmp_path: Path) -> None:
    import bm25s

    index = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    index.index(bm25s.tokenize(DOCS, show_progress=False), show_progress=False)
    q = tokenize(["banana cherry cherry fig"])[0]
    ref = index.get_scores(q)
    ours = BM25Selector(corpus=str(_corpus(tmp_path))).score([_instance(DOCS, "banana cherry cherry fig")])[0]
    np.testing.assert_allclose(ours, ref, rtol=1e-5)


def test_statistics_come_from_the_corpus_not_the_candidates(tmp_path: Path) -> None:
    stats = corpus_stats(_corpus(tmp_path), progress=False)
    assert (stats.n_docs, stats.avgdl) == (3, 3.0)
    assert int(stats.df[stats.vocab["cherry"]]) == 2
    # the same candidate scores the same whatever its neighbours are
    sel = BM25Selector(corpus=str(_corpus(tmp_path)))
    a = sel.score([_instance(["apple pie", "banana"])])[0, 0]
    b = sel.score([_instance(["apple pie", "apple apple", "apple"])])[0, 0]
    assert a == b


def test_statistics_are_cached_on_disk(tmp_path: Path, monkeypatch) -> None:
    path = _corpus(tmp_path)
    first = corpus_stats(path, progress=False)
    monkeypatch.setattr(bm25_mod, "_STATS_MEMO", {})
    called = []
    monkeypatch.setattr(bm25_mod, "_build_index", lambda *a: called.append(1))
    second = corpus_stats(path, progress=False)  # must load, not rebuild
    assert not called
    assert second.vocab == first.vocab and np.array_equal(second.df, first.df)
    assert (second.n_docs, second.avgdl) == (first.n_docs, first.avgdl)
    folders = list((Path(bm25_mod.cache_root()) / "bm25").iterdir())
    assert any((f / "stats.json").is_file() for f in folders)


def test_k1_b_change_the_scores(tmp_path: Path) -> None:
    inst = _instance(DOCS)
    a = BM25Selector(corpus=str(_corpus(tmp_path))).score([inst])
    b = BM25Selector(corpus=str(_corpus(tmp_path)), k1=0.9, b=0.4).score([inst])
    assert not np.allclose(a, b)


def test_unknown_dataset_needs_an_explicit_corpus() -> None:
    with pytest.raises(ConfigError, match="corpus"):
        BM25Selector().score([_instance(DOCS)])


def test_dataset_corpus_mapping() -> None:
    inst = _instance(DOCS)
    inst.question.dataset = "msmarco"
    assert bm25_mod.resolve_corpus(None, inst) == "msmarco-sub"
    inst.question.dataset = "popqa"
    assert bm25_mod.resolve_corpus(None, inst) == "wiki-w100"
    assert bm25_mod.resolve_corpus("x.tsv", inst) == "x.tsv"


def test_stats_from_texts_idf() -> None:
    stats = BM25Stats.from_texts(DOCS)
    assert stats.idf("apple") == pytest.approx(math.log(1 + 2.5 / 1.5))
    assert stats.idf("unseen") == 0.0
