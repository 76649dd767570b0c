"""A FAISS IVF-PQ index trained on a sample and filled shard by shard.

:func:`build_ivfpq_from_shards` never holds the corpus in memory: it reads the shards'
row counts from their ``.npy`` headers, gathers the training sample (the same sorted
uniform sample :func:`chunksel.retrieval.index.build_index` draws, so both train the
same quantizer and codebooks) through memory maps, trains, then adds one shard at a
time. Peak memory is the training sample (``train_sample x d x 4`` bytes: 768 MB for
500,000 MiniLM vectors), one shard, and the index itself -- ``m`` bytes of PQ code plus
an 8-byte id per vector (72 bytes at m = 64), plus the coarse centroids
(``nlist x d x 4``) and the PQ codebooks (``m x 2^nbits x d/m x 4``).

Given the same vectors in the same order, the result equals ``build_index(emb,
kind="ivfpq", ...)``: same settings, same trained index, same inverted lists.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.config import show_progress
from chunksel.errors import DataError, require
from chunksel.retrieval.index import Index, new_ivfpq


def shard_rows(files: Sequence[str | os.PathLike]) -> list[int]:
    """Row count of each ``(rows, d)`` shard file (read from the headers only)."""
    out = []
    for f in files:
        arr = np.load(f, mmap_mode="r")
        if arr.ndim != 2:
            raise DataError(f"embedding shard {f} has shape {arr.shape}, expected (rows, d)")
        out.append(int(arr.shape[0]))
    return out


def gather_rows(files: Sequence[str | os.PathLike], rows: np.ndarray) -> np.ndarray:
    """The global rows ``rows`` (sorted) of the shards' concatenation, as float32."""
    counts = shard_rows(files)
    starts = np.concatenate([[0], np.cumsum(counts)])
    rows = np.asarray(rows, dtype=np.int64)
    if rows.size and (rows.min() < 0 or rows.max() >= starts[-1]):
        raise DataError(f"row {int(rows.max())} is outside the shards' {int(starts[-1])} rows")
    first = np.load(files[0], mmap_mode="r")
    out = np.empty((rows.size, first.shape[1]), dtype=np.float32)
    which = np.searchsorted(starts, rows, side="right") - 1
    for s in np.unique(which):
        sel = which == s
        out[sel] = np.load(files[int(s)], mmap_mode="r")[rows[sel] - starts[s]]
    return out


def build_ivfpq_from_shards(
    files: Sequence[str | os.PathLike],
    nlist: int = 8192,
    m: int = 64,
    nbits: int = 8,
    train_sample: int = 500_000,
    nprobe: int = 32,
    seed: int = 0,
    progress: bool = True,
    trained: Any = None,
) -> Index:
    """An IVF-PQ :class:`Index` over the rows of ``files`` (shard order = row order).

    Args:
        files: ``.npy`` shards of float32 unit vectors, each ``(rows, d)``.
        nlist, m, nbits, train_sample, nprobe, seed: as for
            :func:`chunksel.retrieval.index.build_index` (same effective settings).
        progress: a progress bar over the shards.
        trained: an already trained empty ``faiss.IndexIVFPQ`` to fill (a copy is
            filled; the training sample is then not read).

    Returns:
        the index; ``settings`` also says how many shards filled it.
    """
    from tqdm.auto import tqdm

    files = [Path(f) for f in files]
    if not files:
        raise DataError("no embedding shards to index")
    counts = shard_rows(files)
    dims = {int(np.load(f, mmap_mode="r").shape[1]) for f in files}
    if len(dims) != 1:
        raise DataError(f"embedding shards of different dimensions {sorted(dims)}")
    n, d = sum(counts), dims.pop()
    if n == 0:
        raise DataError("the embedding shards hold no rows")
    index, settings, train_rows = new_ivfpq(n, d, nlist, m, nbits, train_sample, nprobe, seed, progress)
    if trained is not None:
        if trained.ntotal or not trained.is_trained or trained.d != d:
            raise DataError("`trained` must be a trained, empty IVF-PQ index of the shards' dimension")
        index = require("faiss", "retrieval").clone_index(trained)
    else:
        index.train(gather_rows(files, train_rows if train_rows is not None else np.arange(n)))
    bar = tqdm(files, desc="indexing shards", unit="shard", disable=not show_progress(progress))
    for f, rows in zip(bar, counts, strict=True):
        arr = np.ascontiguousarray(np.load(f), dtype=np.float32)
        if arr.shape[0] != rows:  # pragma: no cover - the file changed under us
            raise DataError(f"embedding shard {f} changed while indexing")
        index.add(arr)
    return Index(index, "ivfpq", {**settings, "shards": len(files)})


def ivfpq_bytes_per_vector(m: int = 64, nbits: int = 8, id_bytes: int = 8) -> int:
    """Inverted-list bytes per indexed vector: its PQ code (``m * nbits / 8`` bytes,
    rounded up) plus its ``id_bytes``-byte id."""
    return -(-m * nbits // 8) + id_bytes


__all__ = ["build_ivfpq_from_shards", "gather_rows", "ivfpq_bytes_per_vector", "shard_rows"]
