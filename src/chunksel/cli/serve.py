"""``chunksel serve``: serve a saved selector over HTTP (chunksel.pipeline.server)."""

from __future__ import annotations

import argparse
import os

from chunksel.cli.common import add_common
from chunksel.settings import Settings

COMMANDS = ("serve",)

#: the API key's environment variable when ``--api-key`` is not given
API_KEY_ENV = "CHUNKSEL_API_KEY"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve a saved selector over HTTP (needs chunksel[serve])")
    add_common(p)
    p.add_argument("--model", required=True, help="a saved selector directory, or a shipped pretrained one (anchored-base, lambdamart-base, anchored-lite, lambdamart-lite)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 = any free port, printed)")
    p.add_argument("--api-key", default=None,
                   help="require this key in the X-API-Key header (default $CHUNKSEL_API_KEY; none = open)")
    p.add_argument("--corpus", default=None, help="as for select")
    p.add_argument("--generator", default=None, help="generator path (default SmolLM2-135M-Instruct)")
    p.add_argument("--no-answer", action="store_true", help="disable POST /answer (no generator is loaded for it)")
    p.add_argument("--max-request-bytes", type=int, default=1_000_000)
    p.add_argument("--max-chunks", type=int, default=64, help="chunks per question (default 64)")
    p.add_argument("--max-chunk-chars", type=int, default=8000, help="characters per chunk (default 8000)")
    p.add_argument("--max-questions", type=int, default=32, help="questions per batch request (default 32)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="cap on /answer's max_new_tokens")
    p.add_argument("--concurrency", type=int, default=2, help="requests worked on at once (default 2)")
    p.add_argument("--queue", type=int, default=64,
                   help="requests allowed to wait for a worker; more get 503 (default 64)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per request before a 504 (default 30)")
    p.add_argument("--batch-wait-ms", type=float, default=0.0,
                   help="collect /select requests arriving within this many ms into one batch (default 0: off)")
    p.add_argument("--max-batch-chunks", type=int, default=256,
                   help="chunks summed over the questions of one /select/batch request (default 256)")
    p.add_argument("--no-admission", action="store_true",
                   help="queue every request up to --queue instead of answering 503 at once when the "
                        "predicted wait would pass the timeout")
    p.add_argument("--workers", type=int, default=1,
                   help="server processes sharing the port, each loading the models once (default 1)")
    p.add_argument("--encoder", choices=["torch", "onnx", "onnx-int8"], default="torch",
                   help="retriever encoder engine for raw-text requests: torch (sentence-transformers), or "
                        "MiniLM on ONNX Runtime, onnx (fp32) or onnx-int8 (default torch)")
    p.add_argument("--embedding-cache", default=None, metavar="FILE",
                   help="also keep the chunk-embedding cache in this SQLite file (shared by the workers)")
    p.add_argument("--embedding-cache-items", type=int, default=20_000,
                   help="chunk embeddings kept in memory per worker (default 20000; 0 = none)")


def run(args: argparse.Namespace, settings: Settings) -> int:
    from chunksel.pipeline.server import ServeSettings, serve

    serve_settings = ServeSettings(
        host=args.host, port=args.port, api_key=args.api_key or os.environ.get(API_KEY_ENV) or None,
        answer=not args.no_answer, max_request_bytes=args.max_request_bytes, max_chunks=args.max_chunks,
        max_chunk_chars=args.max_chunk_chars, max_questions=args.max_questions,
        max_new_tokens=args.max_new_tokens, concurrency=args.concurrency, queue=args.queue,
        timeout_s=args.timeout, batch_wait_ms=args.batch_wait_ms, max_batch_chunks=args.max_batch_chunks,
        admission=not args.no_admission, workers=args.workers, encoder=args.encoder,
        embedding_cache_path=args.embedding_cache, embedding_cache_items=args.embedding_cache_items,
    )
    serve(args.model, serve_settings, corpus=args.corpus, generator=args.generator)
    return 0
