from __future__ import annotations

from chunksel.data.corpus import Corpus
from chunksel.labels.gold import GoldIndex, attach_corpus_ids, gold_corpus_ids, label_candidates
from chunksel.types import Candidate, Instance, Question


def _corpus() -> Corpus:
    return Corpus(
        ids=["nqgold:0", "dpr:5", "wiki:1", "msmarco:1", "msmarco:2", "e5top3:nq:1:0"],
        texts=[
            "The first Nobel Prize in Physics went to Röntgen.",
            "Easy Living Easy Living (1937) is an American  comedy film.",
            "Paris is the capital of France.",
            "Fleas live about three months.",
            "Concrete floors cost money.",
            "The Prodigal The Prodigal is a 1955 film.",
        ],
        titles=["Nobel Prize in Physics", "Easy Living", "Paris", "", "", "The Prodigal"],
        name="toy",
    )


def test_gold_by_id_and_by_text() -> None:
    index = GoldIndex(_corpus())
    q = Question(
        id="q1",
        text="who composed easy living",
        gold_ids=["nqgold:0", "hotpot-amor:x:3"],  # the second is not a corpus id
        gold_texts=["Easy Living (1937) is an American comedy film."],
        meta={"gold_titles": ["Easy Living"]},
    )
    assert gold_corpus_ids(q, index) == {"nqgold:0", "dpr:5"}
    # without a title the text alone is matched (title prefix of the corpus row removed)
    q2 = Question(id="q2", text="x", gold_texts=["the prodigal IS a 1955 film."])
    assert gold_corpus_ids(q2, index) == {"e5top3:nq:1:0"}
    q2.gold_texts = ["The Prodigal  The Prodigal is a 1955 film."]
    assert gold_corpus_ids(q2, index) == {"e5top3:nq:1:0"}
    assert gold_corpus_ids(Question(id="q3", text="x", gold_texts=["not there"]), index) == set()
    assert index.lookup("Paris is the capital of France.", "Paris") == "wiki:1"
    assert index.resolve("e5top3:x:0", "Paris   is the capital of france.") == "wiki:1"
    assert index.resolve("wiki:1") == "wiki:1"
    assert index.resolve("nope") is None


def test_label_candidates_keeps_sources_apart() -> None:
    index = GoldIndex(_corpus())
    q = Question(
        id="q",
        text="who got the first nobel prize in physics",
        answers=["Röntgen"],
        gold_ids=["nqgold:0"],
        gold_texts=["Paris is the capital of France."],
    )
    cands = [
        Candidate(
            id="nqgold:0", title="Nobel", text="The first Nobel Prize in Physics went to Röntgen."
        ),
        Candidate(
            id="other:1", title="Paris", text="Paris is the capital of   France."
        ),  # gold by text
        Candidate(id="wiki:9", title="Röntgen", text="A German physicist.", labels={"given": 1}),
        Candidate(id="x:2", title="Paris", text="Paris Paris is the capital of France."),  # titled
    ]
    label_candidates(q, cands, gold_corpus_ids(q, index))
    assert [c.labels.get("containment") for c in cands] == [1, 0, 0, 0]  # title not searched
    assert [c.labels.get("gold") for c in cands] == [1, 1, 0, 1]
    assert cands[2].labels["given"] == 1
    assert all("qrels" not in c.labels for c in cands)
    inst = Instance(q, cands, "test", "containment|gold")
    assert inst.labels().tolist() == [1, 1, 0, 1]


def test_qrels_labels_and_grades() -> None:
    q = Question(
        id="m", text="how long do fleas live", meta={"qrels": {"msmarco:1": 3, "msmarco:2": 1}}
    )
    cands = [Candidate(id=f"msmarco:{i}", text="t") for i in (1, 2, 3)]
    label_candidates(q, cands, set())
    assert [c.labels["qrels"] for c in cands] == [1, 0, 0]  # grade >= 2; unjudged = 0
    assert [c.meta.get("grade") for c in cands] == [3, 1, None]
    assert all("containment" not in c.labels and "gold" not in c.labels for c in cands)


def test_attach_corpus_ids() -> None:
    index = GoldIndex(_corpus())
    cands = [
        Candidate(id="wiki:1", text="Paris is the capital of France."),
        Candidate(
            id="e5top3:nq:test_1:0",
            title="Easy Living",
            text="Easy Living (1937) is an American comedy film.",
        ),
        Candidate(id="elsewhere:1", text="Nowhere in the corpus."),
    ]
    assert attach_corpus_ids(cands, index) == 1
    assert [c.id for c in cands] == ["wiki:1", "dpr:5", "elsewhere:1"]
    assert cands[1].meta["source_id"] == "e5top3:nq:test_1:0"
    assert cands[2].meta["in_corpus"] is False
