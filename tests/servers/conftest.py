"""Third-party OpenAI-compatible servers on 127.0.0.1, serving SmolLM2-135M-Instruct.

The tier runs only with ``CHUNKSEL_TEST_SERVERS=1`` (``make test-servers``); by default
every test here is skipped, so the ordinary run stays fast. Servers:

- ``transformers``: ``transformers serve`` (ships with transformers; needs its
  ``serving`` extra, ``openai`` among it) on the GGUF dequantised to a local Hugging Face
  folder (:func:`chunksel.llm.models.load_generator` makes it). The Python that runs it is
  ``$CHUNKSEL_TSERVE_PYTHON`` (default: this interpreter).
- ``llama.cpp``: ``llama_cpp.server`` from ``llama-cpp-python[server]`` on the GGUF
  itself, run by ``$CHUNKSEL_LLAMACPP_PYTHON`` (skipped when unset or not importable).

Which servers are tested: ``$CHUNKSEL_SERVERS`` (names separated by spaces or commas;
``make test-servers`` sets it from ``SERVERS``, default ``transformers``); without it,
``transformers``, and ``llama.cpp`` when ``$CHUNKSEL_LLAMACPP_PYTHON`` is set. A server that
was asked for and cannot start (its Python lacks the package, SmolLM2 is not fetched, the
process exits) FAILS its tests; one that was not asked for is skipped, with the reason.

Each server is started once per session on a free port, waited for (``/v1/models``), and
stopped at the end; its log goes to a temporary file named in any failure.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REAL_CACHE = Path(os.environ.get("CHUNKSEL_CACHE") or Path.home() / ".cache" / "chunksel").expanduser()
ENABLED = os.environ.get("CHUNKSEL_TEST_SERVERS") == "1"
KNOWN = ("transformers", "llama.cpp")


def asked_servers() -> list[str]:
    """The servers to test (``$CHUNKSEL_SERVERS``, else transformers, and llama.cpp when its
    Python is named); an unknown name fails the session at once."""
    raw = os.environ.get("CHUNKSEL_SERVERS")
    if raw is None:
        return ["transformers", *(["llama.cpp"] if os.environ.get("CHUNKSEL_LLAMACPP_PYTHON") else [])]
    names = [n for n in raw.replace(",", " ").split() if n]
    unknown = sorted(set(names) - set(KNOWN))
    if unknown:
        raise pytest.UsageError(f"CHUNKSEL_SERVERS: unknown server(s) {unknown}; known: {', '.join(KNOWN)}")
    return names


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    skip = pytest.mark.skip(reason="the servers tier runs with CHUNKSEL_TEST_SERVERS=1 (make test-servers)")
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.servers)
            if not ENABLED:
                item.add_marker(skip)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(url: str, proc: subprocess.Popen, log: Path, timeout: float = 300.0) -> None:
    import httpx

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}; log {log}:\n{log.read_text()[-2000:]}")
        try:
            if httpx.get(url + "/models", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1.0)
    raise RuntimeError(f"server not up after {timeout:.0f}s; log {log}:\n{log.read_text()[-2000:]}")


class Server:
    """A started server: ``url`` (the API root), ``model`` (the name it serves), ``name``."""

    def __init__(self, name: str, cmd: list[str], model: str, tmp: Path, same_numerics: bool = True) -> None:
        self.name, self.model = name, model
        #: whether it computes as the local backend does (torch, fp32 weights): then free
        #: text must match too; llama.cpp multiplies 8-bit activations with the Q4_1 blocks
        self.same_numerics = same_numerics
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.log = tmp / f"{name}.log"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen([*cmd[:1], *[c.replace("{port}", str(self.port)) for c in cmd[1:]]],
                                     stdout=self.log.open("w"), stderr=subprocess.STDOUT, env=env)
        try:
            _wait(self.url, self.proc, self.log)
        except Exception:
            self.stop()
            raise

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture(scope="session")
def smollm2_local():
    """``(LocalBackend, gguf path, dequantised folder)`` on one torch thread."""
    if not ENABLED:
        pytest.skip("servers tier disabled")
    import torch

    from chunksel.llm.fetch import SMOLLM2_GGUF
    from chunksel.llm.local import LocalBackend
    from chunksel.llm.models import dequantised_dir, load_generator

    gguf = REAL_CACHE / "models" / SMOLLM2_GGUF
    if not gguf.is_file():  # the servers serve it: a tier asked to run cannot without it
        pytest.fail(f"SmolLM2 not fetched ({gguf}); run `chunksel fetch-models` (make models)", pytrace=False)
    torch.set_num_threads(1)
    model, tok, gen_id = load_generator(gguf, cache=REAL_CACHE)
    return LocalBackend(model=model, tokenizer=tok, model_id=gen_id, batch_size=4), gguf, dequantised_dir(gguf, REAL_CACHE)


def _transformers_python() -> str:
    py = os.environ.get("CHUNKSEL_TSERVE_PYTHON") or sys.executable
    try:
        check = subprocess.run([py, "-c", "from transformers.utils.import_utils import is_serve_available as a; "
                                          "raise SystemExit(0 if a() else 3)"], capture_output=True)
    except OSError as err:
        pytest.fail(f"CHUNKSEL_TSERVE_PYTHON={py} cannot run: {err}", pytrace=False)
    if check.returncode != 0:
        pytest.fail(f"{py} cannot run `transformers serve`: pip install 'chunksel[servers]' "
                    "(transformers[serving]), or make test-servers, which does", pytrace=False)
    return py


def _llamacpp_python() -> str:
    py = os.environ.get("CHUNKSEL_LLAMACPP_PYTHON")
    if not py:
        pytest.fail("llama.cpp was asked for, but CHUNKSEL_LLAMACPP_PYTHON names no Python with "
                    "llama-cpp-python[server] (make test-servers SERVERS=\"transformers llama.cpp\" makes one)",
                    pytrace=False)
    try:
        failed = subprocess.run([py, "-c", "import llama_cpp.server"], capture_output=True).returncode
    except OSError as err:
        pytest.fail(f"CHUNKSEL_LLAMACPP_PYTHON={py} cannot run: {err}", pytrace=False)
    if failed:
        pytest.fail(f"{py} cannot import llama_cpp.server: pip install 'llama-cpp-python[server]'", pytrace=False)
    return py


def _transformers_serve(tmp: Path, folder: Path, py: str) -> Server:
    cmd = [py, "-c", "import sys; from transformers.cli.transformers import main; "
                     "sys.argv = ['transformers', *sys.argv[1:]]; sys.exit(main())",
           "serve", "--host", "127.0.0.1", "--port", "{port}", "--device", "cpu", str(folder)]
    return Server("transformers", cmd, str(folder), tmp)


def _llama_cpp(tmp: Path, gguf: Path, py: str) -> Server:
    cmd = [py, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", "smollm2", "--host", "127.0.0.1",
           "--port", "{port}", "--n_threads", "1", "--n_ctx", "4096", "--logits_all", "true"]
    return Server("llama.cpp", cmd, "smollm2", tmp, same_numerics=False)


@pytest.fixture(scope="session", params=list(KNOWN))
def server(request, tmp_path_factory):
    """A started server of those asked for; its Python is checked before SmolLM2 loads.
    A server asked for that cannot start fails the test (never a skip)."""
    if not ENABLED:
        pytest.skip("servers tier disabled")
    name = request.param
    if name not in asked_servers():
        pytest.skip(f"{name} not asked for (CHUNKSEL_SERVERS; make test-servers SERVERS=\"transformers llama.cpp\")")
    py = _transformers_python() if name == "transformers" else _llamacpp_python()
    _, gguf, folder = request.getfixturevalue("smollm2_local")
    tmp = tmp_path_factory.mktemp("servers")
    try:
        srv = _transformers_serve(tmp, folder, py) if name == "transformers" else _llama_cpp(tmp, gguf, py)
    except RuntimeError as err:  # exited, or not up in time (the log is in the message)
        pytest.fail(f"{name} server did not start: {err}", pytrace=False)
    yield srv
    srv.stop()
