"""The chunk-embedding cache's SQLite tier shared by several server workers."""

from __future__ import annotations

import multiprocessing as mp
import threading

import numpy as np
import pytest

from chunksel.errors import ConfigError
from chunksel.retrieval.chunk_cache import EmbeddingCache


def _open_in_process(path, start, results) -> None:
    start.wait()
    try:
        EmbeddingCache(max_items=0, path=path).put_many([f"k{mp.current_process().pid}"], np.ones((1, 2), np.float32))
        results.put("ok")
    except BaseException as err:  # noqa: BLE001 - reported to the parent
        results.put(repr(err))


def test_processes_opening_one_new_file_at_once_all_get_it(tmp_path):
    ctx = mp.get_context("fork")
    for attempt in range(4):
        path = tmp_path / f"procs-{attempt}.sqlite"
        start, results = ctx.Barrier(6), ctx.Queue()
        procs = [ctx.Process(target=_open_in_process, args=(path, start, results)) for _ in range(6)]
        for p in procs:
            p.start()
        got = [results.get(timeout=60) for _ in procs]
        for p in procs:
            p.join()
        assert got == ["ok"] * 6, got


@pytest.mark.parametrize("attempt", range(3))
def test_threads_opening_one_new_file_at_once_all_get_it(tmp_path, attempt):
    path = tmp_path / f"cache-{attempt}.sqlite"
    n = 8
    start = threading.Barrier(n)
    caches: list[EmbeddingCache | None] = [None] * n
    errors: list[BaseException] = []

    def open_it(i: int) -> None:
        start.wait()
        try:
            caches[i] = EmbeddingCache(max_items=0, path=path)
        except BaseException as err:  # noqa: BLE001 - collected for the assertion
            errors.append(err)

    threads = [threading.Thread(target=open_it, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    vec = np.arange(4, dtype=np.float32)
    caches[0].put_many(["k"], vec[None])
    got = caches[-1].get_many(["k", "absent"])
    np.testing.assert_array_equal(got[0], vec)
    assert got[1] is None


def test_a_file_that_is_not_sqlite_is_a_clear_error(tmp_path):
    bad = tmp_path / "cache.sqlite"
    bad.write_bytes(b"not a database at all, just some bytes " * 40)
    with pytest.raises(ConfigError, match="not a usable SQLite file"):
        EmbeddingCache(path=bad)
