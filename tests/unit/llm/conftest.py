from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[0] / "features"))
sys.path.insert(0, str(HERE))
from tiny import tiny_tokenizer  # noqa: E402

# the real cache (filled by `chunksel fetch-models`), read before the autouse fixture
# points CHUNKSEL_CACHE at a temporary folder
REAL_CACHE = Path(os.environ.get("CHUNKSEL_CACHE") or Path.home() / ".cache" / "chunksel").expanduser()


@pytest.fixture(scope="session")
def tok():
    return tiny_tokenizer()


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M-Instruct as a LocalBackend, loaded once per session.

    Skipped when the GGUF has not been fetched: nothing is downloaded at test time.
    Runs on one torch thread: on a shared 2-core machine two threads spin against the
    other processes and run ~10x slower.
    """
    from chunksel.llm.fetch import SMOLLM2_GGUF

    gguf = REAL_CACHE / "models" / SMOLLM2_GGUF
    if not gguf.is_file():
        pytest.skip(f"SmolLM2 not fetched ({gguf}); run `chunksel fetch-models`")
    import torch

    from chunksel.llm.local import LocalBackend
    from chunksel.llm.models import load_generator

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model, tokenizer, gen_id = load_generator(gguf, cache=REAL_CACHE)
    yield LocalBackend(model=model, tokenizer=tokenizer, model_id=gen_id, batch_size=4)
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def chat_server(smollm2):
    """A loopback OpenAI-compatible server backed by ``smollm2`` (see llm_stub_server)."""
    pytest.importorskip("httpx")
    from llm_stub_server import ChatServer

    server = ChatServer(smollm2)
    yield server
    server.close()


@pytest.fixture
def server(chat_server):
    """The session's chat server with no queued faults and an empty request log."""
    chat_server.reset()
    yield chat_server
    chat_server.reset()
