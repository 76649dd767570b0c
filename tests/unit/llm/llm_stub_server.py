"""A loopback server speaking the OpenAI chat-completions API, backed by a real local model.

``ChatServer(backend)`` listens on 127.0.0.1 (port 0: the system picks a free one) in a
background thread. Each ``POST /v1/chat/completions`` is answered by the
:class:`~chunksel.llm.local.LocalBackend` (greedy; ``logprobs`` / ``top_logprobs`` from
its logits), unless a scripted fault is queued (:meth:`ChatServer.script`), one per
request, in order:

- ``"500"``, ``"502"``, ``"503"``, ``"400"``: that status with a JSON error body;
- ``"429:S"``: status 429 with ``Retry-After: S``;
- ``"sleep:S"``: sleep S seconds (past the client's timeout), then answer;
- ``"slow:S"``: the same, meant to be waited for (concurrency tests);
- ``"malformed"``: status 200, a body that is not JSON;
- ``"nochoices"``: status 200, valid JSON without ``choices``;
- ``"truncated"``: status 200, ``Content-Length`` of the full body, half of it sent,
  then the connection closed;
- ``"say:TEXT"``: status 200, ``TEXT`` as the content, no log-probabilities.

With ``refuse_logprobs`` set, every request asking for ``logprobs`` gets status 400 and
an error naming them, as servers without log-probability support answer.

Answers are memoised per request (messages, limits), so a retried request is answered
at once: the model's speed never races the client's timeout.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from chunksel.config import stable_json


class ChatServer:
    """See the module docstring.

    Attributes:
        requests: one dict per request received since the last reset: ``t`` (arrival,
            monotonic seconds), ``end`` (response headers sent), ``fault``, ``auth`` (the
            Authorization header) and ``body``.
    """

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.faults: deque[str] = deque()
        self.requests: list[dict[str, Any]] = []
        self.refuse_logprobs = False
        self._lock = threading.Lock()
        self._memo: dict[str, dict[str, Any]] = {}
        self._model_lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                server._handle(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """The API root, ``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def script(self, *faults: str) -> None:
        """Queue faults for the next requests (one each; then normal answers)."""
        self.faults.extend(faults)

    def reset(self) -> None:
        """Forget queued faults and the request log."""
        with self._lock:
            self.faults.clear()
            self.requests.clear()
            self.refuse_logprobs = False

    def close(self) -> None:
        """Stop serving."""
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- answering
    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """The chat-completion response to ``body`` from the model (memoised)."""
        top_n = int(body.get("top_logprobs") or 0) if body.get("logprobs") else 0
        limit = body.get("max_tokens") or body.get("max_completion_tokens")
        key = stable_json([body["messages"], limit, top_n])
        with self._model_lock:
            if key not in self._memo:
                gen = self.backend.generate(
                    [body["messages"]], int(limit or 16), top_logprobs=max(top_n, 1)
                )[0]
                positions = list(gen.top_logprobs or ())
                if gen.finish_reason == "stop":
                    positions = positions[:-1]  # the end-of-turn token is not content
                logprobs = None
                if top_n:
                    logprobs = {"content": [
                        {"token": pos[0][0], "logprob": pos[0][1],
                         "top_logprobs": [{"token": t, "logprob": lp} for t, lp in pos[:top_n]]}
                        for pos in positions  # greedy: the generated token is the top one
                    ]}
                self._memo[key] = {
                    "id": f"chatcmpl-{len(self._memo)}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model"),
                    "choices": [{
                        "index": 0,
                        "message": {"role": "assistant", "content": gen.text},
                        "finish_reason": gen.finish_reason,
                        "logprobs": logprobs,
                    }],
                    "usage": {"prompt_tokens": gen.tokens_in, "completion_tokens": gen.tokens_out,
                              "total_tokens": gen.tokens_in + gen.tokens_out},
                }
            return self._memo[key]

    def _send(self, h: BaseHTTPRequestHandler, status: int, payload: bytes,
              headers: dict[str, str] | None = None, send_bytes: int | None = None) -> None:
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(payload)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        self._leave(h)  # before the body: the client may send its next request right after
        h.wfile.write(payload if send_bytes is None else payload[:send_bytes])
        h.wfile.flush()

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        arrived = time.monotonic()
        raw = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        with self._lock:
            fault = self.faults.popleft() if self.faults else "ok"
            body = json.loads(raw) if raw else {}
            h._record = {"t": arrived, "fault": fault,  # type: ignore[attr-defined]
                         "auth": h.headers.get("Authorization"), "body": body}
            self.requests.append(h._record)  # type: ignore[attr-defined]
        try:
            if h.path != "/v1/chat/completions":
                self._send(h, 404, b'{"error": {"message": "not found"}}')
            elif self.refuse_logprobs and body.get("logprobs"):
                err = {"error": {"message": "logprobs is not supported by this model",
                                 "type": "invalid_request_error", "param": "logprobs"}}
                self._send(h, 400, json.dumps(err).encode())
            elif fault.isdigit():
                err = {"error": {"message": f"injected {fault}", "type": "server_error"}}
                self._send(h, int(fault), json.dumps(err).encode())
            elif fault.startswith("429:"):
                err = {"error": {"message": "rate limited", "type": "rate_limit"}}
                self._send(h, 429, json.dumps(err).encode(), {"Retry-After": fault[4:]})
            elif fault == "malformed":
                self._send(h, 200, b'{"id": "x", "choices": [{"message": ')
            elif fault == "nochoices":
                self._send(h, 200, b'{"id": "x", "object": "chat.completion"}')
            elif fault.startswith("say:"):
                resp = {"choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": fault[4:]}}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1}}
                self._send(h, 200, json.dumps(resp).encode())
            else:
                if fault.startswith(("sleep:", "slow:")):
                    time.sleep(float(fault.split(":", 1)[1]))
                payload = json.dumps(self.answer(body)).encode()
                if fault == "truncated":
                    self._send(h, 200, payload, send_bytes=len(payload) // 2)
                    h.close_connection = True
                else:
                    self._send(h, 200, payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout): nothing to answer
        finally:
            self._leave(h)

    def _leave(self, h: BaseHTTPRequestHandler) -> None:
        with self._lock:
            if not getattr(h, "_left", False):
                h._left = True  # type: ignore[attr-defined]
                h._record["end"] = time.monotonic()  # type: ignore[attr-defined]

    def max_overlap(self) -> int:
        """The most logged requests (since the last reset) being handled at one time."""
        with self._lock:
            spans = [(r["t"], r.get("end", float("inf"))) for r in self.requests]
        events = sorted([(t, 1) for t, _ in spans] + [(e, -1) for _, e in spans],
                        key=lambda x: (x[0], x[1]))
        most = now = 0
        for _, step in events:
            now += step
            most = max(most, now)
        return most
