"""What a selector costs: trainable parameters, saved size, per-query latency.

- ``params``: trainable parameters the selection module adds (the paper's Table 1
  "Params" column): for torch modules, the elements of parameters with
  ``requires_grad``; see :func:`trainable_parameters`.
- ``size_bytes``: bytes of the directory :meth:`Selector.save` writes
  (:func:`dir_size_bytes`).
- ``p50_ms`` / ``p95_ms``: per-query latency at batch 1 on one thread
  (:func:`measure_latency`), median and 95th percentile over every timed call.
- ``text_p50_ms`` / ``text_p95_ms`` (optional): the same for a second query path, the
  one from raw text (the study's cost stage, :mod:`chunksel.study.cost`, says which
  paths both time).
- ``query_cost``: the query-side feature cost — ``"none"``, ``"bm25"`` (corpus term
  statistics), ``"warmup"`` (the generator's question-only pass, which generation
  needs anyway), ``"tokens"`` (MiniLM token vectors of the question and the chunks, for
  late interaction: the question's come from the retriever's own pass, the chunks' are
  stored once), their sums (``"bm25+tokens"``), ``"crossencoder"`` or ``"llm"``.

Timing belongs in benchmarks/ scripts and the evaluation harness; unit tests never
assert on it.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from chunksel.errors import ConfigError, DataError
from chunksel.threads import limit_threads

QUERY_COSTS: tuple[str, ...] = ("none", "bm25", "warmup", "warmup+bm25", "crossencoder", "llm",
                                "tokens", "bm25+tokens", "warmup+bm25+tokens")


class Latency(NamedTuple):
    """Per-call latency percentiles in milliseconds (unpacks as ``p50, p95``)."""

    p50_ms: float
    p95_ms: float


@dataclass
class Cost:
    """The cost figures of one selector (a row of Table 1's cost columns)."""

    params: int
    size_bytes: int
    p50_ms: float
    p95_ms: float
    query_cost: str = "none"
    text_p50_ms: float | None = None
    text_p95_ms: float | None = None

    def __post_init__(self) -> None:
        if self.query_cost not in QUERY_COSTS:
            raise ConfigError(
                f"unknown query cost {self.query_cost!r}; expected one of {', '.join(QUERY_COSTS)}"
            )

    def to_dict(self) -> dict[str, Any]:
        """The figures; the text-path ones only when measured."""
        return {k: v for k, v in asdict(self).items() if v is not None or not k.startswith("text_")}


def measure_latency(
    fn: Callable[[Any], Any],
    inputs: Sequence[Any],
    repeats: int = 5,
    warmup: int = 3,
) -> Latency:
    """Time ``fn(x)`` for each ``x`` in ``inputs``, ``repeats`` passes, after ``warmup``
    untimed calls; return the p50 and p95 of the per-call wall times (ms).

    Batch 1 means each ``x`` is one query (e.g. a one-instance list). For one-thread
    figures, run it inside :func:`limit_threads` (as :func:`selector_cost` does).

    Args:
        fn: the call to time (its result is discarded).
        inputs: the per-call arguments; cycled through for the warm-up calls.
        repeats: timed passes over ``inputs``.
        warmup: untimed calls before timing (JIT, caches, lazy init).
    """
    inputs = list(inputs)
    if not inputs:
        raise DataError("measure_latency needs at least one input")
    if repeats < 1 or warmup < 0:
        raise ConfigError(f"repeats must be >= 1 and warmup >= 0, got {repeats} and {warmup}")
    for i in range(warmup):
        fn(inputs[i % len(inputs)])
    times = np.empty(repeats * len(inputs))
    t = 0
    for _ in range(repeats):
        for x in inputs:
            start = time.perf_counter_ns()
            fn(x)
            times[t] = (time.perf_counter_ns() - start) / 1e6
            t += 1
    p50, p95 = np.percentile(times, [50, 95])
    return Latency(float(p50), float(p95))


def dir_size_bytes(path: str | os.PathLike) -> int:
    """Total bytes of the regular files under ``path`` (or of ``path`` if a file);
    symbolic links are not followed."""
    p = Path(path)
    if p.is_file():
        return p.stat().st_size
    if not p.is_dir():
        raise DataError(f"{p} does not exist")
    total = 0
    for root, _dirs, files in os.walk(p):
        for name in files:
            f = Path(root) / name
            if not f.is_symlink():
                total += f.stat().st_size
    return total


def _torch_params(obj: Any) -> int | None:
    params = getattr(obj, "parameters", None)
    if not callable(params) or not hasattr(obj, "state_dict"):
        return None
    return int(sum(p.numel() for p in params() if getattr(p, "requires_grad", False)))


def trainable_parameters(obj: Any) -> int:
    """Trainable parameters of a model or selector.

    Resolution order: ``obj.n_parameters()`` (or an int attribute of that name) when the
    selector defines it; a torch ``nn.Module`` (sum of ``numel`` over parameters with
    ``requires_grad``); else the sum over the selector's learned attributes (names
    ending in ``_``) that are torch modules. Selectors without neural modules (retrieval,
    BM25, RankSVM, LambdaMART) give 0, printed as "–" in the report.
    """
    n = getattr(obj, "n_parameters", None)
    if n is not None:
        return int(n() if callable(n) else n)
    direct = _torch_params(obj)
    if direct is not None:
        return direct
    total = 0
    for name, value in vars(obj).items() if hasattr(obj, "__dict__") else ():
        if name.endswith("_") and not name.startswith("__"):
            found = _torch_params(value)
            if found is not None:
                total += found
    return total


def selector_cost(
    selector: Any,
    instances: Iterable[Any],
    features: Any = None,
    repeats: int = 3,
    warmup: int = 3,
    save_dir: str | os.PathLike | None = None,
    threads: int | None = 1,
    text_path: Callable[[Any], Any] | None = None,
    text_inputs: Iterable[Any] | None = None,
    text_repeats: int = 1,
) -> Cost:
    """Measure a fitted selector: parameters, saved size and batch-1 scoring latency.

    Saves the selector into ``save_dir`` (a temporary directory by default) to size it,
    and times ``selector.score([inst], features)`` for each instance, within
    :func:`limit_threads` (``threads``; ``None`` leaves the thread pools alone). With
    ``text_path``, also times ``text_path(x)`` for each ``x`` in ``text_inputs``
    (``text_repeats`` passes after ``warmup`` calls) into ``text_p50_ms`` /
    ``text_p95_ms``. What a call computes afresh and what it may reuse is the caller's:
    the study's cost stage runs it with every in-process memo off.
    """
    batch = [[inst] for inst in instances]
    if not batch:
        raise DataError("selector_cost needs at least one instance to time")
    if save_dir is None:
        with tempfile.TemporaryDirectory(prefix="chunksel-cost-") as tmp:
            selector.save(tmp)
            size = dir_size_bytes(tmp)
    else:
        selector.save(save_dir)
        size = dir_size_bytes(save_dir)
    text = None
    with limit_threads(threads) if threads is not None else ExitStack():
        lat = measure_latency(lambda b: selector.score(b, features), batch, repeats, warmup)
        if text_path is not None:
            text = measure_latency(text_path, list(text_inputs or []), text_repeats, warmup)
    return Cost(
        params=trainable_parameters(selector),
        size_bytes=size,
        p50_ms=lat.p50_ms,
        p95_ms=lat.p95_ms,
        query_cost=getattr(selector, "query_cost", "none"),
        text_p50_ms=text.p50_ms if text else None,
        text_p95_ms=text.p95_ms if text else None,
    )
