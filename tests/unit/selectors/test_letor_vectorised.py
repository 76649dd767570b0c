"""The vectorised LETOR features and BM25 give the scalar implementation's values, bit for
bit (:mod:`letor_reference` keeps it), so Table 1's figures do not move: on toy
instances, on constructed edge cases and on real questions with the candidate lists the
shared PopQA and NQ data ship."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from tests.conftest import make_toy_instances
from tests.unit.selectors.letor_reference import bm25_reference
from tests.unit.selectors.letor_reference import instance_features as reference_features

from chunksel.selectors.bm25_stats import (
    BM25Stats,
    bm25_matrix,
    passage_text,
    terms,
    tokenize,
    words,
)
from chunksel.selectors.letor import instance_features
from chunksel.types import Candidate, Instance, Question


def _same(instances: list[Instance], stats: BM25Stats) -> None:
    for inst in instances:
        want, got = reference_features(inst, stats), instance_features(inst, stats)
        # bit for bit; the tolerance check names the feature if that ever fails
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0, err_msg=inst.id)
        np.testing.assert_array_equal(got, want, err_msg=inst.id)
        bm25 = bm25_matrix([inst], corpus="given", k1=1.5, b=0.75, progress=False)[0, : len(inst.candidates)]
        np.testing.assert_array_equal(bm25, bm25_reference(inst, stats), err_msg=inst.id)


@pytest.fixture
def as_corpus(monkeypatch):
    """``bm25_matrix`` reads the statistics of the corpus ``"given"``: these."""
    from chunksel.selectors import bm25_stats

    def use(stats: BM25Stats) -> BM25Stats:
        monkeypatch.setattr(bm25_stats, "corpus_stats", lambda name, progress=True: stats)
        return stats

    return use


def test_toy_instances(as_corpus) -> None:
    insts = make_toy_instances(n=30)
    stats = as_corpus(BM25Stats.from_texts(
        [c.text for i in insts[:20] for c in i.candidates] + ["what is the alpha answer"]))
    _same(insts, stats)


def _inst(question: str, passages: list[tuple[str, str]], scores: list[float] | None = None) -> Instance:
    cands = [Candidate(id=f"c{j}", title=t, text=x, rank=j, score=math.nan if scores is None else scores[j])
             for j, (t, x) in enumerate(passages)]
    return Instance(Question(id=f"toy:{question[:12]}", text=question, dataset="toy"), cands)


EDGE = [
    # stopwords only; one word; empty question
    _inst("is it the one?", [("It", "the one it is"), ("", "nothing here")]),
    _inst("apple", [("", "apple apple"), ("Apple", "")]),
    _inst("", [("", "apple banana")]),
    # repeated question terms (BM25 adds each), repeated bigrams, a term the corpus lacks
    _inst("apple pie apple pie zyzzyva recipe", [("Apple pie", "apple pie is an apple pie recipe"),
                                                 ("", "zyzzyva zyzzyva"), ("Pie", "pie apple")],
          scores=[0.5, math.nan, 0.25]),
    # passages without a single term, and duplicates; bigrams across a title and its text
    _inst("the cherry tree grows", [("", "the a of"), ("the cherry", "tree grows"), ("the cherry", "tree grows")]),
    # unicode: dotted capital I, sharp s, final sigma, combining marks, CJK, underscores, digits
    _inst("İstanbul Straße ΣΟΦΟΣ σοφός café 日本語 x_1 1999",
          [("İstanbul", "istanbul i̇stanbul straße strasse"), ("ΣΟΦΟΣ", "σοφός σοφοσ cafe\u0301 café"),
           ("日本語", "日本語 x_1 x 1999 99 9")]),
]


def test_edge_cases(as_corpus) -> None:
    stats = as_corpus(BM25Stats.from_texts(["apple banana apple", "banana cherry tree", "the cherry tree grows",
                                            "istanbul straße σοφός café 1999", "pie recipe"]))
    _same(EDGE, stats)


def test_statistics_with_vocabulary_ids_past_their_frequencies(as_corpus) -> None:
    """Saved statistics whose vocabulary names a term without a frequency (an id past
    ``df``): both versions treat it as outside the corpus."""
    stats = as_corpus(BM25Stats(vocab={"apple": 0, "banana": 1, "cherry": 7}, df=np.array([2, 1]),
                                n_docs=3, avgdl=2.5))
    _same([_inst("apple cherry banana", [("", "cherry apple"), ("Banana", "cherry cherry")])], stats)


def test_empty_statistics(as_corpus) -> None:
    stats = as_corpus(BM25Stats(vocab={}, df=np.zeros(0, dtype=np.int64), n_docs=0, avgdl=0.0))
    _same([_inst("apple pie", [("", "apple pie"), ("", "pie")])], stats)


@pytest.mark.data
@pytest.mark.parametrize("dataset", ["popqa", "nq"])
def test_real_questions_and_candidates(data_root: Path, as_corpus, dataset: str) -> None:
    """Real questions with the candidate lists the data ships (PopQA: Contriever's 20+;
    NQ: e5's top 3), statistics over half of those passages."""
    from chunksel.data.datasets import given_candidates, load_questions

    given = given_candidates(dataset, data_root, progress=False)
    questions = [q for q in load_questions(dataset, data_root, progress=False) if q.id in given][:60]
    insts = [Instance(q, given[q.id][:8]) for q in questions]
    passages = list(dict.fromkeys(passage_text(c.title, c.text) for i in insts for c in i.candidates))
    stats = as_corpus(BM25Stats.from_texts(passages[::2]))  # half: the rest has terms outside it
    assert len(insts) == 60 and len(passages) > 150
    _same(insts, stats)
    texts = [q.text for q in questions] + passages + [c.title for i in insts for c in i.candidates]
    assert [terms(words(t)) for t in texts] == tokenize(texts)


def test_tokens_are_bm25s_tokens() -> None:
    texts = ["Is the Apple a cherry? apples", "a b 12 é", ""]
    texts += [t for i in EDGE for t in [i.question.text] + [passage_text(c.title, c.text) for c in i.candidates]]
    assert [terms(words(t)) for t in texts] == tokenize(texts)
