"""``chunksel serve``: a saved selector over HTTP (FastAPI + uvicorn, extra ``serve``).

Endpoints (JSON in, JSON out; every error is ``{"error": CODE, "message": TEXT, ...}``):

- ``POST /select`` ``{"question", "chunks": [str], "k"?, "threshold"?, "min_p"?,
  "chunk_embeddings"?, "question_embedding"?, "chunk_scores"?, "features"?: {"h", "r"},
  "titles"?}`` -> the :class:`~chunksel.pipeline.chunk_selector.ChunkSelection` as JSON
  (``k`` a whole number or ``"auto"``; ``k="auto"``, ``threshold`` and ``min_p`` need a
  calibrated selector and may select nothing: ``"selected": []``, ``"abstained": true``).
- ``POST /select/batch`` ``{"items": [select request, ...]}`` -> ``{"results": [...]}``
  (one pass through the encoder, the warm-up and the selector).
- ``POST /answer`` ``{"question", "chunks", "max_new_tokens"?}`` -> ``{"answer",
  "selection"}``: selects one chunk and generates from the warm-up pass's KV cache with
  the local generator (:func:`chunksel.features.kv.generate_with_reuse`). ``--no-answer``
  turns it off (404).
- ``GET /health`` -> status, the selector's description and provenance.
- ``GET /metrics`` -> request counts by endpoint and status, latencies (ms: count, mean,
  p50, p90, p99) by stage (``queue``, ``encode``, ``warmup``, ``score``, ``generate``,
  ``request``), batches run, requests in flight.

Limits (each breach is a 4xx whose body names the limit in ``"limit"``): request body
bytes (413), questions per batch, chunks per question and characters per chunk (413),
``k`` and ``max_new_tokens`` ranges (422). A malformed body is 400, a body of the wrong
shape 422, a missing or wrong ``X-API-Key`` (when a key is set) 401.

Concurrency: at most ``concurrency`` requests run at once in a thread pool; up to
``queue`` more wait. Overload degrades gracefully: a request's deadline is ``timeout_s``
after it arrived; before its body is read, the gate predicts when it would be answered
(the requests admitted ahead of it times the measured time between answers) and answers 503
``busy`` at once, with ``Retry-After``, when it would not finish in time (``admission``);
a request whose client has left is dropped before its work starts; a started one
carries its deadline into :meth:`ChunkSelector.select_batch`, which stops before the next
stage (encode, warm-up, score) once it has passed (504, ``stage`` named). ``/metrics``
counts the dropped work by reason. ``/select/batch`` is bounded by the chunks over all
its questions (``max_batch_chunks``). With ``batch_wait_ms`` > 0, ``/select`` requests
are batched continuously: those that arrive within that window, or while every worker
is busy, run as one batch (one encoder call, one batched warm-up pass, one scoring call)
as soon as a worker is free; a batch that fails is retried request by request, so one
bad request never fails its neighbours.

Both cores: ``workers`` > 1 runs that many server processes on one socket
(:mod:`chunksel.pipeline.serve_workers`), each loading the models once; ``/health``
reports the answering worker's pid and resident memory. Raw-text requests go through a
chunk-embedding cache (``embedding_cache_items`` per worker, optionally a shared SQLite
file) and the ``encoder`` engine (``onnx-int8``: MiniLM on ONNX Runtime). A selector
built with ``late=True`` also keeps the chunks' token vectors (a tenth as many in
memory, about 50 KB each; on disk in the same SQLite file's ``tok`` table).

Models load once, before the port opens. The server binds 127.0.0.1 unless told
otherwise; on SIGINT/SIGTERM uvicorn stops accepting, lets running requests finish (up to
``timeout_s``) and the worker pool is shut down.
"""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path

from chunksel.errors import require
from chunksel.pipeline.serve_app import create_app
from chunksel.pipeline.serve_boot import bind, load_for_serving, make_server
from chunksel.pipeline.serve_requests import STAGES, ApiError, Metrics, ServeSettings, public_paths


def serve(model: str | Path, settings: ServeSettings, corpus: str | None = None, generator: str | None = None) -> None:
    """``chunksel serve``: load, bind, print the address, run until SIGINT/SIGTERM."""
    import sys

    require("fastapi", "serve")
    require("uvicorn", "serve")
    settings.check()
    warn_if_exposed(settings)
    if settings.workers > 1:
        from chunksel.pipeline.serve_workers import serve_workers

        serve_workers(model, settings, corpus, generator)
        return
    cs = load_for_serving(model, settings, corpus, generator)
    sock = bind(settings.host, settings.port)
    host, port = sock.getsockname()[:2]

    def ready() -> None:  # printed once the socket accepts connections
        print(f"chunksel serve: {cs.name} selector from {model} on http://{host}:{port}"
              f"{' (X-API-Key required)' if settings.api_key else ''}", file=sys.stderr, flush=True)
        print(json.dumps({"host": host, "port": port}), flush=True)

    def stop(signum, _frame):  # uvicorn re-raises the signal once it has shut down
        print(f"chunksel serve: stopped ({signal.Signals(signum).name})", file=sys.stderr, flush=True)
        sys.exit(0)

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, stop)
    make_server(create_app(cs, settings), settings, on_ready=ready).run(sockets=[sock])


def warn_if_exposed(settings: ServeSettings) -> bool:
    """Warn (stderr) when the server listens beyond this machine without an API key."""
    import ipaddress
    import sys

    host = settings.host.strip("[]")
    try:
        local = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        local = False
    if local or settings.api_key:
        return False
    print(f"chunksel serve: warning: listening on {settings.host} without an API key: anyone who can reach "
          "this port can use the server (set --api-key, or bind 127.0.0.1)", file=sys.stderr, flush=True)
    return True


__all__ = ["STAGES", "ApiError", "Metrics", "ServeSettings", "bind", "create_app", "load_for_serving",
           "make_server", "public_paths", "serve", "warn_if_exposed"]
