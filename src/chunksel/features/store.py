"""On-disk, resumable store of question features ``h`` and ``r``.

One store per (generator id, prompt-template hash), under
``cache_root()/features/<generator id>/<template hash>/``::

    index.json          {"generator_id", "template_hash", "dims", "shards": [
                          {"name": "00000", "ids": [...], "prompt_hashes": [...]}, ...]}
    h-00000.npy         (n_0, d_h) float32
    r-00000.npy         (n_0, d_r) float32

Each row is keyed by its question id *and* a hash of the exact prompt token ids it was
computed from (:func:`chunksel.llm.prompts.prompt_hash`); the folder is keyed by the
generator and the template hash (which includes the feature definition's version). So a
question whose text (or truncation) changed is re-extracted, and its new row supersedes
the stale one (a later shard wins).

:meth:`FeatureStore.extract` computes only the questions the index lacks or holds stale,
in groups of ``shard_size`` (default 128, a few seconds of work); each group's arrays are
written first, then ``index.json`` is replaced atomically, so an interrupted run loses at
most the group in flight and a finished one is never recomputed. :meth:`lookup`
satisfies :class:`chunksel.selectors.base.QuestionFeatures`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.config import cache_root, show_progress
from chunksel.errors import DataError
from chunksel.types import Question

ARRAYS = ("h", "r")


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "generator"


def _atomic_save(path: Path, arr: np.ndarray) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        np.save(fh, arr)
    os.replace(tmp, path)


class FeatureStore:
    """Question features of one generator and prompt template, on disk.

    Args:
        root: the store's folder (see :meth:`for_generator` for the cache layout).
    """

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._index_path = self.root / "index.json"
        self._meta: dict[str, Any] = {"shards": [], "dims": {}}
        if self._index_path.is_file():
            self._meta = json.loads(self._index_path.read_text())
        self._rows: dict[str, tuple[int, int]] = {}
        self._hashes: dict[str, str | None] = {}
        for s, shard in enumerate(self._meta["shards"]):
            hashes = shard.get("prompt_hashes") or [None] * len(shard["ids"])
            for i, (qid, ph) in enumerate(zip(shard["ids"], hashes, strict=True)):
                self._rows[qid] = (s, i)  # a later shard supersedes an earlier row
                self._hashes[qid] = ph
        self._arrays: dict[tuple[int, str], np.ndarray] = {}

    # ----------------------------------------------------------------- locating
    @classmethod
    def for_generator(
        cls, generator_id: str, template_hash: str, cache: str | os.PathLike | None = None
    ) -> FeatureStore:
        """The store at ``<cache>/features/<generator_id>/<template_hash>/``."""
        root = cache_root(cache) / "features" / _safe(generator_id) / _safe(template_hash)
        store = cls(root)
        store._meta.setdefault("generator_id", generator_id)
        store._meta.setdefault("template_hash", template_hash)
        return store

    @classmethod
    def open(cls, generator_id: str, tokenizer: Any, cache: str | os.PathLike | None = None,
             max_tokens: int | None = None) -> FeatureStore:
        """The store of ``generator_id`` with ``tokenizer``'s chat-template hash."""
        from chunksel.llm.prompts import MAX_PROMPT_TOKENS, template_hash

        return cls.for_generator(
            generator_id, template_hash(tokenizer, max_tokens or MAX_PROMPT_TOKENS), cache
        )

    # ------------------------------------------------------------------ reading
    @property
    def ids(self) -> list[str]:
        """Stored question ids (each once), in the order they were first stored."""
        return list(self._rows)

    @property
    def dims(self) -> dict[str, int]:
        """``{"h": d_h, "r": d_r}`` (empty before the first write)."""
        return dict(self._meta.get("dims", {}))

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, qid: object) -> bool:
        return qid in self._rows

    def missing(self, ids: Sequence[str]) -> list[str]:
        """The ids of ``ids`` not yet stored (first occurrence order, no duplicates)."""
        seen: set[str] = set()
        out = []
        for q in ids:
            if q not in self._rows and q not in seen:
                seen.add(q)
                out.append(q)
        return out

    def _array(self, s: int, name: str) -> np.ndarray:
        key = (s, name)
        if key not in self._arrays:
            file = self.root / f"{name}-{self._meta['shards'][s]['name']}.npy"
            if not file.is_file():
                raise DataError(f"feature shard {file} is missing: delete {self.root} and re-run")
            self._arrays[key] = np.load(file, mmap_mode="r")
        return self._arrays[key]

    def lookup(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """``{"h": (B, d_h), "r": (B, d_r)}`` float32 rows in the order of ``ids``.

        Raises:
            DataError: an id has no stored features.
        """
        miss = [q for q in ids if q not in self._rows]
        if miss:
            raise DataError(
                f"no generator features for {len(miss)} question(s), e.g. {miss[0]!r}: "
                "run `chunksel features`"
            )
        loc = np.array([self._rows[q] for q in ids], dtype=np.int64).reshape(-1, 2)
        out = {}
        for name in ARRAYS:
            arr = np.empty((len(ids), self.dims.get(name, 0)), dtype=np.float32)
            for s in np.unique(loc[:, 0]):
                sel = loc[:, 0] == s
                arr[sel] = self._array(int(s), name)[loc[sel, 1]]
            out[name] = arr
        return out

    def prompt_hash_of(self, qid: str) -> str | None:
        """The prompt hash the stored row of ``qid`` was computed from (None: unknown)."""
        return self._hashes.get(qid)

    # ------------------------------------------------------------------ writing
    def add(
        self, ids: Sequence[str], h: np.ndarray, r: np.ndarray, prompt_hashes: Sequence[str] | None = None
    ) -> None:
        """Append one shard and commit the index atomically.

        Without ``prompt_hashes`` only new ids are stored; with them, an id stored from
        another prompt (a stale row) is stored again and the new row supersedes it.
        """
        ids = list(ids)
        if len(set(ids)) != len(ids):
            raise DataError("duplicate question ids in one feature shard")
        if h.shape[0] != len(ids) or r.shape[0] != len(ids):
            raise DataError(f"{len(ids)} ids but h has {h.shape[0]} rows and r {r.shape[0]}")
        if prompt_hashes is not None and len(prompt_hashes) != len(ids):
            raise DataError(f"{len(ids)} ids but {len(prompt_hashes)} prompt hashes")
        dims = {"h": int(h.shape[1]), "r": int(r.shape[1])}
        if self.dims and self.dims != dims:
            raise DataError(f"feature dims {dims} differ from the store's {self.dims} ({self.root})")
        hashes = list(prompt_hashes) if prompt_hashes is not None else [None] * len(ids)
        keep = [
            i for i, q in enumerate(ids)
            if q not in self._rows or (hashes[i] is not None and hashes[i] != self._hashes.get(q))
        ]
        if not keep:
            return
        name = f"{len(self._meta['shards']):05d}"
        _atomic_save(self.root / f"h-{name}.npy", np.ascontiguousarray(h[keep], dtype=np.float32))
        _atomic_save(self.root / f"r-{name}.npy", np.ascontiguousarray(r[keep], dtype=np.float32))
        meta = dict(self._meta)
        meta["dims"] = dims
        meta["shards"] = self._meta["shards"] + [
            {"name": name, "ids": [ids[i] for i in keep], "prompt_hashes": [hashes[i] for i in keep]}
        ]
        tmp = self._index_path.with_name("index.json.tmp")
        tmp.write_text(json.dumps(meta))
        os.replace(tmp, self._index_path)
        self._meta = meta
        s = len(meta["shards"]) - 1
        for row, i in enumerate(keep):
            self._rows[ids[i]] = (s, row)
            self._hashes[ids[i]] = hashes[i]

    def register(self, name: str, ids: Sequence[str], prompt_hashes: Sequence[str] | None = None) -> None:
        """Add a shard whose ``h-<name>.npy`` and ``r-<name>.npy`` files were already
        written into the store's folder (by a bulk worker), then commit the index
        atomically. Registering a name twice is a no-op.

        Raises:
            DataError: a file is missing, its row count differs from ``ids``, or its
                dimensions differ from the store's.
        """
        if any(sh["name"] == name for sh in self._meta["shards"]):
            return
        ids = list(ids)
        if len(set(ids)) != len(ids):
            raise DataError("duplicate question ids in one feature shard")
        dims = {}
        for arr in ARRAYS:
            file = self.root / f"{arr}-{name}.npy"
            if not file.is_file():
                raise DataError(f"feature shard {file} is missing")
            shape = np.load(file, mmap_mode="r").shape
            if len(shape) != 2 or shape[0] != len(ids):
                raise DataError(f"feature shard {file} has shape {shape}, expected {len(ids)} rows")
            dims[arr] = int(shape[1])
        if self.dims and self.dims != dims:
            raise DataError(f"feature dims {dims} differ from the store's {self.dims} ({self.root})")
        hashes = list(prompt_hashes) if prompt_hashes is not None else [None] * len(ids)
        if len(hashes) != len(ids):
            raise DataError(f"{len(ids)} ids but {len(hashes)} prompt hashes")
        meta = dict(self._meta)
        meta["dims"] = dims
        meta["shards"] = self._meta["shards"] + [{"name": name, "ids": ids, "prompt_hashes": hashes}]
        tmp = self._index_path.with_name("index.json.tmp")
        tmp.write_text(json.dumps(meta))
        os.replace(tmp, self._index_path)
        self._meta = meta
        s = len(meta["shards"]) - 1
        for row, (qid, ph) in enumerate(zip(ids, hashes, strict=True)):
            self._rows[qid] = (s, row)
            self._hashes[qid] = ph

    def extract(
        self,
        questions: Sequence[Question],
        model: Any,
        tokenizer: Any,
        batch_size: int = 32,
        shard_size: int = 128,
        progress: bool = True,
        adapter: Any = None,
        max_tokens: int | None = None,
    ) -> int:
        """Compute and store the features of the questions not yet stored, or stored from
        another prompt than the one their text gives now (stale rows are replaced).

        Args:
            questions: questions (the first of several with one id counts).
            model, tokenizer: the generator this store belongs to.
            batch_size: prompts per forward pass.
            shard_size: questions per shard (the unit lost if interrupted).
            progress: show a tqdm bar.
            adapter: the expert adapter (default: detected from ``model``).
            max_tokens: prompt length limit (default 512).

        Returns:
            The number of questions computed now (0 when everything was stored).
        """
        from tqdm.auto import tqdm

        from chunksel.features.adapters import make_adapter
        from chunksel.features.extract import extract_features
        from chunksel.llm.prompts import MAX_PROMPT_TOKENS, prompt_hash, question_prompt

        limit = max_tokens or MAX_PROMPT_TOKENS
        by_id: dict[str, Question] = {}
        for q in questions:
            by_id.setdefault(q.id, q)

        def hash_of(qid: str) -> str:
            return prompt_hash(question_prompt(tokenizer, by_id[qid].text, limit).ids)

        todo = [q for q in by_id if q not in self._rows or self._hashes.get(q) != hash_of(q)]
        if not todo:
            return 0
        adapter = adapter or make_adapter(model)
        bar = tqdm(total=len(todo), desc="generator features", unit="q", disable=not show_progress(progress))
        for start in range(0, len(todo), shard_size):
            group = todo[start:start + shard_size]
            feats = extract_features(
                model, tokenizer, [by_id[q] for q in group], batch_size=batch_size,
                progress=False, adapter=adapter, max_tokens=limit,
            )
            self.add(group, feats["h"], feats["r"], [hash_of(q) for q in group])
            bar.update(len(group))
        bar.close()
        return len(todo)
