"""K-NRM, DRMM and Local-DUET learn a toy task where exact matches carry the label."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from chunksel.selectors import load_selector, make_selector
from chunksel.types import Instance

TINY = {
    "knrm": {"embedding_init": "random", "embedding_dim": 16, "max_doc_len": 16, "lr": 1e-2},
    "drmm": {"embedding_init": "random", "embedding_dim": 16, "max_doc_len": 16, "lr": 1e-2},
    "duet": {"n_filters": 16, "hidden": 16, "max_query_len": 8, "max_doc_len": 32, "lr": 1e-2},
}


@pytest.mark.parametrize("name", sorted(TINY))
def test_learns_exact_match_toy_task(name: str, toy_instances: list[Instance], tmp_path: Path) -> None:
    train = [i for i in toy_instances if i.split == "train"]
    val = [i for i in toy_instances if i.split == "val"]
    sel = make_selector(name, max_epochs=30, patience=30, progress=False, seed=0, **TINY[name])
    before = make_selector(name, max_epochs=30, progress=False, seed=0, **TINY[name])
    sel.fit(train, val=val)
    scores = sel.score(toy_instances)
    labels = [i.labels() for i in toy_instances]
    acc = np.mean([lab[int(np.argmax(s[: len(lab)]))] for s, lab in zip(scores, labels, strict=True)])
    assert acc >= 0.8, f"{name}: top-1 accuracy {acc:.2f} (chance ~0.2)"
    assert sel.history_.train_loss[-1] < sel.history_.train_loss[0]
    assert not before.is_fitted()
    sel.save(tmp_path / name)
    assert (tmp_path / name / "model.safetensors").is_file()
    np.testing.assert_array_equal(load_selector(tmp_path / name).score(toy_instances), scores)


def test_frozen_embeddings_are_not_counted(toy_instances: list[Instance]) -> None:
    train = [i for i in toy_instances if i.split == "train"]
    kw = {"embedding_init": "random", "embedding_dim": 8, "max_epochs": 1, "progress": False}
    free = make_selector("knrm", train_embeddings=True, **kw).fit(train)
    frozen = make_selector("knrm", train_embeddings=False, **kw).fit(train)
    assert frozen.n_parameters() == 11 + 1  # the linear layer over 11 kernels
    assert free.n_parameters() == 12 + free.model_.embedding.weight.numel()
    w0 = make_selector("knrm", train_embeddings=False, **kw).fit(train).model_.embedding.weight
    np.testing.assert_array_equal(frozen.model_.embedding.weight.detach().numpy(), w0.detach().numpy())
