"""Answer-level evaluation without a model: SQuAD EM / F1 over aliases, regex answers,
reference picks, and the answer cache (a second call generates nothing)."""

from __future__ import annotations

import pytest

from chunksel.errors import DataError
from chunksel.study.answer_table import (
    Answer,
    Generator,
    answer_accuracy,
    answer_table,
    exact_match,
    ids_hash,
    normalize_answer,
    reference_picks,
    token_f1,
)
from chunksel.types import Candidate, Instance, Question


def test_squad_normalisation_em_and_f1_over_aliases():
    assert normalize_answer("  The Eiffel-Tower!  ") == "eiffeltower"
    assert normalize_answer("A cat, an owl and THE dog.") == "cat owl and dog"
    assert exact_match("The Eiffel Tower.", ["Tour Eiffel", "eiffel tower"]) == 1.0
    assert exact_match("Eiffel Tower in Paris", ["Eiffel Tower"]) == 0.0
    assert token_f1("Paris, France", ["Paris"]) == pytest.approx(2 / 3)  # p 1/2, r 1
    assert token_f1("Paris, France", ["Lyon", "France Paris"]) == pytest.approx(1.0)  # max over aliases
    assert token_f1("", ["Paris"]) == 0.0 and token_f1("Paris", []) == 0.0
    assert token_f1("the", ["a"]) == 1.0  # both normalise to nothing: SQuAD counts that a match
    # answer accuracy: an alias as a whole token sequence inside a sentence-long answer
    assert answer_accuracy("It was built by Gustave Eiffel in 1889.", ["Eiffel", "G. Eiffel"]) == 1.0
    assert answer_accuracy("The Eiffelturm is tall", ["Eiffel"]) == 0.0
    assert answer_accuracy("anything", ["", "the"]) == 0.0  # empty after normalisation


def test_regex_answers():
    pats = [r"19\d\d", r"nineteen eighty[- ]four"]
    assert exact_match("1984 it was", pats, "regex") == 1.0  # re.match: at the start
    assert exact_match("Nineteen Eighty-Four", pats, "regex") == 1.0  # case-insensitive
    assert exact_match("in 1984", pats, "regex") == 0.0
    assert token_f1("in 1984", pats, "regex") == pytest.approx(2 / 3)  # against the found span
    assert token_f1("no year here", pats, "regex") == 0.0
    assert answer_accuracy("in 1984", pats, "regex") == 1.0 and answer_accuracy("no", pats, "regex") == 0.0
    assert exact_match("(", ["("], "regex") == 0.0  # a pattern that does not compile: no match
    with pytest.raises(DataError):
        exact_match("x", ["x"], "fuzzy")


def _instances(n=3):
    out = []
    for i in range(n):
        cands = [Candidate(id=f"c{i}-{j}", text=f"chunk {j} of q{i}", rank=j,
                           labels={"containment": int(j == 2 and i != 1)}) for j in range(5)]
        out.append(Instance(Question(id=f"q{i}", text=f"question {i}?", answers=[f"chunk {2}", "x"]), cands))
    return out


class FakeGenerator(Generator):
    """Answers with the first chunk's text (or "no idea"); no model."""

    def __init__(self):
        self.model_id, self.max_new_tokens, self.calls = "fake-gen", 32, 0

    def prompt_ids(self, question, chunks):
        return [len(question), *[len(c) for c in chunks]]

    def answer(self, question, chunks, measure_noreuse=True):
        self.calls += 1
        ids = self.prompt_ids(question, chunks)
        text = chunks[0].split(" of ")[0] if chunks else "no idea"
        return Answer(text=text, tokens_out=2, prompt_tokens=10 * len(ids), prefill_tokens=10 * len(ids) - 5,
                      ttft_ms=1.0 + len(chunks), ttft_ms_noreuse=2.0 + 2 * len(chunks) if measure_noreuse else None,
                      first_token_agrees=True if measure_noreuse else None, peak_rss_mb=0.5, seconds=0.01,
                      prompt=ids_hash(ids))


def test_reference_picks_and_oracle_fallback():
    refs = reference_picks(_instances())
    assert refs["no_context"] == [[], [], []] and refs["top1"] == [[0]] * 3
    assert refs["top5"][0] == [0, 1, 2, 3, 4] and refs["oracle"] == [[2], [0], [2]]


def test_answer_table_scores_shares_and_caches(tmp_path):
    insts = _instances()
    picks = {"sel_a": [[2], [2], [0]], "sel_b": [[2], [1], [2]]}
    gen = FakeGenerator()
    res = answer_table(insts, picks, gen, cache=tmp_path, progress=False, noreuse_pairs=4)
    c = res["conditions"]
    assert set(c) == {"no_context", "top1", "top5", "oracle", "sel_a", "sel_b"}
    assert c["oracle"]["em"]["mean"] == pytest.approx(2 / 3, abs=1e-4) and c["oracle"]["oracle_fallback"] == 1
    assert c["sel_a"]["em"]["mean"] == pytest.approx(2 / 3, abs=1e-4) and c["no_context"]["em"]["mean"] == 0.0
    assert c["oracle"]["answerable"]["questions"] == 2 and c["oracle"]["answerable"]["em"]["mean"] == 1.0
    assert c["top5"]["chunks"] == 5 and 0 <= c["sel_a"]["em"]["lo"] <= c["sel_a"]["em"]["hi"] <= 1
    # distinct (question, chunks) pairs are generated once, shared by every condition picking them
    distinct = {(i, tuple(p[i])) for p in [*picks.values(), *reference_picks(insts).values()] for i in range(3)}
    assert res["cache"]["pairs"] == len(distinct) == gen.calls and res["cache"]["generated"] == gen.calls
    assert res["kv_reuse"]["pairs"] == 4 and res["kv_reuse"]["saving_ms"] > 0
    assert res["answers"]["sel_b"][1] == {"id": "q1", "pick": [1], "answer": "chunk 1", "em": 0.0, "f1": 0.5,
                                          "acc": 0.0}
    # a second call (a new process would do the same) makes no generator call
    again = answer_table(insts, picks, FakeGenerator(), cache=tmp_path, progress=False)
    assert again["cache"]["generated"] == 0 and again["cache"]["cached"] == len(distinct)
    assert again["conditions"] == res["conditions"]
    # a sample keeps the same questions for every condition
    one = answer_table(insts, picks, FakeGenerator(), sample=2, cache=tmp_path, progress=False)
    assert one["questions"] == 2 and len(one["answers"]["sel_a"]) == 2


def test_answer_table_rejects_bad_picks(tmp_path):
    with pytest.raises(DataError, match="rows for 3"):
        answer_table(_instances(), {"s": [[0]]}, FakeGenerator(), cache=tmp_path, progress=False)
    with pytest.raises(DataError, match="out of range"):
        answer_table(_instances(), {"s": [[0], [7], [0]]}, FakeGenerator(), cache=tmp_path, progress=False)


def test_the_i_dont_know_row_answers_only_where_the_selector_keeps_a_chunk(tmp_path):
    insts = _instances()  # q1 has no positive candidate
    picks = {"sel_a": [[2], [2], [0]]}
    res = answer_table(insts, picks, FakeGenerator(), cache=tmp_path, progress=False,
                       abstain={"sel_a": [False, True, True], "unknown": [True] * 3})
    assert set(res["abstention"]) == {"sel_a"}  # only selectors with picks get a row
    r = res["abstention"]["sel_a"]
    assert r["questions"] == 3 and r["answered"] == 1 and r["coverage"] == pytest.approx(1 / 3, abs=1e-4)
    assert r["f1"]["mean"] == 1.0 and r["em"]["mean"] == 1.0  # q0 answered "chunk 2"
    assert r["f1_all"]["mean"] == pytest.approx(1 / 3, abs=1e-4)  # "I don't know" scores 0
    assert (r["abstained_answerable"], r["abstained_unanswerable"], r["abstained_correct"]) == (1, 1, 1)
    assert r["prefill_tokens"] == pytest.approx(5.0) and r["prefill_saved_pct"] == pytest.approx(66.67)
    assert res["conditions"]["sel_a"]["f1"]["mean"] == pytest.approx(2.5 / 3, abs=1e-4)  # the plain row is unchanged
    with pytest.raises(DataError, match="flags for 3"):
        answer_table(insts, picks, FakeGenerator(), cache=tmp_path, progress=False, abstain={"sel_a": [True]})
    everything = answer_table(insts, picks, FakeGenerator(), cache=tmp_path, progress=False,
                              abstain={"sel_a": [True] * 3})["abstention"]["sel_a"]
    assert everything["answered"] == 0 and everything["f1"] is None and everything["prefill_saved_pct"] == 100.0


def test_empty_selection_as_an_abstainer():
    from chunksel.study.llm_table import empty_selection

    got = empty_selection([[], [1], [], [0, 2]], [False, False, True, True])
    assert got == {"unanswerable": 2, "answerable": 2, "unanswerable_abstained": 0.5, "answerable_kept": 0.5}
    assert empty_selection([[1]], [True])["unanswerable_abstained"] is None
