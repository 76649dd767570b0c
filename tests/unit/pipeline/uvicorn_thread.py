"""A real uvicorn server in a daemon thread, for the server tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def in_thread(server: Any, sock: Any) -> Iterator[None]:
    """Run a uvicorn ``server`` on the bound socket ``sock`` in a daemon thread until the
    block ends (it must start within 20 s, and stop within 20 s of being told to)."""
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started and time.time() < deadline:
        time.sleep(0.02)
    assert server.started
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        assert not thread.is_alive()
