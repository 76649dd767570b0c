"""Corpus embeddings: the shipped precomputed MiniLM file, or a resumable on-disk cache.

For the benchmark corpora (``wiki-w100``, ``msmarco-sub``) the data root ships the corpus
embedded with all-MiniLM-L6-v2 as per-dimension 8-bit codes; :func:`decode_precomputed`
turns them back into float32 unit vectors. Before they are used, a sample of passages is
re-encoded with the caller's encoder and compared (cosine >= 0.999), so the stored vectors
are known to come from the same model and the same passage text; the verdict is cached.

Any other corpus (or ``use_precomputed=False``) is encoded with the encoder into shards
under ``cache_root()/embeddings/<model_id>/<corpus key>/``. Each shard is written
atomically, so an interrupted run resumes from the last complete shard.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from chunksel.config import cache_root, data_root, file_checksum, show_progress
from chunksel.data.corpus import PRECOMPUTED, Corpus
from chunksel.data.files import atomic_write_text
from chunksel.errors import DataError
from chunksel.retrieval.encoder import Encoder

#: minimum cosine between a stored and a re-encoded passage embedding
MIN_COSINE = 0.999
#: passages re-encoded to check a precomputed file
N_CHECK = 8
#: rows per cache shard
SHARD_ROWS = 4096


def decode_precomputed(npz_path: str | Path) -> np.ndarray:
    """Decode a ``*.i8.npz`` file of per-dimension 8-bit codes into unit vectors.

    ``x = (codes + 128) * step + lo`` per dimension, then ``x / ||x||_2`` per row
    (the layout described in the data root's ``corpus/EMBEDDINGS.md``).

    Returns:
        float32 array ``(N, d)`` with L2-normalised rows.
    """
    path = Path(npz_path)
    if not path.is_file():
        raise DataError(f"precomputed embeddings {str(path)!r} not found")
    with np.load(path) as z:
        missing = {"codes", "lo", "step"} - set(z.files)
        if missing:
            raise DataError(f"{path}: missing arrays {', '.join(sorted(missing))}")
        codes, lo, step = z["codes"], z["lo"], z["step"]
    if codes.ndim != 2 or lo.shape != (codes.shape[1],) or step.shape != (codes.shape[1],):
        raise DataError(
            f"{path}: codes {codes.shape}, lo {lo.shape}, step {step.shape} do not fit together"
        )
    out = np.empty(codes.shape, dtype=np.float32)
    chunk = 65536  # decode in blocks to keep the float temporaries small
    for i in range(0, codes.shape[0], chunk):
        x = (codes[i : i + chunk].astype(np.float32) + 128.0) * step + lo
        norm = np.linalg.norm(x, axis=1, keepdims=True)
        if not np.all(norm > 0):
            raise DataError(f"{path}: a decoded row has zero norm")
        out[i : i + chunk] = x / norm
    return out


def corpus_key(corpus: Corpus) -> str:
    """The corpus's file checksum, else a sha256 of its ids, titles and texts."""
    if corpus.checksum:
        return corpus.checksum
    h = hashlib.sha256()
    for pid, title, text in zip(corpus.ids, corpus.titles, corpus.texts, strict=True):
        h.update(pid.encode() + b"\t" + title.encode() + b"\t" + text.encode() + b"\n")
    return "c" + h.hexdigest()[:15]


def embeddings_dir(corpus: Corpus, encoder: Encoder) -> Path:
    """Cache folder of a corpus's embeddings under one encoder (its engine's ``cache_id``
    when it has one: ONNX vectors never mix with sentence-transformers' shards)."""
    return cache_root() / "embeddings" / (getattr(encoder, "cache_id", None) or encoder.model_id) / corpus_key(corpus)


def precomputed_file(corpus: Corpus, root: str | Path | None = None) -> Path | None:
    """The shipped embedding file of a named benchmark corpus, or None."""
    if corpus.name not in PRECOMPUTED:
        return None
    path = data_root(root) / PRECOMPUTED[corpus.name]
    return path if path.is_file() else None


def _check_shape(emb: np.ndarray, corpus: Corpus, encoder: Encoder, source: str, hint: str) -> None:
    """Row count must match the corpus and width the encoder; ``hint`` says what to do."""
    if emb.shape[0] != len(corpus):
        raise DataError(
            f"{source} have {emb.shape[0]} rows but corpus {corpus.name!r} has {len(corpus)} "
            f"passages ({hint or 'a different corpus file?'})"
        )
    if emb.shape[1] != encoder.dim:
        raise DataError(
            f"{source} have dimension {emb.shape[1]} but encoder {encoder.model_id} gives "
            f"{encoder.dim}" + (f" ({hint})" if hint else "")
        )


def check_precomputed(
    corpus: Corpus,
    emb: np.ndarray,
    encoder: Encoder,
    source: str = "precomputed embeddings",
    n_check: int = N_CHECK,
    seed: int = 0,
) -> float:
    """Re-encode ``n_check`` random passages and compare with their stored rows.

    Raises:
        DataError: row count or dimension differs, or a cosine falls below 0.999.

    Returns:
        the smallest cosine found.
    """
    _check_shape(emb, corpus, encoder, source, "")
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(len(corpus), size=min(n_check, len(corpus)), replace=False))
    fresh = encoder.encode([corpus.encoder_input(int(r)) for r in rows], progress=False)
    cos = np.sum(fresh * emb[rows], axis=1)
    worst = int(np.argmin(cos))
    if cos[worst] < MIN_COSINE:
        raise DataError(
            f"{source} do not match corpus {corpus.name!r} under encoder {encoder.model_id}: "
            f"passage {corpus.ids[rows[worst]]!r} (row {rows[worst]}) has cosine "
            f"{cos[worst]:.4f} < {MIN_COSINE} to its re-encoding"
        )
    return float(cos[worst])


def corpus_embeddings(
    corpus: Corpus,
    encoder: Encoder,
    root: str | Path | None = None,
    progress: bool = True,
    use_precomputed: bool = True,
    shard_rows: int = SHARD_ROWS,
    on_shard: Callable[[int, int], None] | None = None,
) -> np.ndarray:
    """The ``(N, d)`` float32 unit-vector embeddings of every corpus passage, in row order.

    Args:
        corpus: the passages.
        encoder: the retriever encoder (its ``model_id`` keys the cache).
        root: data root (for the precomputed file of a named corpus).
        progress: show progress bars.
        use_precomputed: use the shipped file for a named corpus (checked, see module doc).
        shard_rows: rows per cache shard when encoding.
        on_shard: called as ``on_shard(shard_index, n_shards)`` after each shard is saved.

    Raises:
        DataError: the precomputed file does not match the corpus or the encoder, or a
            cached shard has the wrong shape.
    """
    if len(corpus) == 0:
        raise DataError(f"corpus {corpus.name!r} is empty")
    pre = precomputed_file(corpus, root) if use_precomputed else None
    if pre is not None:
        return _checked_precomputed(corpus, encoder, pre)
    return _encode_sharded(corpus, encoder, progress, shard_rows, on_shard)


def _checked_precomputed(corpus: Corpus, encoder: Encoder, path: Path) -> np.ndarray:
    emb = decode_precomputed(path)
    source = f"precomputed embeddings {path.name}"
    _check_shape(emb, corpus, encoder, source, "pass use_precomputed=False to encode instead")
    verdict_file = embeddings_dir(corpus, encoder) / "precomputed_check.json"
    key = {"file": path.name, "file_checksum": file_checksum(path), "n_check": N_CHECK}
    if verdict_file.is_file():
        try:
            cached = json.loads(verdict_file.read_text())
        except json.JSONDecodeError:
            cached = {}
        if cached.get("key") == key and cached.get("min_cosine", 0.0) >= MIN_COSINE:
            return emb
    worst = check_precomputed(corpus, emb, encoder, source=source)
    verdict_file.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(verdict_file, json.dumps({"key": key, "min_cosine": worst}, indent=2))
    return emb


def _encode_sharded(
    corpus: Corpus,
    encoder: Encoder,
    progress: bool,
    shard_rows: int,
    on_shard: Callable[[int, int], None] | None,
) -> np.ndarray:
    from tqdm.auto import tqdm

    if shard_rows < 1:
        raise DataError(f"shard_rows must be >= 1, got {shard_rows}")
    folder = embeddings_dir(corpus, encoder)
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"n_rows": len(corpus), "shard_rows": shard_rows, "model_id": encoder.model_id}
    meta_file = folder / "meta.json"
    if meta_file.is_file():
        old = json.loads(meta_file.read_text())
        if old.get("n_rows") != len(corpus) or old.get("shard_rows") != shard_rows:
            for stale in folder.glob("shard_*.npy"):  # another layout: start over
                stale.unlink()
    atomic_write_text(meta_file, json.dumps(meta, indent=2))

    dim = encoder.dim
    n_shards = -(-len(corpus) // shard_rows)
    out = np.empty((len(corpus), dim), dtype=np.float32)
    todo = []
    for s in range(n_shards):
        lo, hi = s * shard_rows, min(len(corpus), (s + 1) * shard_rows)
        file = folder / f"shard_{s:05d}.npy"
        if file.is_file():
            arr = np.load(file)
            if arr.shape != (hi - lo, dim):
                raise DataError(
                    f"cached embedding shard {file} has shape {arr.shape}, expected "
                    f"{(hi - lo, dim)} (dimension mismatch with encoder {encoder.model_id}?)"
                )
            out[lo:hi] = arr
        else:
            todo.append(s)
    bar = tqdm(
        total=sum(min(len(corpus), (s + 1) * shard_rows) - s * shard_rows for s in todo),
        desc=f"encoding {corpus.name}",
        unit=" psg",
        disable=not show_progress(progress) or not todo,
    )
    with bar:
        for s in todo:
            lo, hi = s * shard_rows, min(len(corpus), (s + 1) * shard_rows)
            emb = encoder.encode([corpus.encoder_input(r) for r in range(lo, hi)], progress=False)
            file = folder / f"shard_{s:05d}.npy"
            tmp = folder / f"shard_{s:05d}.tmp.npy"
            np.save(tmp, emb)
            os.replace(tmp, file)
            out[lo:hi] = emb
            bar.update(hi - lo)
            if on_shard is not None:
                on_shard(s, n_shards)
    return out
