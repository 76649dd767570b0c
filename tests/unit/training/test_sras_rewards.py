"""The QA reward: prompts, cache keys, and caching across a rerun and a resumed run."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from tests.conftest import make_toy_instances

from chunksel.llm.backends import Generation, LLMBackend, Prompt, normalize_prompt
from chunksel.training.ppo import PPOConfig
from chunksel.training.rewards import AnswerGenerator, LabelReward, QAReward, clean_answer
from chunksel.training.sras import SRASData, SRASTrainConfig, train_sras


class KeywordBackend(LLMBackend):
    """Answers with the key word of the context's first chunk (the toy positives say
    'the <key> answer is here'); counts its generations."""

    name = "keyword"

    def __init__(self) -> None:
        super().__init__()
        self.model_id = "keyword-1"
        self.generated = 0

    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int = 64, *,
                 temperature: float = 0.0, top_logprobs: int = 0) -> list[Generation]:
        out = []
        for p in prompts:
            context = normalize_prompt(p)[-1]["content"].split("Context:\n", 1)[1]
            words = context.split()
            out.append(Generation(text=f"Answer: {words[1]}\nmore text", tokens_in=len(words), tokens_out=2,
                                  seconds=0.0, finish_reason="stop"))
        self.generated += len(out)
        self._record(out, 1)
        return out

    def choose_many(self, prompts, options, *, default=None):  # pragma: no cover - unused
        raise NotImplementedError


def _token_overlap(preds, refs):
    return np.array([float(any(p.lower() == r.lower() for r in rs)) for p, rs in zip(preds, refs)])


def _data(instances):
    k = 5
    q = np.stack([i.question.embedding for i in instances])
    e = np.zeros((len(instances), k, 8), np.float32)
    m = np.zeros((len(instances), k), bool)
    y = np.zeros((len(instances), k), np.int8)
    for b, inst in enumerate(instances):
        for j, c in enumerate(inst.candidates):
            e[b, j], m[b, j], y[b, j] = c.embedding, True, c.labels["containment"]
    return SRASData(q, e, m, y, instances)


CFG = SRASTrainConfig(hidden=8, warmup_epochs=1, seed=3, progress=False,
                      ppo=PPOConfig(epochs=2, batch_size=4, update_epochs=1))


def test_prompt_and_cache_key_ignore_pick_order() -> None:
    inst = make_toy_instances(3)[0]
    gen = AnswerGenerator(KeywordBackend())
    assert gen.item_id(inst, [2, 0]) == gen.item_id(inst, [0, 2]) == f"{inst.id}|{inst.candidates[0].id},{inst.candidates[2].id}"
    p = gen.prompt(inst, [2, 0])
    assert p.index(inst.question.text) < p.index(inst.candidates[0].text) < p.index(inst.candidates[2].text)
    assert clean_answer("\n Answer: Paris\nbecause") == "Paris" and clean_answer("  ") == ""


def test_hybrid_reward_mixes_relaxed_f1_and_bertscore(tmp_path) -> None:
    inst = make_toy_instances(8)
    pos = [int(np.argmax(i.labels())) for i in inst[:2]]
    reward = QAReward(AnswerGenerator(KeywordBackend(), cache=tmp_path), alpha=0.6,
                      bertscore=lambda p, r: np.full(len(p), 0.5))
    r = reward(inst[:2], [[pos[0]], [(pos[1] + 1) % 5]])
    # a positive chunk answers the key word exactly (F1 1); the other answers "<other word>"
    np.testing.assert_allclose(r, [0.6 * 1.0 + 0.4 * 0.5, 0.6 * 0.0 + 0.4 * 0.5])
    sparse = QAReward(AnswerGenerator(KeywordBackend(), cache=tmp_path), mode="sparse")
    np.testing.assert_allclose(sparse(inst[:2], [[pos[0]], [(pos[1] + 1) % 5]]), [1.0, 0.0])
    np.testing.assert_allclose(LabelReward()(inst[:2], [[pos[0]], [(pos[1] + 1) % 5]]), [1.0, 0.0])


def _reward(backend, cache):
    return QAReward(AnswerGenerator(backend, cache=cache), bertscore=_token_overlap)


def test_rerun_makes_no_new_generator_calls(tmp_path) -> None:
    instances = make_toy_instances(24)
    first = KeywordBackend()
    _, s1 = train_sras(_data(instances), _reward(first, tmp_path), CFG)
    assert first.generated > 0
    again = KeywordBackend()
    _, s2 = train_sras(_data(instances), _reward(again, tmp_path), CFG)
    assert again.generated == 0  # every (question, chunk ids) answered from the cache
    assert s2.reward_per_batch == s1.reward_per_batch


class Killed(Exception):
    pass


def test_resumed_run_only_generates_what_the_killed_one_did_not(tmp_path) -> None:
    instances = make_toy_instances(24)
    full = KeywordBackend()
    _, s_full = train_sras(_data(instances), _reward(full, tmp_path / "reference"), CFG)

    killed_backend = KeywordBackend()
    inner = _reward(killed_backend, tmp_path / "run")
    calls = {"n": 0}

    def dies_on_third_batch(insts, actions):
        calls["n"] += 1
        if calls["n"] == 3:
            raise Killed
        return inner(insts, actions)

    with pytest.raises(Killed):
        train_sras(_data(instances), dies_on_third_batch, CFG)
    resumed = KeywordBackend()
    _, s_res = train_sras(_data(instances), _reward(resumed, tmp_path / "run"), CFG)
    assert s_res.reward_per_batch == s_full.reward_per_batch
    assert killed_backend.generated > 0
    # nothing answered before the kill is generated again
    assert killed_backend.generated + resumed.generated == full.generated
