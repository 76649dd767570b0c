from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tqdm.auto  # noqa: F401  (tqdm reads TQDM_DISABLE once, at import: before any test can set it)

from chunksel.types import Candidate, Instance, Question

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def data_root() -> Path:
    """The shared benchmark data (CHUNKSEL_DATA, else ../shared/data beside the repo)."""
    raw = os.environ.get("CHUNKSEL_DATA") or str(Path(__file__).resolve().parents[2] / "shared" / "data")
    root = Path(raw)
    if not root.is_dir():
        message = f"benchmark data not found at {root} (set CHUNKSEL_DATA)"
        if os.environ.get("CHUNKSEL_REQUIRE_DATA") == "1":  # CI: a missing data folder is an error
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return root


#: prototype-selector settings small enough for unit tests (a 2 x 32 MLP, a few epochs)
TINY_PROTOTYPE = dict(hidden=32, depth=2, batch_size=16, max_epochs=6, patience=3, lr=3e-3, progress=False)


@pytest.fixture
def one_thread():
    """Tiny models train faster on one torch thread on a shared machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Every test writes its cache under a temporary folder unless it sets its own, and
    leaves tqdm's process-wide switch as it found it (``chunksel --quiet`` sets
    ``TQDM_DISABLE``, which tqdm reads when it is first imported: an in-process CLI test
    would otherwise silence every later test's bars)."""
    monkeypatch.setenv("CHUNKSEL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
    monkeypatch.setenv("TQDM_DISABLE", os.environ.get("TQDM_DISABLE", ""))
    if not os.environ["TQDM_DISABLE"]:
        monkeypatch.delenv("TQDM_DISABLE")


@pytest.fixture(autouse=True, scope="session")
def _scripted_llm_backend():
    """``get_backend("scripted")``: the model-free LLM double of tests/doubles.py (the
    contract tests run the LLM selectors on it)."""
    from chunksel.llm.backends import register_backend

    register_backend("scripted", "tests.doubles", "ScriptedBackend")


def make_toy_instances(n: int = 24, k: int = 5, dim: int = 8, seed: int = 0) -> list[Instance]:
    """Toy instances where the positive candidate repeats the question's key word.

    Candidate embeddings are random unit vectors, the positive's aligned with a
    question-specific direction; the last instance has only k-2 candidates (padding).
    """
    rng = np.random.default_rng(seed)
    q_rng = np.random.default_rng(seed + 10_000)  # question embeddings: a stream of their own
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    out = []
    for i in range(n):
        key = words[i % len(words)]
        pos = int(rng.integers(k))
        kk = k - 2 if i == n - 1 else k
        pos = min(pos, kk - 1)
        cands = []
        for j in range(kk):
            text = f"the {key} answer is here" if j == pos else f"unrelated {words[(i + j + 1) % len(words)]} text"
            emb = rng.normal(size=dim).astype(np.float32)
            emb /= np.linalg.norm(emb)
            cands.append(
                Candidate(
                    id=f"p{i}-{j}", text=text, title="", score=1.0 - 0.1 * j, rank=j,
                    labels={"containment": int(j == pos)}, embedding=emb,
                )
            )
        split = ("train", "train", "train", "val", "test")[i % 5]
        q = Question(id=f"toy:q:{i}", text=f"what is the {key} answer", answers=[key], dataset="toy")
        q_emb = q_rng.normal(size=dim).astype(np.float32)
        q.embedding = q_emb / np.linalg.norm(q_emb)
        out.append(Instance(question=q, candidates=cands, split=split, label_source="containment"))
    return out


def make_toy_study(tmp: Path, n: int = 40) -> tuple[dict[str, list[Instance]], Any, Path]:
    """Two toy datasets (popqa, msmarco: ``n`` instances each, question ids prefixed by the
    dataset), random generator features for every question and a corpus TSV of their
    candidates under ``tmp`` (for the BM25-based selectors)."""
    from chunksel.features.base import InMemoryFeatures

    data = {"popqa": make_toy_instances(n=n, seed=1), "msmarco": make_toy_instances(n=n, seed=2)}
    for ds, insts in data.items():
        for inst in insts:
            inst.question.id = f"{ds}:{inst.question.id}"
    ids = [i.question.id for insts in data.values() for i in insts]
    rng = np.random.default_rng(0)
    feats = InMemoryFeatures(ids, h=rng.normal(size=(len(ids), 6)), r=rng.random((len(ids), 4)))
    corpus = tmp / "corpus.tsv"
    corpus.write_text("id\ttext\ttitle\tsource\n" + "".join(
        f"{c.id}\t{c.text}\t{c.title}\ttoy\n" for insts in data.values() for i in insts for c in i.candidates))
    return data, feats, corpus


@pytest.fixture
def toy_instances() -> list[Instance]:
    return make_toy_instances()
