"""Continuous batching of ``/select`` (``chunksel serve --batch-wait-ms``) and the one
``select_batch`` call every route runs its requests through (:func:`select_many`)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from chunksel.pipeline.serve_gate import Gate
from chunksel.pipeline.serve_requests import Metrics


class Batcher:
    """Continuous batching of /select: requests that arrive while the workers are busy (or
    within ``wait`` seconds) are taken together, up to ``max_batch``, by the next worker
    that starts.

    At most one runner waits for a worker at a time; when it starts (in the worker
    thread) it takes everything pending, so a batch grows while the workers are busy. A
    batch that fails is retried request by request, so one bad request only fails itself.
    """

    def __init__(self, cs: Any, gate: Gate, metrics: Metrics, wait: float, max_batch: int) -> None:
        self.cs, self.gate, self.metrics = cs, gate, metrics
        self.wait, self.max_batch = wait, max_batch
        self.lock = threading.Lock()
        self.pending: list[tuple[dict[str, Any], asyncio.Future, float]] = []
        self.runner_waiting = False

    async def submit(self, item: dict[str, Any], t0: float) -> tuple[Any, float]:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        with self.lock:
            self.pending.append((item, fut, t0))
            start = not self.runner_waiting
            self.runner_waiting = True
        if start:
            asyncio.ensure_future(self._runner(loop))
        left = self.gate.s.timeout_s - (time.perf_counter() - t0)
        try:
            return await asyncio.wait_for(fut, timeout=max(0.0, left))
        except asyncio.TimeoutError:
            raise self.gate.timeout() from None

    async def _runner(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.wait > 0:
            await asyncio.sleep(self.wait)
        started = threading.Event()

        def work() -> None:
            started.set()
            self._take_and_run(loop)

        try:
            await self.gate.run(work, time.perf_counter())
        except Exception as err:  # noqa: BLE001 - busy, or a timeout
            if started.is_set():  # its batch is answered by the worker; what is pending now is not its own
                return
            with self.lock:
                batch, self.pending = self.pending, []
                self.runner_waiting = False
            for _, fut, _ in batch:
                loop.call_soon_threadsafe(_settle, fut, None, err)

    def _take_and_run(self, loop: asyncio.AbstractEventLoop) -> None:
        """In a worker thread: take the pending requests and answer each one's future."""
        started = time.perf_counter()
        with self.lock:
            batch = [b for b in self.pending[: self.max_batch] if not b[1].done()]
            self.pending = self.pending[self.max_batch:]
            more = bool(self.pending)
            self.runner_waiting = more
        if more:  # the rest go to the next runner
            loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._runner(loop)))
        if not batch:
            return
        items = [b[0] for b in batch]
        try:
            results: list[Any] = select_many(self.cs, items, min(it["deadline"] for it in items))
            errors: list[BaseException | None] = [None] * len(items)
        except Exception:  # noqa: BLE001 - find the bad request(s), each under its own deadline
            results, errors = [], []
            for it in items:
                try:
                    results.append(select_many(self.cs, [it], it["deadline"])[0])
                    errors.append(None)
                except Exception as err:  # noqa: BLE001
                    results.append(None)
                    errors.append(err)
        self.metrics.batch(len(items))
        for (_, fut, t0), res, err in zip(batch, results, errors, strict=True):
            queued = (started - t0) * 1e3
            loop.call_soon_threadsafe(_settle, fut, None if err else (res, queued), err)


def _settle(fut: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if fut.done():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)


def select_many(cs: Any, items: list[dict[str, Any]], deadline: float | None = None) -> list[Any]:
    """One ``select_batch`` over parsed requests; each result keeps its own ``k``,
    ``threshold`` and ``min_p`` (:func:`chunksel.pipeline.select_rules.restrict`)."""
    import warnings

    from chunksel.errors import UnscoredChunksWarning
    from chunksel.pipeline.select_rules import check_rule, restrict

    cal = getattr(cs, "calibrator", None)
    for it in items:
        check_rule(it["k"], it.get("threshold"), it.get("min_p"), cal, cs.name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnscoredChunksWarning)  # reported as n_scored
        res = cs.select_batch(
            [it["question"] for it in items], [it["chunks"] for it in items],
            max(len(it["chunks"]) if it["k"] == "auto" else it["k"] for it in items),
            chunk_embeddings=[it.get("chunk_embeddings") for it in items],
            question_embeddings=[it.get("question_embedding") for it in items],
            chunk_scores=[it.get("chunk_scores") for it in items],
            features=[it.get("features") for it in items],
            titles=[it.get("titles") for it in items],
            deadline=deadline,
        )
    for it, r in zip(items, res, strict=True):
        restrict(r, it["k"], it.get("threshold"), it.get("min_p"), None if cal is None else cal.auto_threshold)
    return res
