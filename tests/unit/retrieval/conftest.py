"""Shared fixtures for the retrieval tests: the real MiniLM and real corpus slices."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from chunksel.data.corpus import CORPORA, PRECOMPUTED, Corpus, iter_passages


@pytest.fixture(scope="session")
def encoder():
    """The packaged all-MiniLM-L6-v2 (loaded once per session)."""
    from chunksel.retrieval.encoder import Encoder

    enc = Encoder()
    enc.encode(["warm up"], progress=False)
    return enc


@pytest.fixture(scope="session")
def msmarco_emb(data_root: Path) -> np.ndarray:
    """The shipped msmarco-sub embeddings, decoded (31,604 x 384)."""
    from chunksel.retrieval.embeddings import decode_precomputed

    return decode_precomputed(data_root / PRECOMPUTED["msmarco-sub"])


def slice_corpus(data_root: Path, n: int, name: str = "msmarco-2k") -> Corpus:
    """The first ``n`` passages of msmarco-sub as an in-memory corpus (no checksum)."""
    rows = list(itertools.islice(iter_passages(data_root / CORPORA["msmarco-sub"]), n))
    return Corpus(
        [p.id for p in rows],
        [p.text for p in rows],
        [p.title for p in rows],
        [p.source for p in rows],
        name=name,
    )


@pytest.fixture(scope="session")
def corpus_slice(data_root: Path):
    """``corpus_slice(n, name)``: the first ``n`` msmarco-sub passages as a Corpus."""
    return lambda n, name="slice": slice_corpus(data_root, n, name)


@pytest.fixture(scope="session")
def msmarco_2k(data_root: Path) -> Corpus:
    return slice_corpus(data_root, 2000)


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch) -> Path:
    """A cache root of this test's own (for tests that count cache hits)."""
    monkeypatch.setenv("CHUNKSEL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """FAISS's OpenMP and torch threads spin badly on a shared 2-core CI box: use one
    in these modules (restored afterwards)."""
    import faiss
    import torch

    before = faiss.omp_get_max_threads(), torch.get_num_threads()
    faiss.omp_set_num_threads(1)
    torch.set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before[0])
    torch.set_num_threads(before[1])
