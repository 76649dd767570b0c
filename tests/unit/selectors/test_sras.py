"""The SRAS selector: warm-up only, PPO with an injected reward, the reward-missing
error, 197K parameters at MiniLM size, save/load."""

from __future__ import annotations

import numpy as np
import pytest
from tests.conftest import make_toy_instances

from chunksel.errors import ConfigError
from chunksel.selectors import get_selector_class, load_selector
from chunksel.selectors.base import describe
from chunksel.selectors.sras import SRASSelector

FAST = dict(hidden=16, warmup_epochs=3, update_epochs=1, progress=False)


def _aligned(n: int = 40, dim: int = 8, seed: int = 0):
    """Toy instances whose positive candidates share one embedding direction (a
    document-side signal: the additive scorer has no dot product between q and d_i,
    so "the candidate equal to the question" would be much harder for it to learn)."""
    insts = make_toy_instances(n, dim=dim, seed=seed)
    rng = np.random.default_rng(seed)
    good = np.eye(dim, dtype=np.float32)[0]
    for inst in insts:
        for c, y in zip(inst.candidates, inst.labels()):
            if y:
                v = good + 0.3 * rng.normal(size=dim).astype(np.float32)
                c.embedding = v / np.linalg.norm(v)
    return insts


def test_registry_entry() -> None:
    assert get_selector_class("sras") is SRASSelector
    d = describe("sras")
    assert (d["display_name"], d["family"], d["role"], d["query_cost"], d["extra"]) == (
        "SRAS", "rl", "baseline", "none", "sras")


def test_warmup_only_picks_one_of_five_and_round_trips(tmp_path) -> None:
    insts = _aligned()
    train = [i for i in insts if i.split != "test"]
    test = [i for i in insts if i.split == "test"]
    sel = SRASSelector(ppo_epochs=0, warmup_lr=1e-2, **{**FAST, "warmup_epochs": 40}).fit(train)
    assert sel.summary_["n_ppo"] == 0 and len(sel.summary_["warmup_loss"]) == 40
    picks = sel.select(test, k=1)
    assert all(len(p.indices) == 1 for p in picks)
    hits = [inst.labels()[p.indices[0]] for inst, p in zip(test, picks)]
    assert np.mean(hits) >= 0.75
    sel.save(tmp_path / "m")
    assert {p.name for p in (tmp_path / "m").iterdir()} == {"config.json", "model.safetensors"}
    np.testing.assert_array_equal(load_selector(tmp_path / "m").score(test), sel.score(test))


def test_ppo_with_an_injected_reward_function() -> None:
    insts = make_toy_instances(24)
    seen = []

    def reward_fn(batch, actions):
        seen.append(len(batch))
        return np.array([float(b.labels()[a[0]]) for b, a in zip(batch, actions)])

    sel = SRASSelector(ppo_epochs=2, batch_size=8, reward="hybrid", **FAST).fit(insts, reward_fn=reward_fn)
    assert sel.summary_["ppo_epochs_run"] == 2 and len(sel.summary_["reward_per_epoch"]) == 2
    # with 2 epochs the curriculum reaches every question in the first one: 3 batches of 8
    assert seen == [8] * 6 and sel.summary_["reward_calls"] == 6 and sel.summary_["n_ppo"] == 24


def test_ppo_budget_and_three_picks() -> None:
    insts = make_toy_instances(24)
    sel = SRASSelector(ppo_epochs=1, select_k=3, max_questions=10, reward="label", **FAST).fit(insts)
    assert sel.summary_["n_ppo"] == 10  # the short instance (3 candidates) stays eligible for k=3


def test_missing_reward_backend_is_a_clear_error_before_training() -> None:
    sel = SRASSelector(ppo_epochs=1, reward="hybrid", generator="/nonexistent/generator", **FAST)
    with pytest.raises(ConfigError, match="ppo_epochs=0"):
        sel.fit(make_toy_instances(10))
    assert not sel.is_fitted()


def test_mini_lm_sized_selector_has_197k_parameters(tmp_path) -> None:
    insts = make_toy_instances(10, dim=384)
    sel = SRASSelector(ppo_epochs=0, warmup_epochs=1, progress=False).fit(insts)
    assert sel.n_parameters() == 197_120
    sel.save(tmp_path / "m")
    size = (tmp_path / "m" / "model.safetensors").stat().st_size
    assert 788_480 <= size < 790_000  # float32 weights plus the safetensors header
    assert load_selector(tmp_path / "m").n_parameters() == 197_120


def test_bad_settings() -> None:
    with pytest.raises(ConfigError):
        SRASSelector(select_k=6, k=5).fit(make_toy_instances(5))
    with pytest.raises(ConfigError):
        SRASSelector(reward="nope").fit(make_toy_instances(5))
