"""Running shard workers as a Ray Data pipeline.

Every bulk job is the same pipeline: a dataset with one row per pending shard
(``{"shard": i, "payload": <JSON>}``) mapped by :meth:`ray.data.Dataset.map_batches`
through an **actor pool** of ``workers`` actors; each actor is a shard-worker class
(:mod:`chunksel.bulk.workers`) that loads its model once, in its constructor, and then
computes one shard per call, writing the shard's outputs itself. The driver only
collects small per-shard summaries. Ray is imported here, lazily, so the package imports
without it.

A worker process that dies (killed, out of memory) is restarted by Ray and its shard is
retried, up to ``max_retries`` times; an exception raised by a worker ends the run with a
:class:`BulkJobError` (finished shards stay finished, a re-run does the rest).
"""

from __future__ import annotations

import functools
import json
import re
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from chunksel.config import show_progress
from chunksel.errors import ChunkselError, ConfigError, MissingExtraError

#: the optional extra that installs Ray Data
EXTRA = "ray"


class BulkJobError(ChunkselError, RuntimeError):
    """A bulk job stopped before every shard was finished (a re-run resumes it)."""


def require_ray() -> Any:
    """Import ``ray`` and ``ray.data``, or raise an error naming ``chunksel[ray]``."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as err:
        raise MissingExtraError(
            f"--ray needs Ray Data, which is not installed: pip install 'chunksel[{EXTRA}]'"
        ) from err
    return ray


def connect(address: str | None = None, num_cpus: int | None = None) -> Any:
    """Join the Ray cluster at ``address``, or start a local one; reuse a running session.

    Args:
        address: an existing cluster (``"auto"``, ``"ray://host:10001"``, ``"host:6379"``);
            ``None`` starts a local Ray instance on this machine.
        num_cpus: CPUs a local instance may use (ignored with ``address``).
    """
    ray = require_ray()
    if ray.is_initialized():
        return ray
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                              "configure_logging": False}
    if address:
        kwargs["address"] = address
    elif num_cpus is not None:
        kwargs["num_cpus"] = int(num_cpus)
    ray.init(**kwargs)
    return ray


def run_shards(
    worker_cls: type,
    worker_kwargs: dict[str, Any],
    shards: Sequence[int],
    payloads: Sequence[dict[str, Any]],
    *,
    workers: int = 2,
    cpus_per_worker: float = 1,
    max_retries: int = 3,
    address: str | None = None,
    progress: bool = True,
) -> Iterator[dict[str, Any]]:
    """Compute ``shards`` on an actor pool of ``workers`` ``worker_cls`` actors.

    Args:
        worker_cls: a shard-worker class (constructed once per actor with ``worker_kwargs``).
        worker_kwargs: its constructor arguments (JSON-ready: paths and settings).
        shards: the shard numbers to compute.
        payloads: each shard's payload (what the worker reads), same order as ``shards``.
        workers: actors in the pool (each loads the model once).
        cpus_per_worker: CPUs Ray reserves per actor (also its torch thread count).
        max_retries: restarts of a dead actor, and retries of its shard.
        address: see :func:`connect`.
        progress: Ray Data's progress bars.

    Yields:
        one summary dict per computed shard, as the pipeline produces them.

    Raises:
        BulkJobError: a worker raised (the message names the error); shards finished so
            far keep their outputs.
    """
    if workers < 1:
        raise ConfigError(f"workers must be >= 1, got {workers}")
    if len(shards) != len(payloads):
        raise ConfigError(f"{len(shards)} shards but {len(payloads)} payloads")
    if not shards:
        return
    ray = connect(address, num_cpus=None)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = show_progress(progress)
    ctx.print_on_execution_start = False
    rows = [{"shard": int(s), "payload": json.dumps(p)} for s, p in zip(shards, payloads, strict=True)]
    ds = ray.data.from_items(rows, override_num_blocks=len(rows))
    with warnings.catch_warnings():
        # bounded restarts have no named parameter yet (Ray < 2.64 takes them this way)
        warnings.filterwarnings("ignore", message=".*ray_remote_args.*deprecated")
        ds = ds.map_batches(
            worker_cls,
            fn_constructor_kwargs={**worker_kwargs, "threads": max(1, int(cpus_per_worker))},
            batch_size=1,
            batch_format="pandas",
            compute=ray.data.ActorPoolStrategy(size=min(workers, len(rows))),
            num_cpus=cpus_per_worker,
            # a dead actor is restarted and its shard retried, a bounded number of times
            ray_remote_args_fn=functools.partial(dict, max_restarts=max_retries,
                                                 max_task_retries=max_retries),
        )
    try:
        for row in ds.iter_rows():
            out = json.loads(row["summary"])
            yield out
    except Exception as err:  # Ray wraps the worker's exception in its own types
        if isinstance(err, ChunkselError):
            raise
        raise BulkJobError(
            f"the Ray job stopped: {_first_line(err)} -- finished shards "
            "are kept; re-run the same command to compute the rest"
        ) from err


def _first_line(err: BaseException) -> str:
    """The worker's own error, as ``Type: message``, out of Ray's wrappers."""
    chain: list[BaseException] = []
    todo: list[BaseException] = [err]
    while todo:  # Ray wraps the worker's error: follow .cause, __cause__ and __context__
        e = todo.pop(0)
        if any(e is c for c in chain):
            continue
        chain.append(e)
        for nxt in (getattr(e, "cause", None), e.__cause__, e.__context__):
            if isinstance(nxt, BaseException):
                todo.append(nxt)
    for e in chain:
        if isinstance(e, ChunkselError):
            return f"{type(e).__name__}: {e}"[:500]
    # else a wrapped traceback's last "SomeError: message" line names the worker's error
    for e in chain:
        hits = [
            (name, msg)
            for name, msg in re.findall(r"^([\w.]+(?:Error|Exception|Fault)): (.+)$", str(e), flags=re.M)
            if not name.startswith("ray.")
        ]
        if hits:
            return f"{hits[-1][0].rpartition('.')[2]}: {hits[-1][1]}"[:500]
    return f"{type(err).__name__}: {str(err).strip().splitlines()[-1] if str(err).strip() else ''}"[:500]


__all__ = ["EXTRA", "BulkJobError", "connect", "require_ray", "run_shards"]
