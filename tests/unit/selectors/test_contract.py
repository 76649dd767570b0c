"""One contract test run over every registered selector (docs/architecture.md, "One selector interface")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from chunksel.errors import NotFittedError
from chunksel.features.base import InMemoryFeatures
from chunksel.selectors import available, get_selector_class, load_selector
from chunksel.types import Instance

#: small, fast settings per selector; keys a class does not take are dropped, and a
#: registered selector without an entry runs with its defaults (never skipped)
SMALL: dict[str, dict] = {
    "lambdamart": {"n_estimators": 20, "min_child_samples": 1, "early_stopping_rounds": 5},
    "knrm": {"embedding_init": "random", "embedding_dim": 8, "max_doc_len": 16, "max_epochs": 2},
    "drmm": {"embedding_init": "random", "embedding_dim": 8, "max_doc_len": 16, "max_epochs": 2},
    "duet": {"n_filters": 8, "hidden": 8, "max_query_len": 8, "max_doc_len": 16, "max_epochs": 2},
    "prototype": {"hidden": 16, "max_epochs": 2, "batch_size": 8},
    "anchored": {"hidden": 16, "phi_hidden": 8, "max_epochs": 2, "batch_size": 8},
    # warm-up, then one PPO epoch on the cheap label reward (no generator)
    "sras": {"hidden": 16, "warmup_epochs": 2, "ppo_epochs": 1, "update_epochs": 2, "reward": "label"},
    # the real MiniLM weights, one layer kept, one short epoch
    "crossencoder": {"layers": 1, "epochs": 1, "max_length": 32, "batch_size": 4},
    # the stacked flagship: both of the above, trained by its own fit
    "anchored-ce": {"base_params": {"hidden": 16, "phi_hidden": 8, "max_epochs": 2, "batch_size": 8},
                    "member_params": {"layers": 1, "epochs": 1, "max_length": 32, "batch_size": 4}},
    # the LLM selectors on the model-free scripted backend (tests/doubles.py)
    "rankgpt": {"backend": "scripted"},
    "utility": {"backend": "scripted"},
}
CORPUS_SETTING = "corpus"  # bm25 and the LETOR rankers read corpus statistics


def _write_corpus(instances: list[Instance], path: Path) -> Path:
    lines = ["id\ttext\ttitle\tsource"]
    for inst in instances:
        for c in inst.candidates:
            lines.append(f"{c.id}\t{c.text}\t{c.title}\ttoy")
    lines.append("extra:1\tsome other passage about nothing in particular\t\ttoy")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _settings(name: str, corpus: Path) -> dict:
    cls = get_selector_class(name)
    params = set(cls._param_names())
    out = {k: v for k, v in SMALL.get(name, {}).items() if k in params}
    if CORPUS_SETTING in params:
        out[CORPUS_SETTING] = str(corpus)
    if "base_params" in params:  # a stacked selector's base reads them
        out["base_params"] = {**out.get("base_params", {}), CORPUS_SETTING: str(corpus)}
    if "progress" in params:
        out["progress"] = False
    return out


@pytest.mark.parametrize("name", available())
def test_selector_contract(name: str, tmp_path: Path, toy_instances: list[Instance]) -> None:
    instances = toy_instances
    # put the short (padded) instance in the middle of the batch too
    batch = instances[:5] + [instances[-1]] + instances[5:-1]
    train = [i for i in instances if i.split == "train"]
    val = [i for i in instances if i.split == "val"]
    rng = np.random.default_rng(0)
    ids = [i.id for i in instances]
    feats = InMemoryFeatures(ids, h=rng.normal(size=(len(ids), 16)), r=rng.random((len(ids), 12)))
    cls = get_selector_class(name)
    sel = cls(**_settings(name, _write_corpus(instances, tmp_path / "corpus.tsv")))

    if cls.requires_fit:
        with pytest.raises(NotFittedError):
            sel.score(batch, feats)
        with pytest.raises(NotFittedError):
            sel.save(tmp_path / "unfitted")
    assert sel.fit(train, feats, val) is sel

    scores = sel.score(batch, feats)
    n_real = np.array([len(i.candidates) for i in batch])
    k_max = int(n_real.max())
    assert scores.shape == (len(batch), k_max)
    mask = np.arange(k_max)[None, :] < n_real[:, None]
    assert np.isfinite(scores[mask]).all()
    assert np.isneginf(scores[~mask]).all() and (~mask).any()

    for k in range(1, k_max + 2):
        sels = sel.select(batch, feats, k=k)
        assert len(sels) == len(batch)
        for inst, s, n in zip(batch, sels, n_real, strict=True):
            assert s.question_id == inst.id
            assert len(s.indices) == min(k, n)
            assert len(set(s.indices)) == len(s.indices)
            assert all(0 <= j < n for j in s.indices)
            assert s.candidate_ids == [inst.candidates[j].id for j in s.indices]

    sel.save(tmp_path / "saved")
    assert (tmp_path / "saved" / "config.json").is_file()
    again = load_selector(tmp_path / "saved")
    assert type(again) is cls
    # the same scores; a torch scorer may differ in the last float32 bit between two runs
    # (oneDNN's reduction order), e.g. the cross-encoder by 2e-9 on a score of 0.011; its
    # retrieval prior z-scores the network's scores within each set, and a tiny untrained
    # network's near-equal scores have a small spread there, which magnifies that bit (5e-5)
    rtol = 1e-4 if name in ("crossencoder", "anchored-ce") else 1e-6
    np.testing.assert_allclose(again.score(batch, feats), scores, rtol=rtol, atol=0)

    # every selector but the LLM ones is calibrated on the validation split by fit
    if cls.query_cost == "llm":
        assert sel.calibrator_ is None
        return
    chunk_p, set_p = sel.probabilities(batch, feats)
    assert np.all((chunk_p[mask] >= 0) & (chunk_p[mask] <= 1)) and np.isnan(chunk_p[~mask]).all()
    assert set_p.shape == (len(batch),) and np.all((set_p >= 0) & (set_p <= 1))
    assert again.provenance_["calibration"]["label_source"] == "containment"
    p2, s2 = again.probabilities(batch, feats)
    np.testing.assert_array_equal(p2, chunk_p)
    np.testing.assert_array_equal(s2, set_p)


@pytest.mark.parametrize("name", available())
def test_selector_reports_trainable_parameters(name: str, tmp_path: Path, toy_instances: list[Instance]) -> None:
    """``n_parameters()`` (read by the latency/size benchmark) on a fitted selector,
    unchanged by save -> load."""
    instances = toy_instances
    ids = [i.id for i in instances]
    rng = np.random.default_rng(0)
    feats = InMemoryFeatures(ids, h=rng.normal(size=(len(ids), 16)), r=rng.random((len(ids), 12)))
    cls = get_selector_class(name)
    sel = cls(**_settings(name, _write_corpus(instances, tmp_path / "corpus.tsv")))
    sel.fit([i for i in instances if i.split == "train"], feats, [i for i in instances if i.split == "val"])
    n_params = sel.n_parameters()
    assert isinstance(n_params, int) and n_params >= 0
    if not cls.requires_fit:
        assert n_params == 0
    sel.save(tmp_path / "saved")
    assert load_selector(tmp_path / "saved").n_parameters() == n_params


def test_available_works_in_a_fresh_interpreter():
    # available() is the first call of a script listing selectors: it must not rely on
    # another module having imported importlib.util
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", "from chunksel.selectors import available; print(available())"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "'lambdamart'" in out.stdout and "'anchored'" in out.stdout
