"""The one place that limits CPU threads: torch's intra-op pool, FAISS's OpenMP threads and
the BLAS/OpenMP pools.

:func:`set_threads` limits the whole process (``chunksel --threads``, a bulk worker);
:func:`limit_threads` limits a block and restores the previous counts (cost measurements).
Neither imports torch or FAISS unless asked to: the numpy-only install uses them too.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from chunksel.errors import ConfigError

#: environment variables read by BLAS/OpenMP runtimes (and inherited by child processes)
POOL_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def set_threads(n: int | None) -> None:
    """Limit this process (and the processes it starts) to ``n`` threads; None: no limit.

    Sets the BLAS/OpenMP environment variables and torch's and FAISS's thread counts
    (importing them when installed).

    Raises:
        ConfigError: ``n`` < 1 (0 does not mean "no limit": leave the option out).
    """
    if n is None:
        return
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"--threads must be a whole number >= 1, got {n!r} (leave it out for no limit)")
    for var in POOL_ENV:
        os.environ[var] = str(n)
    try:
        import torch

        torch.set_num_threads(n)
    except ImportError:  # pragma: no cover
        pass
    try:
        import faiss  # type: ignore[import-not-found]

        faiss.omp_set_num_threads(n)
    except ImportError:  # pragma: no cover
        pass


@contextmanager
def limit_threads(n: int = 1) -> Iterator[None]:
    """Run the block with at most ``n`` threads in this process, then restore.

    Covers BLAS/OpenMP pools (through ``threadpoolctl`` when installed — it comes with
    scikit-learn), torch's intra-op pool and FAISS's OpenMP threads, for the libraries
    already imported.

    Raises:
        ConfigError: ``n`` < 1.
    """
    if n < 1:
        raise ConfigError(f"threads must be >= 1, got {n}")
    torch = sys.modules.get("torch")
    faiss = sys.modules.get("faiss")
    prev_torch = torch.get_num_threads() if torch is not None else None
    prev_faiss = faiss.omp_get_max_threads() if faiss is not None else None
    with ExitStack() as stack:
        try:
            from threadpoolctl import threadpool_limits

            stack.enter_context(threadpool_limits(limits=n))
        except ImportError:  # pragma: no cover - optional
            pass
        if torch is not None:
            torch.set_num_threads(n)
        if faiss is not None:
            faiss.omp_set_num_threads(n)
        try:
            yield
        finally:
            if torch is not None and prev_torch is not None:
                torch.set_num_threads(prev_torch)
            if faiss is not None and prev_faiss is not None:
                faiss.omp_set_num_threads(prev_faiss)


def thread_budget() -> int:
    """The threads the current block may use: torch's intra-op count where torch is loaded
    (what :func:`set_threads` and :func:`limit_threads` set), else ``OMP_NUM_THREADS``,
    else the CPU count. Engines that take a thread count at construction (an ONNX Runtime
    session) read it, so a one-thread cost measurement gets a one-thread session."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return max(1, int(torch.get_num_threads()))
    env = os.environ.get("OMP_NUM_THREADS", "")
    return int(env) if env.isdigit() and int(env) > 0 else max(1, os.cpu_count() or 1)


__all__ = ["POOL_ENV", "limit_threads", "set_threads", "thread_budget"]
