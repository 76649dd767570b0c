"""Shard workers: the Ray actors of the bulk jobs.

Each class is constructed once per actor (it loads its model there) and called by
Ray Data with a batch of one shard row (``shard``, JSON ``payload``). For each shard it

1. returns at once if the shard's done marker exists (a retry after the shard finished),
2. logs ``start``; abandons the shard (logs ``abandon``) if its run token is no longer the
   job's current one (a straggler of a failed run, see :mod:`chunksel.bulk.manifest`);
   computes, and -- for a fault drill, see :class:`Fault` -- may fail here (an exception
   is logged as ``fail`` and raised),
3. writes the shard's outputs atomically, then the done marker, then logs ``done``.

The outputs are exactly those of the single-process code path on the same shard: the
same functions (:meth:`Encoder.encode`, :func:`extract_features`, a backend's
``choose_many``) on the same inputs with the same batch sizes.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from chunksel.bulk.manifest import (
    current_run,
    is_done,
    load_input,
    log_event,
    mark_done,
    read_done,
    shard_name,
)
from chunksel.errors import ChunkselError
from chunksel.threads import set_threads


class InjectedFault(ChunkselError, RuntimeError):
    """The failure a fault drill asked for."""


class Fault:
    """A fault drill: make the worker fail on one shard, once.

    Given as a dict ``{"shard": 2, "mode": "raise" | "exit", "once": "/path/marker"}``:
    on shard ``shard``, after computing and before writing anything, the worker raises
    :class:`InjectedFault` (``raise``: the job stops) or ends its process at once with
    ``os._exit`` (``exit``: a killed worker, which Ray restarts). The ``once`` file is
    created first, so the drill fires only on the first attempt.
    """

    def __init__(self, spec: dict[str, Any] | None) -> None:
        self.spec = dict(spec or {})

    def maybe_fail(self, shard: int) -> None:
        if not self.spec or int(self.spec["shard"]) != shard:
            return
        once = Path(self.spec["once"])
        try:
            fd = os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY)  # fire once, atomically
        except FileExistsError:
            return
        os.close(fd)
        if self.spec.get("mode") == "exit":
            os._exit(17)
        raise InjectedFault(f"fault drill: shard {shard} failed on purpose")


def save_npy(path: Path, arr: np.ndarray) -> None:
    """``np.save`` through a process-unique temporary name and ``os.replace``."""
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npy")
    np.save(tmp, arr)
    os.replace(tmp, path)


class ShardWorker:
    """Base class: the per-shard protocol; subclasses load a model and compute.

    Args:
        job: the job folder (manifest, done markers, log).
        fault: a :class:`Fault` spec (drills and tests), or ``None``.
        threads: torch/BLAS threads of this worker.
        run: the run token of the driver that launched it (``None``: no check).
    """

    kind: ClassVar[str] = ""

    def __init__(self, job: str, fault: dict[str, Any] | None = None, threads: int = 1,
                 run: str | None = None) -> None:
        set_threads(threads)
        self.job = Path(job)
        self.run_token = run
        self.fault = Fault(fault)
        t0 = time.perf_counter()
        self.load()
        self.load_seconds = time.perf_counter() - t0
        log_event(self.job, "load", -1, seconds=self.load_seconds)

    def load(self) -> None:
        """Load the model (once per actor)."""

    def compute(self, shard: int, payload: dict[str, Any]) -> Any:
        """The shard's results (nothing written yet)."""
        raise NotImplementedError

    def write(self, shard: int, payload: dict[str, Any], results: Any) -> dict[str, Any]:
        """Write the shard's outputs atomically; return info for the done marker."""
        raise NotImplementedError

    def __call__(self, batch: Any) -> dict[str, list[str]]:
        out = []
        for shard, payload in zip(batch["shard"], batch["payload"], strict=True):
            out.append(json.dumps(self.run(int(shard), json.loads(payload))))
        return {"summary": out}

    def run(self, shard: int, payload: dict[str, Any]) -> dict[str, Any]:
        """Compute and write one shard unless it is already done."""
        if is_done(self.job, shard):
            log_event(self.job, "skip", shard)
            return {**read_done(self.job, shard), "skipped": True}
        log_event(self.job, "start", shard)
        if self.run_token is not None and current_run(self.job) != self.run_token:
            log_event(self.job, "abandon", shard)  # its run has ended: leave the shard to the next
            return {"shard": shard, "skipped": True, "abandoned": True}
        t0 = time.perf_counter()
        try:
            payload = load_input(self.job, payload)  # the shard's texts, from its input file
            results = self.compute(shard, payload)
            seconds = time.perf_counter() - t0
            self.fault.maybe_fail(shard)
            info = self.write(shard, payload, results)
        except Exception as err:  # the driver waits for shards in flight: say this one ended
            log_event(self.job, "fail", shard, error=f"{type(err).__name__}: {err}"[:300])
            raise
        info = {**info, "seconds": seconds, "pid": os.getpid(), "load_seconds": self.load_seconds}
        mark_done(self.job, shard, info)
        if "input" in payload:
            (self.job / payload["input"]).unlink(missing_ok=True)
        log_event(self.job, "done", shard, seconds=seconds, rows=info.get("rows"))
        return {"shard": shard, **info, "skipped": False}


class EncodeWorker(ShardWorker):
    """Corpus encoding: payload ``{"texts": [...]}`` -> ``<out>/shard_<s>.npy`` (float32).

    Args:
        out: the embedding cache folder (the single-process cache's shard layout).
        model_dir, device, batch_size, max_seq_length: as for :class:`Encoder`.
    """

    kind = "encode"

    def __init__(self, job: str, out: str, model_dir: str, device: str = "cpu",
                 batch_size: int = 64, max_seq_length: int = 256, **kw: Any) -> None:
        self.out = Path(out)
        self.settings = dict(model=model_dir, device=device, batch_size=batch_size,
                             max_seq_length=max_seq_length)
        super().__init__(job, **kw)

    def load(self) -> None:
        from chunksel.retrieval.encoder import Encoder

        self.encoder = Encoder(**self.settings)
        _ = self.encoder.model

    def compute(self, shard: int, payload: dict[str, Any]) -> np.ndarray:
        return self.encoder.encode(payload["texts"], progress=False)

    def write(self, shard: int, payload: dict[str, Any], results: np.ndarray) -> dict[str, Any]:
        save_npy(self.out / f"shard_{shard_name(shard)}.npy", results)
        return {"rows": int(results.shape[0])}


class TokenWorker(EncodeWorker):
    """Chunk token vectors: payload ``{"ids": [...], "texts": [...]}`` -> the shard's int8
    codes (:func:`chunksel.retrieval.tokens.write_shard`) in ``out``, named
    ``<prefix>-<shard>`` (one prefix per job, so several jobs share the folder)."""

    kind = "tokens"

    def __init__(self, job: str, out: str, prefix: str, **kw: Any) -> None:
        self.prefix = prefix
        super().__init__(job, out, **kw)

    def compute(self, shard: int, payload: dict[str, Any]) -> list[np.ndarray]:
        from chunksel.retrieval.tokens import chunk_codes

        return chunk_codes(self.encoder, payload["texts"])

    def write(self, shard: int, payload: dict[str, Any], results: list[np.ndarray]) -> dict[str, Any]:
        from chunksel.retrieval.tokens import write_shard

        return write_shard(self.out, f"{self.prefix}-{shard_name(shard)}", payload["ids"], results)


class FeatureWorker(ShardWorker):
    """Question features: payload ``{"texts": [...]}`` -> ``h-<name>.npy``, ``r-<name>.npy``
    in the feature store's folder, ``<name>`` = ``<prefix>-<shard>``.

    Args:
        store: the feature store's folder.
        prefix: the job's shard-name prefix.
        generator: a model folder or ``.gguf`` file (resolved by the driver).
        cache: the cache root holding the dequantised GGUF copy.
        batch_size, max_tokens: as for :func:`extract_features`.
    """

    kind = "features"

    def __init__(self, job: str, store: str, prefix: str, generator: str, cache: str,
                 batch_size: int = 32, max_tokens: int = 512, **kw: Any) -> None:
        self.store = Path(store)
        self.prefix = prefix
        self.generator, self.cache = generator, cache
        self.batch_size, self.max_tokens = batch_size, max_tokens
        super().__init__(job, **kw)

    def load(self) -> None:
        from chunksel.features.adapters import make_adapter
        from chunksel.llm.models import load_generator

        self.model, self.tokenizer, _ = load_generator(self.generator, cache=self.cache)
        self.adapter = make_adapter(self.model)

    def compute(self, shard: int, payload: dict[str, Any]) -> dict[str, np.ndarray]:
        from chunksel.features.extract import extract_features

        return extract_features(
            self.model, self.tokenizer, payload["texts"], batch_size=self.batch_size,
            progress=False, adapter=self.adapter, max_tokens=self.max_tokens,
        )

    def write(self, shard: int, payload: dict[str, Any], results: dict[str, np.ndarray]) -> dict[str, Any]:
        name = f"{self.prefix}-{shard_name(shard)}"
        for arr in ("h", "r"):
            save_npy(self.store / f"{arr}-{name}.npy", np.ascontiguousarray(results[arr], dtype=np.float32))
        return {"rows": len(payload["texts"]), "name": name}


class JudgeWorker(ShardWorker):
    """LLM labels: payload ``{"ids", "prompts", "hashes"}`` -> ``<job>/shard-<s>.jsonl``,
    one response-cache record per pair (``{"id", "prompt", "kind", "result"}``).

    Pairs go to ``backend.choose_many`` ``batch_size`` at a time, as
    :func:`chunksel.llm.cache.map_cached` sends them.

    Args:
        backend: backend name for :func:`chunksel.llm.backends.get_backend`.
        backend_kwargs: its arguments (``model_path``, ``batch_size``, ``cache``, ...).
        options, default: the decision's options and the unparsed fallback.
        batch_size: pairs per ``choose_many`` call.
    """

    kind = "judge"

    def __init__(self, job: str, backend: str, backend_kwargs: dict[str, Any],
                 options: list[str], default: str | None, batch_size: int = 8, **kw: Any) -> None:
        self.backend_name, self.backend_kwargs = backend, dict(backend_kwargs)
        self.options, self.default, self.batch_size = list(options), default, batch_size
        super().__init__(job, **kw)

    def load(self) -> None:
        from chunksel.llm.backends import get_backend

        self.backend = get_backend(self.backend_name, **self.backend_kwargs)
        self.model_id = self.backend.model_id  # a local backend loads its model here

    def compute(self, shard: int, payload: dict[str, Any]) -> list[Any]:
        prompts = payload["prompts"]
        out: list[Any] = []
        for start in range(0, len(prompts), self.batch_size):
            out.extend(self.backend.choose_many(prompts[start:start + self.batch_size], self.options,
                                                default=self.default))
        return out

    def write(self, shard: int, payload: dict[str, Any], results: list[Any]) -> dict[str, Any]:
        path = self.job / f"shard-{shard_name(shard)}.jsonl"
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            for item, ph, res in zip(payload["ids"], payload["hashes"], results, strict=True):
                rec = {"id": item, "prompt": ph, "kind": "choice", "result": res.to_dict()}
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
        return {"rows": len(results), "model_id": self.model_id,
                "settings": self.backend.settings(), "backend": self.backend.name}


__all__ = ["EncodeWorker", "Fault", "FeatureWorker", "InjectedFault", "JudgeWorker", "ShardWorker"]
