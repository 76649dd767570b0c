"""Every registered selector, built with its defaults, fits on a small real set and learns.

The defaults are each selector's validated recipe (the profiles override only compute
budgets: SRAS's PPO epochs and questions, the cross-encoder's question cap, the anchored
engine). This test builds each one with no setting but ``progress=False`` (a display
switch), fits it on 40 MS MARCO questions (real MiniLM candidates, grouped splits, the real
SmolLM2's warm-up features where a selector reads them) and checks that a trained one
scores the training questions in a way that depends on the candidates: a recipe that
does not learn (the listwise cross-encoder whose loss stayed at ln 5) gives every
candidate the same score.

The LLM selectors (``rankgpt``, ``utility``) need no fit; with their default local backend
they rank two test questions with the real SmolLM2. They and SRAS (25 PPO epochs with a
SmolLM2 answer per sampled choice: about 4 minutes here) are marked slow and run in
``make test-defaults``; ``benchmarks/sras_paper.py`` and ``benchmarks/llm_selectors.py``
run the same recipes at scale.
"""

from __future__ import annotations

import numpy as np
import pytest

from chunksel.selectors import REGISTRY, get_selector_class

pytestmark = [pytest.mark.data, pytest.mark.model]
pytest.importorskip("torch")

LIMIT = 40
#: the selectors whose scores are not learned from the candidates' labels
UNTRAINED = {"retrieval", "random", "oracle", "bm25", "maxsim", "rankgpt", "utility"}
#: scored on two test questions only (a local generation per question)
LLM = {"rankgpt", "utility"}
#: minutes with their defaults: out of CI (make test-defaults)
SLOW = {"sras", "rankgpt", "utility"}
NAMES = [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in sorted(REGISTRY)]


@pytest.fixture(scope="module")
def small(data_root, tmp_path_factory):
    """40 MS MARCO questions with grouped splits, and the real SmolLM2's features."""
    from chunksel.build import build_instances, extract_question_features

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CHUNKSEL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
        mp.setenv("CHUNKSEL_DATA", str(data_root))
        insts = build_instances("msmarco", k=5, limit=LIMIT, split="grouped", root=data_root,
                                progress=False).instances
        feats = extract_question_features([i.question for i in insts], progress=False)
        split = {s: [i for i in insts if i.split == s] for s in ("train", "val", "test")}
        yield split, feats


@pytest.mark.parametrize("name", NAMES)
def test_every_selector_fits_with_its_defaults_on_a_small_real_set(small, name, tmp_path, monkeypatch):
    monkeypatch.setenv("CHUNKSEL_CACHE", str(tmp_path / "cache"))
    split, feats = small
    cls = get_selector_class(name)
    kw = {"progress": False} if "progress" in cls._param_names() else {}
    sel = cls(**kw)
    assert sel.get_params() == {**cls().get_params(), **kw}  # nothing but the display switch differs
    sel.fit(split["train"], feats, split["val"])
    test = split["test"][:2] if name in LLM else split["test"]
    scores = np.asarray(sel.score(test, feats))
    assert scores.shape[0] == len(test) and np.isfinite(scores).all(), name
    if name in UNTRAINED:
        return
    train = np.asarray(sel.score(split["train"], feats))
    varies = np.ptp(train, axis=1) > 1e-6
    assert varies.mean() > 0.5, f"{name}: the default recipe scores the candidates of most training questions alike"
