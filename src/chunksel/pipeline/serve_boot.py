"""What every server process does to start: load the models once, bind the TCP_NODELAY
socket, build the uvicorn server (shared by ``chunksel serve`` and its ``--workers``)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chunksel.errors import require
from chunksel.pipeline.serve_requests import ServeSettings

#: open connections (and tasks) per server process before uvicorn itself answers 503
MAX_CONNECTIONS = 4096


def load_for_serving(model: str | Path, settings: ServeSettings, corpus: str | None = None,
                     generator: str | None = None) -> Any:
    """Load the selector and every model it (and /answer) needs, once."""
    from chunksel.pipeline.chunk_selector import ChunkSelector
    from chunksel.retrieval.chunk_cache import EmbeddingCache, TokenCache

    cache = EmbeddingCache(settings.embedding_cache_items, settings.embedding_cache_path)
    # late interaction's chunk token vectors share the file (its ``tok`` table); about 50 KB
    # a chunk, so a tenth of the embedding cache's items in memory
    tokens = TokenCache(settings.embedding_cache_items // 10, settings.embedding_cache_path)
    cs = ChunkSelector.load(model, corpus=corpus, generator=generator,
                            encoder=None if settings.encoder == "torch" else settings.encoder, embedding_cache=cache,
                            token_cache=tokens)
    return cs.warm(generator=True if settings.answer else None)


def bind(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    """A listening-ready TCP socket on (host, port); port 0 picks a free one.

    The socket is created with ``IPPROTO_TCP`` and ``TCP_NODELAY``: asyncio sets
    TCP_NODELAY on an accepted connection only when its protocol is TCP, and Linux
    accepted sockets inherit the option from the listener. Without it Nagle's algorithm
    meets the client's delayed ACK and each response waits about 40 ms. ``reuse_port``
    sets ``SO_REUSEPORT`` (each ``--workers`` process listens on its own socket).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:  # several workers' listening sockets on one port: the kernel spreads connections
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    return sock


def make_server(app: Any, settings: ServeSettings, on_ready: Callable[[], None] | None = None,
                gate: Any = None) -> Any:
    """A ``uvicorn.Server`` for ``app`` (graceful shutdown waits up to ``timeout_s``);
    ``on_ready`` runs once the socket accepts connections.

    The app's admission gate (``gate``, else ``app.state.gate`` of :func:`create_app`)
    runs inside the HTTP protocol, as a request's headers complete
    (:func:`~chunksel.pipeline.serve_gate.gated_protocol`): under overload a refusal
    costs no ASGI task and no body buffering."""
    uvicorn = require("uvicorn", "serve")
    from chunksel.pipeline.serve_gate import gated_protocol

    gate = gate if gate is not None else getattr(getattr(app, "state", None), "gate", None)
    protocol = None if gate is None else gated_protocol(gate, gate.metrics)

    class _Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if on_ready is not None and not self.should_exit:
                on_ready()

    # uvicorn's limit_concurrency counts open connections too: at concurrency + queue it
    # answered every request of a worker holding many idle keep-alive connections 503
    # (uncounted by /metrics). The admission gate bounds the work; this only bounds sockets.
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", http=protocol or "auto",
                            timeout_graceful_shutdown=max(1, int(settings.timeout_s)),
                            limit_concurrency=max(MAX_CONNECTIONS, settings.concurrency + settings.queue + 16))
    return _Server(config)
