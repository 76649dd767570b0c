"""The LLM selectors' core (chunksel.llm.listwise): prompts, windows, repairs, the cached
runner on a model-free backend, the utility label source and the CLI's checks."""

from __future__ import annotations

import pytest
from tests.doubles import ScriptedBackend

from chunksel.errors import ConfigError, DataError
from chunksel.llm.listwise import (
    ListwiseLLM,
    keep_prompt,
    merge_queue,
    next_utility_window,
    parse_permutation,
    parse_selection,
    passage_text,
    plan_utility,
    rank_prompt,
    rank_windows,
    utility_prompt,
)

PASSAGES = ["Paris is the capital of France.", "Berlin is in Germany."]


# ------------------------------------------------------------------ prompts
def test_rank_prompt_is_the_fixed_text():
    assert rank_prompt("  capital of France? ", PASSAGES) == [
        {"role": "system", "content": "You are an assistant that ranks passages by their relevance to a search query."},
        {"role": "user", "content": (
            "I will give you 2 passages, each marked with a number in square brackets. "
            "Rank them by their relevance to the query: capital of France?\n\n"
            "[1] Paris is the capital of France.\n"
            "[2] Berlin is in Germany.\n\n"
            "Search query: capital of France?\n"
            "Rank the 2 passages above by their relevance to the search query, most relevant first. "
            "Write the ranking with the passage numbers only, in the format [2] > [1] > [3]. "
            "Do not explain.")},
    ]


def test_utility_prompt_is_the_fixed_text():
    assert utility_prompt("capital of France?", PASSAGES) == [
        {"role": "system",
         "content": "You are an assistant that selects the passages that are useful for answering a question."},
        {"role": "user", "content": (
            "I will give you 2 passages, each marked with a number in square brackets. "
            "A passage is useful if it helps to write an accurate and complete answer to the question: "
            "capital of France?\n\n"
            "[1] Paris is the capital of France.\n"
            "[2] Berlin is in Germany.\n\n"
            "Question: capital of France?\n"
            "First write a short answer to the question from the passages, as \"Answer: ...\". "
            "Then select the useful passages, as \"My selection: [[i],[j],...]\" with their numbers "
            "(\"My selection: []\" if none is useful).")},
    ]


def test_keep_prompt_and_passage_text():
    assert keep_prompt("q?", " Paris \n", "Paris is nice.") == (
        "Question: q?\nDraft answer: Paris\nPassage: Paris is nice.\n"
        "Is this passage useful for answering the question? Answer only with Yes or No.")
    assert keep_prompt("q?", "", "p") .startswith("Question: q?\nDraft answer: (none)\n")
    assert passage_text("a  b\n c d", "T", max_words=3) == "T: a b c"
    assert passage_text("a b", "", max_words=None) == "a b"


@pytest.mark.parametrize("build", [rank_prompt, utility_prompt])
def test_prompts_refuse_bad_input(build):
    with pytest.raises(DataError, match="empty question"):
        build("  ", PASSAGES)
    with pytest.raises(DataError, match="no passages"):
        build("q?", [])


# ------------------------------------------------------------------ windows
def test_rank_windows_back_to_front_on_45():
    assert rank_windows(45) == [(25, 45), (15, 35), (5, 25), (0, 15)]
    assert rank_windows(20) == [(0, 20)] and rank_windows(7) == [(0, 7)] and rank_windows(0) == []
    assert rank_windows(30) == [(10, 30), (0, 20)]
    with pytest.raises(ConfigError):
        rank_windows(45, window=10, step=11)


def test_utility_windows_carry_the_queue_head_on_45():
    picked: set[int] = set()

    def select(win):  # multiples of 3 not picked before
        new = [p for p in win if p % 3 == 0 and p not in picked]
        picked.update(new)
        return new

    queue, windows = plan_utility(45, select, window=20, carry=10)
    assert windows == [
        list(range(20)),                                          # nothing to carry yet
        [0, 3, 6, 9, 12, 15, 18] + list(range(20, 33)),           # 7 carried + 13 new
        [21, 24, 27, 30, 0, 3, 6, 9, 12, 15] + list(range(33, 43)),  # carry capped at 10
        [33, 36, 39, 42, 21, 24, 27, 30, 0, 3, 43, 44],           # the last 2 unseen
    ]
    # new selections go to the head of the queue, earlier ones follow (18 was never carried
    # again but stays selected)
    assert queue == [33, 36, 39, 42, 21, 24, 27, 30, 0, 3, 6, 9, 12, 15, 18]


def test_utility_windows_with_empty_selections_take_20_new_each():
    queue, windows = plan_utility(45, lambda win: [], window=20, carry=10)
    assert queue == [] and windows == [list(range(20)), list(range(20, 40)), list(range(40, 45))]


def test_window_helpers():
    assert next_utility_window([5, 1, 2], 20, 45, window=4, carry=2) == ([5, 1], [20, 21])
    assert merge_queue([1, 2, 3], [3, 7]) == [3, 7, 1, 2]
    with pytest.raises(ConfigError):
        next_utility_window([], 0, 5, window=10, carry=10)


# ------------------------------------------------------------------ repairs
def test_permutation_repairs_are_counted():
    order, rep = parse_permutation("[3] > [1] > [3] > [7] > [2]", 4)
    assert order == [2, 0, 1, 3]
    assert (rep.duplicates, rep.out_of_range, rep.missing, rep.unparsed) == (1, 1, 1, 0)
    order, rep = parse_permutation("2, 1", 3)  # bare numbers when nothing is bracketed
    assert order == [1, 0, 2] and rep.missing == 1
    order, rep = parse_permutation("I cannot rank these.", 3)
    assert order == [0, 1, 2] and rep.unparsed == 1 and rep.total() == 1
    order, rep = parse_permutation("[2] > [1]", 2)
    assert order == [1, 0] and not rep.malformed()


def test_selection_repairs_are_counted():
    s = parse_selection("Answer: Paris\nMy selection: [[2],[5],[2],[0]]", 4)
    assert s.answer == "Paris" and s.selected == [1] and not s.empty
    assert (s.repairs.out_of_range, s.repairs.duplicates, s.repairs.unparsed) == (2, 1, 0)
    s = parse_selection("Answer: nothing here\nMy selection: []", 4)
    assert s.empty and s.selected == [] and not s.repairs.malformed()  # a valid empty selection
    s = parse_selection("Paris is the capital.", 4)
    assert s.empty and s.answer == "Paris is the capital." and (s.repairs.unparsed, s.repairs.no_answer) == (1, 1)
    s = parse_selection("Answer: x. My selection: [1, 3]\nand more [4]", 4)
    assert s.selected == [0, 2] and s.answer == "x."


# ------------------------------------------------------------------ the runner
def _tag(i: int) -> str:
    return (chr(97 + i // 26) + chr(97 + i % 26)) * 2  # aaaa, abab, ...: one 4-letter word each


def _texts(n):
    return [f"it is {_tag(i)} ok" for i in range(n)], [f"id{i}" for i in range(n)]


def test_rank_runs_the_windows_and_resumes_from_the_cache(tmp_path):
    texts, ids = _texts(45)
    backend = ScriptedBackend()
    llm = ListwiseLLM(backend, cache=tmp_path, fsync=False)
    run = llm.rank("q1", "which topic?", texts, ids)
    assert run.windows[0] == list(range(25, 45)) and len(run.windows) == 4 and run.calls == 4
    assert sorted(run.order) == list(range(45)) and run.cached == 0 and not run.repairs.malformed()
    assert run.prompt_tokens > 0 and backend.usage.calls == 4
    llm.close()
    again = ListwiseLLM(ScriptedBackend(), cache=tmp_path, fsync=False).rank("q1", "which topic?", texts, ids)
    assert again.order == run.order and again.cached == again.calls == 4


def test_utility_text_read_and_logprobs_read(tmp_path):
    texts, ids = _texts(45)
    run = ListwiseLLM(ScriptedBackend(), cache=tmp_path, read="text").select("q", "any tag", texts, ids)
    # the script selects each window's first passage: 0, then the carried 0 again, then 0
    assert run.order == [0] and run.k == 1 and run.calls == len(run.windows) and run.answers[0] == "scripted"
    assert run.windows[1][:1] == [0] and len(run.windows[1]) == 20
    logp = ListwiseLLM(ScriptedBackend(), cache=tmp_path, read="logprobs").select("q", f"is it {_tag(3)} or {_tag(7)}", texts, ids)
    # keep prompts: Yes where the passage shares a 4+ letter word with the question
    assert set(logp.order) == {3, 7} and logp.read == "logprobs"
    assert logp.calls == len(logp.windows) * 1 + sum(len(w) + 1 for w in logp.windows)  # + the content-free one
    empty = ListwiseLLM(ScriptedBackend(), cache=tmp_path, read="logprobs", calibrate=False).select(
        "q", "nothing shared", texts, ids)
    assert empty.empty and empty.k == 0 and empty.order == []


def test_runner_refuses_bad_input(tmp_path):
    llm = ListwiseLLM(ScriptedBackend(), cache=tmp_path)
    with pytest.raises(DataError, match="empty question"):
        llm.select("q", " ", ["a"], ["1"])
    with pytest.raises(DataError, match="no candidate passages"):
        llm.rank("q", "q?", [], [])
    with pytest.raises(DataError, match="distinct"):
        llm.rank("q", "q?", ["a", "b"], ["1", "1"])
    with pytest.raises(ConfigError):
        ListwiseLLM(ScriptedBackend(), read="magic")


# ------------------------------------------------------------------ selectors and labels
def test_utility_selector_reports_the_dynamic_selection(toy_instances):
    from chunksel.selectors import make_selector

    sel = make_selector("utility", backend="scripted", read="logprobs", progress=False)
    batch = toy_instances[:4]
    dyn = sel.select_dynamic(batch)
    for inst, s in zip(batch, dyn, strict=True):
        pos = int(inst.labels().argmax())  # the toy positive repeats the question's key word
        assert pos in s.indices and sel.runs_[inst.id].k == len(s.indices)
    top = sel.select(batch, k=2)
    assert all(t.indices[0] == d.indices[0] for t, d in zip(top, dyn, strict=True))
    rank = make_selector("rankgpt", backend="scripted", progress=False)
    assert rank.select(batch, k=1)[0].indices == [len(batch[0].candidates) - 1]  # the script reverses
    assert (rank.family, rank.role, rank.query_cost) == ("LLM", "llm", "llm")


def test_utility_labels_round_trip_through_the_sidecar(tmp_path, toy_instances):
    from chunksel.data.label_sidecars import attach_sidecar_labels
    from chunksel.labels.utility import label_instances, write_sidecar
    from chunksel.types import Instance

    insts = toy_instances[:3]
    res = label_instances(insts, ScriptedBackend(), read="logprobs", cache=tmp_path, progress=False)
    assert res.summary()["questions"] == 3 and len(res.rows) == sum(len(i.candidates) for i in insts)
    assert all("utility" in c.labels for i in insts for c in i.candidates)
    store = tmp_path / "instances" / "toy" / "abc"
    store.mkdir(parents=True)
    path = write_sidecar(store, res)
    assert path.name == "utility@scripted-scripted-1.jsonl"
    fresh = [Instance.from_dict(i.to_dict()) for i in insts]
    for i in fresh:
        for c in i.candidates:
            c.labels.pop("utility", None)
            c.labels.pop("utility@scripted-scripted-1", None)
    assert attach_sidecar_labels(fresh, store) == ["scripted-scripted-1"]
    assert [i.labels("utility").tolist() for i in fresh] == [i.labels("utility").tolist() for i in insts]


def test_cli_select_needs_one_of_model_and_selector(capsys):
    from chunksel.cli import main

    assert main(["select", "--question", "q?", "--chunk", "a"]) == 2
    assert "--selector rankgpt|utility" in capsys.readouterr().err
    assert main(["select", "--model", "m", "--selector", "utility", "--question", "q?", "--chunk", "a"]) == 2
    assert "not both" in capsys.readouterr().err
    assert main(["select", "--selector", "utility", "--llm", "ftp://x", "--question", "q?", "--chunk", "a"]) == 2
    assert "--llm must be" in capsys.readouterr().err
