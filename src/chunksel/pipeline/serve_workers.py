"""``chunksel serve --workers N``: N server processes on one port, to use every core.

The parent reserves the port and starts N worker processes (``spawn``: nothing of the
parent's threads or torch state is inherited); each loads the selector and its models
once, then listens on its own TCP_NODELAY socket bound to that port with
``SO_REUSEPORT``, so the kernel spreads new connections evenly over the workers (where
``SO_REUSEPORT`` is missing they share the parent's listening socket). The parent
prints the address once every worker accepts, with each worker's resident memory, then
waits; SIGINT/SIGTERM is passed on to the workers, which drain and exit. A worker that
dies takes the server down (exit 1) rather than serving with fewer cores unnoticed.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from chunksel.errors import ChunkselError
from chunksel.pipeline.serve_requests import ServeSettings, rss_mb


def _worker(model: str, settings: ServeSettings, corpus: str | None, generator: str | None,
            sock: socket.socket | tuple[str, int], ready: Any, index: int) -> None:
    """One worker process: one-thread inference, load once, serve on its own
    ``SO_REUSEPORT`` socket (given ``(host, port)``) or on the shared one."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from chunksel.threads import set_threads

    set_threads(1)  # torch, FAISS and the BLAS/OpenMP pools of this worker
    from chunksel.pipeline.serve_app import create_app
    from chunksel.pipeline.serve_boot import bind, load_for_serving, make_server

    try:
        cs = load_for_serving(model, settings, corpus, generator)
    except ChunkselError as err:
        ready.put({"index": index, "error": str(err)})
        return
    if isinstance(sock, tuple):  # after loading: the kernel only hands connections to a ready worker
        sock = bind(*sock, reuse_port=True)
        sock.listen(2048)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent sends SIGTERM; uvicorn handles it

    def on_ready() -> None:
        ready.put({"index": index, "pid": os.getpid(), "rss_mb": rss_mb(), "selector": cs.name})

    make_server(create_app(cs, settings), settings, on_ready=on_ready).run(sockets=[sock])


def serve_workers(model: str | Path, settings: ServeSettings, corpus: str | None = None,
                  generator: str | None = None) -> None:
    """Run ``settings.workers`` server processes on one socket until SIGINT/SIGTERM."""
    from chunksel.pipeline.serve_boot import bind

    # one listening socket per worker (SO_REUSEPORT): the kernel spreads new connections
    # evenly over the workers; where it is missing, the workers accept on one shared socket
    # and the idle one wins each connection. The parent's socket only holds the port.
    reuse = hasattr(socket, "SO_REUSEPORT")
    sock = bind(settings.host, settings.port, reuse_port=reuse)
    if not reuse:
        sock.listen(2048)
    host, port = sock.getsockname()[:2]
    where = (host, port) if reuse else sock
    ctx = mp.get_context("spawn")
    ready = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(str(model), settings, corpus, generator, where, ready, i),
                         name=f"chunksel-serve-{i}", daemon=False) for i in range(settings.workers)]
    stopping = False

    def stop(signum, _frame) -> None:
        nonlocal stopping
        stopping = True
        for p in procs:
            if p.is_alive():
                os.kill(p.pid, signal.SIGTERM)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    for p in procs:
        p.start()
    infos: list[dict[str, Any]] = []
    try:
        while len(infos) < len(procs) and not stopping:
            try:
                info = ready.get(timeout=1.0)
            except Exception:  # noqa: BLE001 - queue.Empty: check the workers are alive
                if any(not p.is_alive() for p in procs):
                    raise SystemExit(f"chunksel serve: a worker exited while loading (exit codes "
                                     f"{[p.exitcode for p in procs]})") from None
                continue
            if "error" in info:
                raise SystemExit(f"error: {info['error']}")
            infos.append(info)
        if not stopping:
            infos.sort(key=lambda i: i["index"])
            rss = ", ".join(f"pid {i['pid']} {i['rss_mb']} MiB" for i in infos)
            print(f"chunksel serve: {infos[0]['selector']} selector from {model} on http://{host}:{port}, "
                  f"{len(infos)} workers (RSS {rss}){' (X-API-Key required)' if settings.api_key else ''}",
                  file=sys.stderr, flush=True)
            print(json.dumps({"host": host, "port": port,
                              "workers": [{"pid": i["pid"], "rss_mb": i["rss_mb"]} for i in infos]}), flush=True)
        while any(p.is_alive() for p in procs):
            for p in procs:
                p.join(timeout=0.5)
                if not stopping and not p.is_alive():
                    print(f"chunksel serve: worker {p.name} exited ({p.exitcode}); stopping", file=sys.stderr,
                          flush=True)
                    stop(signal.SIGTERM, None)
                    raise SystemExit(1)
    finally:
        stop(signal.SIGTERM, None)
        for p in procs:
            p.join(timeout=settings.timeout_s + 5)
            if p.is_alive():
                p.kill()
        sock.close()
    print("chunksel serve: stopped", file=sys.stderr, flush=True)
