"""Benchmark instances on disk: ``instances.jsonl`` plus an ``embeddings.npy`` sidecar.

The sidecar holds the candidates' L2-normalised retriever embeddings as a float32
``(N, K, d)`` array aligned with the JSONL rows (zeros at padded slots), so the chunk
embeddings E travel with the instances without bloating the JSON; a second sidecar,
``question_embeddings.npy`` ``(N, d)``, holds the questions' own retriever embeddings
(written when every question has one).

Label sources computed later by an LLM judge (``semantic``) live in sidecar files beside
the stores (:mod:`chunksel.data.label_sidecars`); :func:`load_instances` attaches them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from chunksel.errors import DataError
from chunksel.types import Instance, read_jsonl, write_jsonl

INSTANCES = "instances.jsonl"
EMBEDDINGS = "embeddings.npy"
QUESTION_EMBEDDINGS = "question_embeddings.npy"
META = "meta.json"


def embedding_array(instances: Sequence[Instance], k: int | None = None) -> np.ndarray | None:
    """Stack the candidates' embeddings into (N, K, d); None if no candidate has one."""
    dim = next((c.embedding.shape[-1] for i in instances for c in i.candidates if c.embedding is not None), None)
    if dim is None:
        return None
    k = k if k is not None else max((len(i.candidates) for i in instances), default=0)
    out = np.zeros((len(instances), k, dim), dtype=np.float32)
    for n, inst in enumerate(instances):
        for j, cand in enumerate(inst.candidates[:k]):
            if cand.embedding is None:
                raise DataError(f"instance {inst.id!r}: candidate {cand.id!r} has no embedding")
            if cand.embedding.shape[-1] != dim:
                raise DataError(
                    f"instance {inst.id!r}: embedding dimension {cand.embedding.shape[-1]} != {dim}"
                )
            out[n, j] = cand.embedding
    return out


def save_instances(path: str | Path, instances: Sequence[Instance], meta: dict | None = None) -> Path:
    """Write instances (and their embeddings) into directory ``path`` atomically."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tmp = path / (INSTANCES + ".tmp")
    write_jsonl(tmp, instances)
    emb = embedding_array(instances)
    if emb is not None:
        np.save(path / (EMBEDDINGS + ".tmp.npy"), emb)
        os.replace(path / (EMBEDDINGS + ".tmp.npy"), path / EMBEDDINGS)
    if instances and all(i.question.embedding is not None for i in instances):
        q = np.stack([np.asarray(i.question.embedding, dtype=np.float32) for i in instances])
        np.save(path / (QUESTION_EMBEDDINGS + ".tmp.npy"), q)
        os.replace(path / (QUESTION_EMBEDDINGS + ".tmp.npy"), path / QUESTION_EMBEDDINGS)
    os.replace(tmp, path / INSTANCES)
    (path / META).write_text(json.dumps(meta or {}, indent=2, default=str))
    return path


def load_instances(path: str | Path, split: str | None = None) -> list[Instance]:
    """Read instances written by :func:`save_instances`, embeddings and the judge's
    sidecar labels (:func:`chunksel.data.label_sidecars.attach_sidecar_labels`) attached."""
    path = Path(path)
    file = path / INSTANCES
    if not file.is_file():
        raise DataError(f"no instances at {path}: run `chunksel build` first")
    instances = [Instance.from_dict(d) for d in read_jsonl(file)]
    emb_file = path / EMBEDDINGS
    if emb_file.is_file():
        emb = np.load(emb_file, mmap_mode="r")
        if emb.shape[0] != len(instances):
            raise DataError(f"{emb_file}: {emb.shape[0]} rows for {len(instances)} instances")
        for n, inst in enumerate(instances):
            for j, cand in enumerate(inst.candidates[: emb.shape[1]]):
                cand.embedding = np.array(emb[n, j])
    q_file = path / QUESTION_EMBEDDINGS
    if q_file.is_file():
        q = np.load(q_file)
        if q.shape[0] != len(instances):
            raise DataError(f"{q_file}: {q.shape[0]} rows for {len(instances)} instances")
        for n, inst in enumerate(instances):
            inst.question.embedding = q[n]
    from chunksel.data.label_sidecars import attach_sidecar_labels

    attach_sidecar_labels(instances, path)
    if split is not None:
        instances = [i for i in instances if i.split == split]
    return instances


def load_meta(path: str | Path) -> dict:
    file = Path(path) / META
    return json.loads(file.read_text()) if file.is_file() else {}
