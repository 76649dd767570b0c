"""Real-data checks of the dataset loaders (counts from the data README)."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

import pytest

from chunksel.data.datasets import DATASETS, describe, get_spec, given_candidates, load_questions
from chunksel.data.splits import split_of
from chunksel.data.text import normalise_question
from chunksel.errors import ConfigError, DataError
from chunksel.types import Question


@cache
def _questions(name: str, root: str) -> tuple[Question, ...]:
    return tuple(load_questions(name, root, progress=False))


@pytest.fixture(scope="module")
def qs(data_root: Path):
    return lambda name: _questions(name, str(data_root))


def _by_id(questions) -> dict[str, Question]:
    return {q.id: q for q in questions}


def test_unknown_dataset_and_missing_root(tmp_path: Path, monkeypatch) -> None:
    with pytest.raises(ConfigError, match="known: triviaqa, popqa, msmarco"):
        load_questions("trivia")
    monkeypatch.delenv("CHUNKSEL_DATA", raising=False)
    with pytest.raises(DataError, match="CHUNKSEL_DATA"):
        load_questions("nq")
    with pytest.raises(DataError, match="does not exist"):
        load_questions("nq", tmp_path / "nope")
    with pytest.raises(DataError, match="not found"):
        load_questions("nq", tmp_path)  # a root without the files
    assert get_spec("nq").default_label == "containment|gold"
    assert DATASETS["wikiqa"].corpus is None and DATASETS["msmarco"].corpus == "msmarco-sub"


def _check_common(questions, name: str) -> None:
    ids = [q.id for q in questions]
    assert len(ids) == len(set(ids))
    keys = [normalise_question(q.text) for q in questions]
    assert len(keys) == len(set(keys)), "duplicates survived dedup"
    assert all(q.id.startswith(f"{name}:") and q.dataset == name for q in questions)
    assert all(q.text.strip() for q in questions)


@pytest.mark.data
def test_triviaqa(qs) -> None:
    questions = qs("triviaqa")
    _check_common(questions, "triviaqa")
    d = _by_id(questions)
    # 8,837 dev + 11,313 test lines, a few duplicate questions merged
    assert 20_100 <= len(questions) <= 8_837 + 11_313
    assert d["triviaqa:dpr-test:0"].text == "Who was the man behind The Chipmunks?"
    assert d["triviaqa:dpr-test:0"].answers == ["David Seville"]
    # record 18 wraps its field in a second layer of CSV quotes
    q = d["triviaqa:dpr-test:17"]
    assert (
        q.text == 'How many different animal shapes are there in the "Animal Crackers" cookie zoo?'
    )
    q = d["triviaqa:dpr-test:23"]
    assert q.text == 'Who was the target of the failed "Bomb Plot" of 1944?'
    assert "Hitler's medical health" in q.answers and "Adolf Hitler" in q.answers
    assert all(q.answers for q in questions)


@pytest.mark.data
def test_nq_gold_and_oracle_merge(qs) -> None:
    questions = qs("nq")
    _check_common(questions, "nq")
    # the 2,655 oracle questions are NQ-open test questions: all merge into DPR topics
    assert sum(1 for q in questions if q.meta["sources"][0] == "oracle") <= 20
    assert 12_300 <= len(questions) <= 8_757 + 3_610
    with_gold = [q for q in questions if q.gold_ids]
    assert len(with_gold) == 2_655
    q = next(q for q in questions if q.text == "who got the first nobel prize in physics")
    assert q.id.startswith("nq:dpr-test:")
    assert "nqgold:0" in q.gold_ids and "dpr:718073" in q.gold_ids
    assert "Wilhelm Conrad Röntgen" in q.answers
    assert len(q.gold_texts) == len(q.meta["gold_titles"]) == 2


@pytest.mark.data
def test_popqa_json_fields(qs) -> None:
    questions = qs("popqa")
    _check_common(questions, "popqa")
    d = _by_id(questions)
    q = d["popqa:neuropath:0"]
    assert q.text == "What is George Rankin's occupation?"
    assert q.answers[:2] == ["politician", "political leader"]  # decoded from a JSON string
    assert q.meta["s_aliases"] == ["George James Rankin"]
    assert q.gold_ids == ["popqa-np:0:0", "popqa-np:0:1"]
    assert sum(1 for q in questions if q.meta["sources"][0] == "neuropath") >= 990
    assert 1_600 <= len(questions) <= 1_000 + 746 + 100
    assert "popqa:e5top3:test_10207" in d or any(
        "popqa:e5top3:test_10207" in q.meta["merged_ids"] for q in questions
    )


@pytest.mark.data
def test_msmarco_qrels_and_gold(qs) -> None:
    questions = qs("msmarco")
    _check_common(questions, "msmarco")
    d = _by_id(questions)
    dl19 = [q for q in questions if "dl19" in q.meta["sources"]]
    assert len(dl19) == 43
    q = d["msmarco:dl19:264014"]
    assert q.text == "how long is life cycle of flea"
    grades = q.meta["qrels"]
    assert max(grades.values()) == 3 and min(grades.values()) == 0
    dl21 = [q for q in questions if "dl21" in q.meta["sources"]]
    assert len(dl21) == 53
    assert all(pid.startswith("msmarco:msmarco_passage_") for q in dl21 for pid in q.meta["qrels"])
    bm = [q for q in questions if q.id.startswith("msmarco:bm25top20:")]
    assert len(bm) >= 590
    qa = d["msmarco:qa:0"]
    assert qa.text == "does human hair stop squirrels" and qa.answers == ["Yes"]
    assert qa.gold_ids == ["autorag:0_2"]
    assert sum(1 for q in questions if any(g.startswith("autorag:") for g in q.gold_ids)) == 966


@pytest.mark.data
def test_squad2_answerable_and_unanswerable(qs, data_root: Path) -> None:
    questions = qs("squad2")
    _check_common(questions, "squad2")
    assert 2_900 <= len(questions) <= 2_910  # 6,078 - 3,168 unanswerable, few duplicates
    q = next(q for q in questions if q.text == "In what country is Normandy located?")
    assert q.answers == ["France"] and q.gold_ids == ["squad:dev:Normans:0"]
    everything = load_questions("squad2", data_root, progress=False, include_unanswerable=True)
    unans = [q for q in everything if q.meta.get("unanswerable")]
    assert 3_100 <= len(unans) <= 3_168
    assert all(not q.answers and not q.gold_ids for q in unans)


@pytest.mark.data
def test_hotpotqa_both_formats_give_supporting_paragraphs(qs) -> None:
    questions = qs("hotpotqa")
    _check_common(questions, "hotpotqa")
    d = _by_id(questions)
    ircot = d["hotpotqa:ircot:5a8c7595554299585d9e36b6"]
    assert ircot.answers == ["Chief of Protocol"]
    assert len(ircot.gold_ids) == 2 and all(g.startswith("hotpot-ircot:") for g in ircot.gold_ids)
    dev = d["hotpotqa:amor-dev:5a85355a5542997b5ce3ffc8"]  # dev: 4-element supporting facts
    assert dev.answers == ["beer and whisky"]
    assert "hotpot-amor:5a85355a5542997b5ce3ffc8:9" in dev.gold_ids
    assert "Lucy Saunders" in dev.meta["gold_titles"]
    test = [q for q in questions if q.meta["sources"][0] == "amor-test"]
    assert sum(1 for q in test if q.gold_ids) >= 350  # test: [title, sentence id] facts
    # the IRCoT subsample and AMOR share questions: merged, IRCoT's id kept
    merged = d["hotpotqa:ircot:5ae73acb5542991e8301cc07"]
    assert "hotpotqa:amor-test:5ae73acb5542991e8301cc07" in merged.meta["merged_ids"]
    assert 1_000 <= len(questions) <= 1_100


@pytest.mark.data
def test_wikiqa(qs, data_root: Path) -> None:
    questions = qs("wikiqa")
    _check_common(questions, "wikiqa")
    assert 3_040 <= len(questions) <= 2_118 + 296 + 633
    cands = given_candidates("wikiqa", data_root)
    assert set(cands) == {q.id for q in questions}
    c = cands["wikiqa:dev:0"]
    assert c[0].text == "Cross section of sclerenchyma fibers in plant ground tissue"
    assert all(set(x.labels) == {"human"} for x in c)
    n_pos = sum(x.labels["human"] for lst in cands.values() for x in lst)
    assert 1_200 <= n_pos <= 1_473


@pytest.mark.data
@pytest.mark.parametrize("name", ["triviaqa", "nq", "popqa"])
def test_e5top3_candidates_attach_to_question_ids(qs, data_root: Path, name: str) -> None:
    d = _by_id(qs(name))
    cands = given_candidates(name, data_root, source="e5top3")
    assert len(cands) >= 600
    assert set(cands) <= set(d)
    for lst in list(cands.values())[:50]:
        assert 1 <= len(lst) <= 3
        assert all(c.id.startswith(f"e5top3:{name}:") and "given" in c.labels for c in lst)
        assert [c.rank for c in lst] == list(range(len(lst)))
    if name != "popqa":  # test_N is line N of the DPR test topics: same answers
        q = d[f"{name}:dpr-test:6233" if name == "triviaqa" else "nq:dpr-test:3283"]
        assert q.id in cands
        if name == "triviaqa":
            assert "Mark Twain" in q.answers
        else:
            assert q.text == "who told the story of the prodigal son"


@pytest.mark.data
def test_given_candidates_msmarco_popqa_hotpot(data_root: Path, qs) -> None:
    bm = given_candidates("msmarco", data_root)
    assert len(bm) == 600 or len(bm) >= 590
    lst = bm["msmarco:bm25top20:1000170"]
    assert len(lst) == 20 and lst[0].id == "msmarco:6321188" and lst[0].meta["bm25_rank"] == 1
    assert sum(any(c.labels["qrels"] for c in lst) for lst in bm.values()) == 540
    q = _by_id(qs("msmarco"))["msmarco:bm25top20:1000170"]
    assert all(q.meta["qrels"][c.id] == 2 for c in lst if c.labels["qrels"])

    pop = given_candidates("popqa", data_root, source="s2rag")
    assert len(pop) >= 90
    assert all(c.text for lst in pop.values() for c in lst)
    some = next(iter(pop.values()))
    assert some[0].id.startswith(("dpr:", "popqa-gs:")) and some[0].score == some[0].score

    hp = given_candidates("hotpotqa", data_root)
    assert set(hp) <= {q.id for q in qs("hotpotqa")}
    lst = hp["hotpotqa:ircot:5a8c7595554299585d9e36b6"]
    assert sum(c.labels["given"] for c in lst) == 2
    with pytest.raises(ConfigError, match="no source"):
        given_candidates("hotpotqa", data_root, source="nope")


@pytest.mark.data
def test_describe_and_splits_are_deterministic(data_root: Path, qs) -> None:
    a = describe("popqa", data_root)
    b = describe("popqa", data_root)
    assert a == b
    assert sum(a["per_split"].values()) == a["questions"] == len(qs("popqa"))
    assert a["raw_per_source"] == {"neuropath": 1000, "e5top3": 746, "s2rag": 100}
    frac = a["per_split"]["train"] / a["questions"]
    assert 0.63 < frac < 0.77
    # a question's split follows its text, whichever source it came from
    for q in qs("nq")[:200]:
        assert split_of(normalise_question(q.text)) == split_of(
            normalise_question(q.text.upper() + " ?")
        )


def test_describe_needs_no_env_when_root_given(data_root: Path, monkeypatch) -> None:
    monkeypatch.delenv("CHUNKSEL_DATA", raising=False)
    assert describe("squad2", os.fspath(data_root))["questions"] > 0
