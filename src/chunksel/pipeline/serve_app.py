"""The FastAPI app of ``chunksel serve``: its routes (see :mod:`chunksel.pipeline.server`
for the endpoints, limits and concurrency). Admission and the worker pool are in
:mod:`chunksel.pipeline.serve_gate`, continuous batching in
:mod:`chunksel.pipeline.serve_batcher`."""

from __future__ import annotations

import hmac
import json
import logging
import time
from contextlib import asynccontextmanager
from typing import Any

from chunksel.errors import ChunkselError, DeadlineExceeded, require
from chunksel.pipeline.serve_batcher import Batcher, select_many
from chunksel.pipeline.serve_gate import T0_KEY, AdmitFirst, Gate
from chunksel.pipeline.serve_requests import (
    ApiError,
    Metrics,
    ServeSettings,
    parse_select,
    public_paths,
    worker_info,
)

try:  # module level: FastAPI resolves the endpoints' (string) annotations in these globals
    from fastapi import Request
except ImportError:  # pragma: no cover - create_app names the extra to install
    Request = Any  # type: ignore[misc,assignment]

log = logging.getLogger("chunksel.serve")


def create_app(cs: Any, settings: ServeSettings | None = None) -> Any:
    """The FastAPI app serving ``cs`` (a loaded :class:`ChunkSelector`)."""
    require("fastapi", "serve")
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    s = (settings or ServeSettings()).check()
    metrics = Metrics()
    gate = Gate(s, metrics)
    batcher = Batcher(cs, gate, metrics, s.batch_wait_ms / 1e3, s.max_questions) if s.batch_wait_ms > 0 else None

    @asynccontextmanager
    async def lifespan(_app):
        yield
        gate.pool.shutdown(wait=True, cancel_futures=True)

    app = FastAPI(title="chunksel", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(AdmitFirst, gate=gate, metrics=metrics)
    app.state.metrics = metrics
    app.state.gate = gate  # the server's protocol admits on it too (serve_boot.make_server)
    app.state.settings = s

    async def body_json(request: Request) -> Any:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > s.max_request_bytes:
            raise _too_large(int(declared))
        size, parts = 0, []
        async for part in request.stream():
            size += len(part)
            if size > s.max_request_bytes:
                raise _too_large(size)
            parts.append(part)
        try:
            return json.loads(b"".join(parts))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ApiError(400, "malformed_json", f"the body is not valid JSON ({err})") from None
        except RecursionError:
            raise ApiError(422, "invalid_request", "the JSON body is nested too deeply (a select request nests "
                           "at most 4 levels)", limit="json_depth", field="body") from None

    def _too_large(n: int) -> ApiError:
        return ApiError(413, "limit_exceeded", f"the request body has {n} bytes; the limit is "
                        f"{s.max_request_bytes}", limit="max_request_bytes", max=s.max_request_bytes)

    def authorise(request: Request) -> None:
        if s.api_key is None:
            return
        got = request.headers.get("x-api-key", "")
        if not hmac.compare_digest(got.encode(), s.api_key.encode()):
            raise ApiError(401, "unauthorised", "a valid X-API-Key header is required")

    async def handle(request: Request, endpoint: str, work) -> Any:
        admitted = request.scope.get("state", {}).get(T0_KEY)  # admitted at arrival: it has a deadline
        t0 = admitted or time.perf_counter()
        status = 200
        try:
            authorise(request)
            body, timings = await work(t0)
            timings["request"] = (time.perf_counter() - t0) * 1e3
            if admitted and timings["request"] > s.timeout_s * 1e3:
                # finished, but past its deadline (a starved event loop wakes late): never a late answer
                metrics.drop("deadline_after_work")
                raise gate.timeout()
            metrics.observe(timings)
            if isinstance(body, dict) and isinstance(body.get("timings_ms"), dict):
                body["timings_ms"]["queue"] = round(timings.get("queue", 0.0), 3)
                body["timings_ms"]["request"] = round(timings["request"], 3)
            return JSONResponse(body)
        except ApiError as err:
            status = err.status
            return JSONResponse(err.body(), status_code=err.status, headers=err.headers)
        except DeadlineExceeded as err:  # the request's time ran out between two stages
            status = 504
            return JSONResponse({"error": "timeout", "message": str(err), "stage": err.stage,
                                 "limit": "timeout_s", "max": s.timeout_s}, status_code=504)
        except ChunkselError as err:  # bad input found by the selector (shapes, NaN, ...)
            status = 422
            body = {"error": "invalid_request", "message": str(err)}
            if getattr(err, "field", None):
                body["field"] = err.field
            return JSONResponse(body, status_code=422)
        except Exception:  # noqa: BLE001
            log.exception("request to %s failed", endpoint)
            status = 500
            return JSONResponse({"error": "internal", "message": "internal error (see the server log)"},
                                status_code=500)
        finally:
            metrics.count(endpoint, status)

    @app.post("/select")
    async def select(request: Request):
        async def work(t0):
            item = parse_select(await body_json(request), s)
            item["deadline"] = gate.deadline(t0)
            if batcher is not None:
                res, queued = await batcher.submit(item, t0)
            else:
                out, queued = await gate.run(lambda: select_many(cs, [item], item["deadline"]), t0, request)
                res = out[0]
            return res.to_dict(), {**res.timings, "queue": queued}

        return await handle(request, "/select", work)

    @app.post("/select/batch")
    async def select_batch(request: Request):
        async def work(t0):
            obj = await body_json(request)
            items = obj.get("items") if isinstance(obj, dict) else None
            if not isinstance(items, list) or not items:
                raise ApiError(422, "invalid_request", "'items' must be a non-empty list of select requests",
                               field="items")
            if len(items) > s.max_questions:
                raise ApiError(413, "limit_exceeded", f"{len(items)} items; the limit is {s.max_questions}",
                               limit="max_questions", max=s.max_questions)
            parsed = [parse_select(it, s, f"items[{i}]: ") for i, it in enumerate(items)]
            total = sum(len(it["chunks"]) for it in parsed)
            if total > s.max_batch_chunks:
                raise ApiError(413, "limit_exceeded", f"{total} chunks over the batch's questions; the limit is "
                               f"{s.max_batch_chunks}", limit="max_batch_chunks", max=s.max_batch_chunks)
            deadline = gate.deadline(t0)
            out, queued = await gate.run(lambda: select_many(cs, parsed, deadline), t0, request)
            metrics.batch(len(parsed))
            return {"results": [r.to_dict() for r in out]}, {**out[0].timings, "queue": queued}

        return await handle(request, "/select/batch", work)

    @app.post("/answer")
    async def answer(request: Request):
        async def work(t0):
            if not s.answer:
                raise ApiError(404, "disabled", "answer generation is turned off on this server (--no-answer)")
            obj = await body_json(request)
            item = parse_select(obj, s)
            mnt = obj.get("max_new_tokens", 32)
            if isinstance(mnt, bool) or not isinstance(mnt, int) or not 1 <= mnt <= s.max_new_tokens:
                raise ApiError(422, "invalid_request", f"'max_new_tokens' must be a whole number in "
                               f"[1, {s.max_new_tokens}]", limit="max_new_tokens", max=s.max_new_tokens,
                               field="max_new_tokens")
            kw = {k: item[k] for k in ("chunk_embeddings", "question_embedding", "chunk_scores", "titles")
                  if k in item}
            if "features" in item:
                kw["features"] = item["features"]

            def run():
                import warnings

                from chunksel.errors import UnscoredChunksWarning

                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UnscoredChunksWarning)
                    return cs.answer(item["question"], item["chunks"], max_new_tokens=mnt, **kw)

            kw["deadline"] = gate.deadline(t0)
            (text, sel), queued = await gate.run(run, t0, request)
            return {"answer": text, "selection": sel.to_dict()}, {**sel.timings, "queue": queued}

        return await handle(request, "/answer", work)

    @app.get("/health")
    async def health(request: Request):
        async def work(t0):
            return {"status": "ok", "selector": public_paths(cs.describe()), "answer": s.answer,
                    "worker": worker_info(),
                    "settings": {k: v for k, v in s.public().items() if k not in ("host", "port")}}, {}

        return await handle(request, "/health", work)

    @app.get("/metrics")
    async def get_metrics(request: Request):
        async def work(t0):
            return metrics.snapshot(), {}

        return await handle(request, "/metrics", work)

    return app
