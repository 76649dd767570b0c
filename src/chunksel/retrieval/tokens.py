"""Token vectors of the retriever's own encoder, and MaxSim over them (late interaction).

all-MiniLM-L6-v2 pools its token vectors into the sentence embedding the retriever
searches with; the token vectors themselves match a question's words against a chunk's,
ColBERT-style, with no training: MaxSim(q, c) = mean over the question's tokens of the
best cosine with any of the chunk's tokens. [CLS] and [SEP] are dropped and every token
vector is L2-normalised.

A chunk's token vectors are computed once and kept (by the bulk job,
:func:`chunksel.bulk.jobs.encode_tokens`, and by the chunk cache,
:class:`chunksel.retrieval.chunk_cache.TokenCache`) as int8 codes: a unit vector times
127, rounded, so 384 bytes a token (half of float16, a quarter of float32). MaxSim reads
a chunk through those codes on every path, so a score from stored vectors equals the one
from raw text. The question's vectors are used as computed (float16), never stored.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.errors import DataError

#: the int8 code of a unit vector's component x is round(x * CODE_SCALE)
CODE_SCALE = 127.0
#: bytes of one stored token vector (384 int8 codes)
BYTES_PER_TOKEN = 384


def check_texts(texts: Sequence[str]) -> list[str]:
    """``texts`` as a list; an empty or blank one is a :class:`DataError`."""
    texts = list(texts)
    for n, t in enumerate(texts):
        if not isinstance(t, str) or not t.strip():
            raise DataError(f"text #{n} is empty: MaxSim needs a question and chunks with words")
    return texts


def unit_tokens(t: Any) -> np.ndarray:
    """One text's token embeddings (a tensor) -> float16 unit vectors, [CLS] and [SEP] dropped."""
    x = t.detach().float().cpu().numpy()
    x = x[1:-1] if len(x) > 2 else x
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    return x.astype(np.float16)


def token_vectors(encoder: Any, texts: Sequence[str], batch_size: int | None = None) -> list[np.ndarray]:
    """Per text: its ``(tokens, dim)`` float16 unit token vectors (special tokens dropped;
    at most the encoder's ``max_seq_length`` tokens).

    Args:
        encoder: a :class:`chunksel.retrieval.encoder.Encoder`.
        texts: the texts; an empty or blank one is a :class:`DataError`.
    """
    texts = check_texts(texts)
    if not texts:
        return []
    out = encoder.model.encode(texts, output_value="token_embeddings", batch_size=batch_size or encoder.batch_size,
                               show_progress_bar=False, convert_to_numpy=False)
    encoder.n_encoded += len(texts)
    return [unit_tokens(t) for t in out]


def pack(vectors: np.ndarray) -> np.ndarray:
    """``(tokens, dim)`` unit vectors -> their int8 codes (what is stored)."""
    x = np.asarray(vectors, dtype=np.float32)
    if x.ndim != 2:
        raise DataError(f"token vectors must be a (tokens, dim) array, got shape {x.shape}")
    return np.clip(np.rint(x * CODE_SCALE), -127, 127).astype(np.int8)


def unpack(codes: np.ndarray) -> np.ndarray:
    """int8 codes -> float32 vectors (within 1/254 of the originals, per component)."""
    if np.asarray(codes).dtype != np.int8:
        raise DataError(f"stored token vectors are int8 codes, got {np.asarray(codes).dtype}")
    return np.asarray(codes, dtype=np.float32) / CODE_SCALE


def chunk_codes(encoder: Any, texts: Sequence[str], batch_size: int | None = None) -> list[np.ndarray]:
    """The stored form (int8 codes) of each chunk text's token vectors."""
    return [pack(v) for v in token_vectors(encoder, texts, batch_size)]


def maxsim(question: np.ndarray, chunk: np.ndarray) -> float:
    """Mean over the question's token vectors of the best cosine with the chunk's (a chunk
    given as int8 codes is read as :func:`unpack` reads it)."""
    return float(maxsim_many(question, [chunk])[0])


def maxsim_many(question: np.ndarray, chunks: Sequence[np.ndarray]) -> np.ndarray:
    """:func:`maxsim` of one question against each of ``chunks`` (int8 codes or floats).

    One chunk at a time, the chunk's rows against the question's transposed vectors: a
    chunk's codes are cast into one buffer that every chunk of the call reuses, and the
    scale of the codes is applied to the mean, not to every component. On NQ's Wikipedia
    passages, one thread, that is 0.20 against 0.39 ms at K = 5 and 3.67 against 6.30 ms
    at K = 100 for unpacking each chunk and multiplying the other way round; the values
    agree to within 3e-7 (``benchmarks/maxsim_speed.py``). A single product over all the
    chunks' tokens stacked was slower: its large temporary array costs page faults."""
    q = np.asarray(question)
    if q.ndim != 2 or not len(q):
        raise DataError(f"MaxSim needs a non-empty (tokens, dim) question array, got shape {q.shape}")
    dim, longest = q.shape[1], 0
    for c in chunks:
        c = np.asarray(c)
        if c.ndim != 2 or c.shape[1] != dim or not len(c):
            raise DataError(f"MaxSim needs non-empty (tokens, dim) arrays of one dim, got {q.shape} and {c.shape}")
        longest = max(longest, len(c) if c.dtype == np.int8 else 0)
    q_t = np.ascontiguousarray(q.astype(np.float32, copy=False).T)
    buf = np.empty((longest, dim), dtype=np.float32)
    out = np.empty(len(chunks), dtype=np.float64)
    for i, c in enumerate(chunks):
        c = np.asarray(c)
        if c.dtype == np.int8:
            b = buf[: len(c)]
            np.copyto(b, c, casting="unsafe")
            out[i] = float((b @ q_t).max(axis=0).mean()) / CODE_SCALE
        else:
            out[i] = float((c.astype(np.float32, copy=False) @ q_t).max(axis=0).mean())
    return out


# ------------------------------------------------------------------ the bulk job's shards
def write_shard(folder: Path, name: str, ids: Sequence[str], codes: Sequence[np.ndarray]) -> dict[str, Any]:
    """Write one shard of stored token vectors: ``tokens_<name>.codes.npy`` (all tokens,
    int8), ``.offsets.npy`` (row i is ``codes[offsets[i]:offsets[i + 1]]``) and, last,
    ``.ids.json`` (the passage ids), each through a temporary name."""
    import os

    folder.mkdir(parents=True, exist_ok=True)
    offsets = np.zeros(len(codes) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(c) for c in codes])
    flat = np.concatenate(codes) if codes else np.zeros((0, BYTES_PER_TOKEN), dtype=np.int8)
    for suffix, arr in (("codes", flat), ("offsets", offsets)):
        tmp = folder / f"tokens_{name}.{suffix}.{os.getpid()}.tmp.npy"
        np.save(tmp, arr)
        os.replace(tmp, folder / f"tokens_{name}.{suffix}.npy")
    tmp = folder / f"tokens_{name}.ids.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(list(ids)))
    os.replace(tmp, folder / f"tokens_{name}.ids.json")
    return {"rows": len(codes), "tokens": int(offsets[-1]), "bytes": int(flat.nbytes + offsets.nbytes)}


class TokenShards:
    """The stored token vectors of a folder of shards (the bulk job's output), by passage id.

    The codes are memory-mapped: opening costs the ids and offsets, not the vectors.

    Args:
        folder: the shards' folder (:func:`chunksel.bulk.jobs.tokens_dir`).

    Raises:
        DataError: no finished shard in ``folder``, or a shard's arrays disagree.
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self._where: dict[str, tuple[int, int, int]] = {}
        self._codes: list[np.ndarray] = []
        self.n_tokens = 0
        self.n_bytes = 0
        for ids_file in sorted(self.folder.glob("tokens_*.ids.json")):
            stem = ids_file.name[: -len(".ids.json")]
            codes = np.load(self.folder / f"{stem}.codes.npy", mmap_mode="r")
            offsets = np.load(self.folder / f"{stem}.offsets.npy")
            ids = json.loads(ids_file.read_text())
            if len(offsets) != len(ids) + 1 or int(offsets[-1]) != codes.shape[0]:
                raise DataError(f"token shard {stem} in {self.folder} is inconsistent: {len(ids)} ids, "
                                f"{len(offsets)} offsets, {codes.shape[0]} tokens; delete it and re-run the job")
            s = len(self._codes)
            self._codes.append(codes)
            for i, pid in enumerate(ids):
                self._where[pid] = (s, int(offsets[i]), int(offsets[i + 1]))
            self.n_tokens += codes.shape[0]
            self.n_bytes += codes.nbytes + offsets.nbytes
        if not self._codes:
            raise DataError(f"no token shards in {self.folder}: run chunksel.bulk.jobs.encode_tokens first")

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, pid: str) -> bool:
        return pid in self._where

    @property
    def bytes_per_chunk(self) -> float:
        """Stored bytes a chunk, codes and offsets, on average."""
        return self.n_bytes / max(len(self), 1)

    def get(self, ids: Sequence[str]) -> list[np.ndarray | None]:
        """Each passage's int8 codes (``None`` for an id the shards do not hold)."""
        out: list[np.ndarray | None] = []
        for pid in ids:
            at = self._where.get(pid)
            out.append(None if at is None else np.asarray(self._codes[at[0]][at[1]:at[2]]))
        return out
