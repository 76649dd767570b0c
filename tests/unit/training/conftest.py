from __future__ import annotations

import numpy as np
import pytest

from chunksel.features.base import InMemoryFeatures
from chunksel.types import Candidate, Instance, Question


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


def make_planted(n: int = 1000, k: int = 5, d_h: int = 8, d_r: int = 16, d_e: int = 16,
                 noise: float = 0.1, seed: int = 0) -> tuple[list[Instance], InMemoryFeatures]:
    """Only the hidden state carries the signal: the positive's embedding is A h (+ noise).

    Routing features are pure noise and the other candidates are random unit vectors,
    so a selector must read ``h`` to beat chance (1/k).
    """
    rng = np.random.default_rng(seed)
    a = np.random.default_rng(1234).normal(size=(d_e, d_h))
    insts, hs, rs, ids = [], [], [], []
    for i in range(n):
        h = rng.normal(size=d_h)
        r = rng.normal(size=d_r)
        pos = int(rng.integers(k))
        cands = []
        for j in range(k):
            if j == pos:
                v = a @ h
                v = v + noise * np.linalg.norm(v) / np.sqrt(d_e) * rng.normal(size=d_e)
            else:
                v = rng.normal(size=d_e)
            v = (v / np.linalg.norm(v)).astype(np.float32)
            cands.append(Candidate(id=f"p{i}-{j}", text="", rank=j, labels={"given": int(j == pos)}, embedding=v))
        qid = f"planted:q:{i}"
        insts.append(Instance(Question(id=qid, text="q"), cands, split="train", label_source="given"))
        hs.append(h)
        rs.append(r)
        ids.append(qid)
    return insts, InMemoryFeatures(ids, h=np.stack(hs), r=np.stack(rs))


@pytest.fixture(scope="module")
def planted():
    return make_planted()
