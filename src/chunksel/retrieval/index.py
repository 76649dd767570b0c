"""FAISS indexes over unit-vector embeddings: exact (Flat IP) and IVF-PQ.

The paper retrieves with a FAISS IVF-PQ index of 8192 inverted lists, 64 sub-quantizers
of 8 bits each, inner-product metric, the coarse quantizer trained on a uniform sample of
up to 500,000 embeddings, and 32 lists probed per query. FAISS wants about 39 training
points per list, so for corpora smaller than ``39 * nlist`` the list count is scaled down
to the largest power of two <= ``N // 39`` (a logged warning says so); :attr:`Index.settings` holds the
settings actually used. Indexes are cached under
``cache_root()/indexes/<corpus key>/<model id>/<kind>-<settings hash>/``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.config import cache_root, config_hash, show_progress
from chunksel.errors import ConfigError, DataError, require

log = logging.getLogger(__name__)

KINDS = ("flat", "ivfpq")
#: training points FAISS wants per k-means centroid
MIN_POINTS_PER_CENTROID = 39
INDEX_FILE = "index.faiss"
#: queries per matrix product in exact (flat) search: 128 x 193k scores = 99 MB
MATMUL_BATCH = 128
SETTINGS_FILE = "settings.json"


def _faiss() -> Any:
    return require("faiss", "retrieval")


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def effective_nlist(n: int, nlist: int) -> int:
    """``nlist`` if ``n >= 39 * nlist``, else the largest power of two <= ``n // 39`` (>= 1)."""
    if n >= MIN_POINTS_PER_CENTROID * nlist:
        return nlist
    return min(nlist, _pow2_floor(max(1, n // MIN_POINTS_PER_CENTROID)))


class Index:
    """A FAISS index with its settings; rows are corpus row numbers.

    Args:
        index: a built ``faiss.Index`` (inner-product metric).
        kind: ``"flat"`` or ``"ivfpq"``.
        settings: the effective build settings (saved beside the index).
    """

    def __init__(self, index: Any, kind: str, settings: dict[str, Any]) -> None:
        self.index = index
        self.kind = kind
        self.settings = dict(settings)
        self._xb: Any = None  # torch view of a flat index's vectors (no copy)
        if kind == "ivfpq":
            index.nprobe = int(self.settings["nprobe"])

    @property
    def ntotal(self) -> int:
        """Number of indexed vectors."""
        return int(self.index.ntotal)

    @property
    def dim(self) -> int:
        return int(self.index.d)

    def search(
        self, q: np.ndarray, k: int, batch_size: int = 1024
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` rows by inner product for each query row.

        Args:
            q: ``(B, d)`` queries (a single ``(d,)`` vector is treated as ``B = 1``).
            k: results per query, ``1 <= k <= ntotal``.
            batch_size: queries per FAISS call.

        Returns:
            ``scores`` float32 ``(B, k)`` (descending) and ``rows`` int64 ``(B, k)``; an
            IVF-PQ search that finds fewer than ``k`` vectors pads with row -1 and -inf.
        """
        if not 1 <= k <= self.ntotal:
            raise ConfigError(f"K={k} must be between 1 and the corpus size {self.ntotal}")
        q = np.ascontiguousarray(np.atleast_2d(q), dtype=np.float32)
        if q.shape[1] != self.dim:
            raise DataError(f"query dimension {q.shape[1]} != index dimension {self.dim}")
        scores = np.empty((q.shape[0], k), dtype=np.float32)
        rows = np.empty((q.shape[0], k), dtype=np.int64)
        exact = self._matmul_search if self.kind == "flat" and q.shape[0] >= 8 else None
        step = min(batch_size, MATMUL_BATCH) if exact is not None else batch_size
        for i in range(0, q.shape[0], step):
            s, r = (exact or self.index.search)(q[i : i + step], k)
            scores[i : i + step] = s
            rows[i : i + step] = r
        scores[rows < 0] = -np.inf
        return scores, rows

    def _matmul_search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k as one matrix product over the flat index's own vectors.

        Same result as ``IndexFlatIP.search`` (up to float rounding), but FAISS's batched
        BLAS path measured ~15x slower than torch's matmul + topk on one CPU thread
        (benchmarks/retrieval.py), so batches of 8+ queries go through torch when it is
        installed; single queries stay on FAISS (same speed, no torch start-up).
        """
        try:
            import torch
        except ImportError:  # pragma: no cover - retrieval extra installs torch
            return self.index.search(q, k)
        if self._xb is None:
            faiss = _faiss()
            ptr = faiss.rev_swig_ptr(self.index.get_xb(), self.ntotal * self.dim)
            self._xb = torch.from_numpy(np.asarray(ptr).reshape(self.ntotal, self.dim))
        with torch.inference_mode():
            sims = torch.from_numpy(q) @ self._xb.T
            top = torch.topk(sims, k, dim=1, largest=True, sorted=True)
        return top.values.numpy().astype(np.float32), top.indices.numpy().astype(np.int64)

    def save(self, path: str | Path) -> Path:
        """Write ``index.faiss`` and ``settings.json`` into folder ``path`` (atomically)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        _faiss().write_index(self.index, str(tmp / INDEX_FILE))
        (tmp / SETTINGS_FILE).write_text(
            json.dumps({"kind": self.kind, "settings": self.settings}, indent=2)
        )
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Index:
        """Read an index written by :meth:`save`."""
        path = Path(path)
        if not (path / INDEX_FILE).is_file() or not (path / SETTINGS_FILE).is_file():
            raise DataError(f"no saved index at {path} (expected {INDEX_FILE} + {SETTINGS_FILE})")
        meta = json.loads((path / SETTINGS_FILE).read_text())
        return cls(_faiss().read_index(str(path / INDEX_FILE)), meta["kind"], meta["settings"])

    def __repr__(self) -> str:
        return f"Index(kind={self.kind!r}, ntotal={self.ntotal}, settings={self.settings})"


def build_index(
    emb: np.ndarray,
    kind: str = "flat",
    nlist: int = 8192,
    m: int = 64,
    nbits: int = 8,
    train_sample: int = 500_000,
    nprobe: int = 32,
    seed: int = 0,
    progress: bool = True,
) -> Index:
    """Build an exact or IVF-PQ inner-product index over ``emb`` (rows = corpus rows).

    Args:
        emb: ``(N, d)`` float32 unit vectors.
        kind: ``"flat"`` (``IndexFlatIP``, exact) or ``"ivfpq"`` (``IndexIVFPQ``).
        nlist: inverted lists (scaled down below ``39 * nlist`` vectors, with a message).
        m: PQ sub-quantizers (must divide ``d``).
        nbits: bits per sub-quantizer code (lowered only if ``N < 2 ** nbits``).
        train_sample: training vectors, a uniform random sample without replacement.
        nprobe: lists searched per query.
        seed: sampling and k-means seed.
        progress: show a progress bar while adding vectors.

    Returns:
        the :class:`Index`; ``index.settings`` holds the effective settings.
    """
    faiss = _faiss()
    if kind not in KINDS:
        raise ConfigError(f"unknown index kind {kind!r}; choose one of {', '.join(KINDS)}")
    emb = np.ascontiguousarray(emb, dtype=np.float32)
    if emb.ndim != 2 or emb.shape[0] == 0:
        raise DataError(f"cannot index embeddings of shape {emb.shape}: need (N > 0, d)")
    n, d = emb.shape
    if kind == "flat":
        index = faiss.IndexFlatIP(d)
        _add(index, emb, progress)
        return Index(index, "flat", {"kind": "flat", "metric": "ip", "n": n, "d": d})

    index, settings, train_rows = new_ivfpq(n, d, nlist, m, nbits, train_sample, nprobe, seed, progress)
    index.train(emb[train_rows] if train_rows is not None else emb)
    _add(index, emb, progress)
    return Index(index, "ivfpq", settings)


def new_ivfpq(
    n: int,
    d: int,
    nlist: int = 8192,
    m: int = 64,
    nbits: int = 8,
    train_sample: int = 500_000,
    nprobe: int = 32,
    seed: int = 0,
    progress: bool = True,
) -> tuple[Any, dict[str, Any], np.ndarray | None]:
    """An untrained ``IndexIVFPQ`` for ``n`` vectors of dimension ``d``, its effective
    settings and the training rows (a sorted uniform sample; ``None`` = all ``n`` rows).

    :func:`build_index` trains it on those rows and adds every vector;
    :func:`chunksel.bulk.ivfpq.build_ivfpq_from_shards` does the same from shard files.
    The arguments are those of :func:`build_index`.
    """
    faiss = _faiss()
    if d % m:
        raise ConfigError(f"IVF-PQ: m={m} sub-quantizers must divide the dimension {d}")
    if nlist < 1 or nprobe < 1 or not 1 <= nbits <= 16 or train_sample < 1:
        raise ConfigError("IVF-PQ: nlist, nprobe and train_sample must be >= 1, nbits in 1..16")
    eff_nlist = effective_nlist(n, nlist)
    eff_nbits = min(nbits, max(1, n.bit_length() - 1))
    notes = []
    if eff_nlist != nlist:
        notes.append(
            f"IVF-PQ: {n} vectors are too few for {nlist} lists ({MIN_POINTS_PER_CENTROID} "
            f"training points per list); using nlist={eff_nlist}"
        )
    if eff_nbits != nbits:
        notes.append(
            f"IVF-PQ: {n} vectors are too few for {nbits}-bit codes; using nbits={eff_nbits}"
        )
    pq_points = (1 << eff_nbits) * MIN_POINTS_PER_CENTROID
    if min(n, train_sample) < pq_points:
        notes.append(
            f"IVF-PQ: PQ codebooks of {1 << eff_nbits} centroids trained on "
            f"{min(n, train_sample)} vectors (FAISS advises {pq_points})"
        )
    for note in notes:
        log.warning(note)
    eff_nprobe = min(nprobe, eff_nlist)
    n_train = min(n, train_sample)
    rng = np.random.default_rng(seed)
    train_rows = np.sort(rng.choice(n, size=n_train, replace=False)) if n_train < n else None

    quantizer = faiss.IndexFlatIP(d)
    index = faiss.IndexIVFPQ(quantizer, d, eff_nlist, m, eff_nbits, faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = seed
    index.pq.cp.seed = seed
    # small corpora: the shortfall is reported once above, not by FAISS per sub-quantizer
    index.cp.min_points_per_centroid = min(
        index.cp.min_points_per_centroid, max(1, n_train // eff_nlist)
    )
    index.pq.cp.min_points_per_centroid = min(
        index.pq.cp.min_points_per_centroid, max(1, n_train >> eff_nbits)
    )
    # coarse k-means over 100k+ vectors takes minutes: let FAISS report its iterations
    index.cp.verbose = bool(progress and n_train >= 100_000)
    log.info(
        "training IVF-PQ (nlist=%d, m=%d, nbits=%d) on %d vectors", eff_nlist, m, eff_nbits, n_train
    )
    settings = {
        "kind": "ivfpq",
        "metric": "ip",
        "n": n,
        "d": d,
        "nlist": eff_nlist,
        "nlist_requested": nlist,
        "m": m,
        "nbits": eff_nbits,
        "nprobe": eff_nprobe,
        "train_sample": n_train,
        "seed": seed,
        "notes": notes,
    }
    return index, settings, train_rows


def _add(index: Any, emb: np.ndarray, progress: bool, block: int = 65536) -> None:
    from tqdm.auto import tqdm

    show = progress and emb.shape[0] > block
    with tqdm(total=emb.shape[0], desc="indexing", unit=" vec", disable=not show_progress(show)) as bar:
        for i in range(0, emb.shape[0], block):
            index.add(emb[i : i + block])
            bar.update(min(block, emb.shape[0] - i))


def index_dir(key: str, model_id: str, kind: str, settings: dict[str, Any]) -> Path:
    """Cache folder of an index built from (corpus key, model id, requested settings)."""
    return cache_root() / "indexes" / key / model_id / f"{kind}-{config_hash(settings)}"


def requested_settings(kind: str, **settings: Any) -> dict[str, Any]:
    """Every build setting of ``kind`` with defaults filled in: what keys a cached index
    (so ``nlist=8192`` and the default agree).

    Raises:
        ConfigError: an unknown setting.
    """
    import inspect

    params = inspect.signature(build_index).parameters
    unknown = sorted(set(settings) - set(params) | ({"emb", "kind", "progress"} & set(settings)))
    if unknown:
        raise ConfigError(f"unknown index settings: {', '.join(unknown)}")
    return {
        "kind": kind,
        **{
            name: settings.get(name, p.default)
            for name, p in params.items()
            if name not in ("emb", "kind", "progress")
        },
    }


def cached_index(
    emb: np.ndarray,
    key: str,
    model_id: str,
    kind: str = "flat",
    progress: bool = True,
    **settings: Any,
) -> Index:
    """Load the index cached for (corpus key, model id, kind + settings), else build and save it.

    A flat index is only a copy of the embeddings, so it is built in memory (under a
    second for 193k vectors) instead of being written to the cache.

    Args:
        emb: the corpus embeddings the index is built from.
        key: corpus checksum (see :func:`chunksel.retrieval.embeddings.corpus_key`).
        model_id: the encoder's model id.
        kind, settings: as for :func:`build_index`.
    """
    if kind not in KINDS:
        raise ConfigError(f"unknown index kind {kind!r}; choose one of {', '.join(KINDS)}")
    if kind == "flat":  # a copy of the embeddings: rebuilding beats reading it from disk
        return build_index(emb, kind="flat", progress=progress)
    requested = requested_settings(kind, **settings)
    folder = index_dir(key, model_id, kind, requested)
    if (folder / INDEX_FILE).is_file():
        index = Index.load(folder)
        if index.ntotal == emb.shape[0] and index.dim == emb.shape[1]:
            return index
    index = build_index(emb, kind=kind, progress=progress, **settings)
    folder.parent.mkdir(parents=True, exist_ok=True)
    index.save(folder)
    return index
