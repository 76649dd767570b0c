"""Load test of ``chunksel serve`` on PopQA: client- and server-side latency, throughput,
the chunk-embedding cache, the ONNX int8 encoder and goodput under overload.

Writes ``benchmarks/results/serve_load.json`` and prints a table.

    nice -n 5 python benchmarks/serve_load.py            # about 10-15 minutes on 2 cores

Setup: ``build_instances("popqa", k=5, limit=--questions)`` (K=5 wiki-w100 passages per
question, retrieved with the shipped MiniLM embeddings); bm25 (no training), LambdaMART
(100 trees) and the anchored selector without generator blocks
(``q+chunk+letor+lambdamart``, one member) are trained quickly on its training split; the
requests are its test questions with their 5 passages (titles included).

Server: ``chunksel serve --workers 2 --concurrency 1 --threads 1 --encoder onnx-int8
--embedding-cache FILE``
(both cores, one inference thread per worker). Clients: an asyncio HTTP/1.1 load
generator with one keep-alive connection per client (cheap, so that it does not eat the
cores it measures), posting ``/select`` back to back at 1, 4 and 16 clients, each level
``--seconds`` long after a warm-up. Per level: client latency (send to last byte),
server latency (the response's ``timings_ms.request``) and its stages, p50/p95/mean, and
successful requests per second. Modes:

- ``embeddings``: the request carries ``question_embedding``, ``chunk_embeddings`` and
  ``chunk_scores`` (what the retriever computed): nothing is encoded in the server;
- ``raw_cold``: text only, every chunk new to the server's cache (one client, the first
  ``--cold`` questions): the ONNX int8 encoder embeds the question and the 5 chunks;
- ``raw_warm``: the requests of the cold pass again, at 1, 4 and 16 clients: their chunks
  come from the cache (``--embedding-cache``: a SQLite tier both workers share, behind
  each worker's memory LRU), only the question is encoded;
- bm25 reads text only (``text``).

Goodput: the anchored server with embeddings given, in ``--rounds`` rounds on one server
with a 1 s request timeout. Each round measures the capacity (64 closed-loop clients, the
median of three windows of ``--seconds``: a few keep-alive connections need not be spread
evenly over the workers, and one window is noisy) and
then drives the server open-loop at twice that rate for twice ``--seconds``: requests are
due at a fixed rate whatever the server does, each on a free keep-alive connection (the
longest idle one; new ones opened as needed), and latency runs from the time a request was
due; each request carries that time as ``X-Request-Start``, so the server counts the time it
waited in the generator and the socket against its deadline. The generator opens 512 keep-alive connections
before the window and collects no garbage during it (its own pauses would read as late
answers). Per round: answers within the deadline per second of the window, against that round's
capacity; 503s (admission control) and 504s; how far past the deadline any answer came; the
generator's own send lag and the cores it used (``generator_cores``: it shares the two
cores with the server). The headline share is the rounds' median, with the worst round and
the share against the best capacity measured anywhere in the run. The encoder section
times the encoder alone in this process on one thread (question + 5 chunks, and the
question alone).
The load average (``uptime``) at the start and end is recorded: the machine is shared.
``--goodput-only`` runs the set-up and the overload rounds alone (about 2 minutes with
``--questions 300 --seconds 5``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections import deque
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "serve_load.json"
STAGES = ("queue", "encode", "warmup", "score", "request")
LEVELS = (1, 4, 16)


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def stats(values: list[float]) -> dict:
    if not values:
        return {}
    a = np.asarray(values, dtype=np.float64)
    return {"p50": round(float(np.percentile(a, 50)), 3), "p95": round(float(np.percentile(a, 95)), 3),
            "mean": round(float(a.mean()), 3), "n": int(a.size)}


# --------------------------------------------------------------------- setup
def setup(workdir: Path, n_questions: int, seed: int) -> tuple[dict[str, Path], list, dict]:
    """Build PopQA (K=5), train the selectors, return (model dirs, test instances, about)."""
    import torch

    from chunksel.build import build_instances
    from chunksel.selectors import make_selector

    torch.set_num_threads(1)
    t = time.perf_counter()
    built = build_instances("popqa", k=5, limit=n_questions, seed=seed, progress=False)
    train = [i for i in built.instances if i.split == "train"]
    val = [i for i in built.instances if i.split == "val"]
    test = [i for i in built.instances if i.split == "test"]
    build_s = time.perf_counter() - t
    models, about = {}, {"dataset": "popqa", "k": 5, "questions": len(built.instances), "train": len(train),
                         "val": len(val), "test": len(test), "build_s": round(build_s, 1)}
    for name, params in (
        ("bm25", {}),
        ("lambdamart", {"n_estimators": 100, "progress": False}),
        ("anchored", {"blocks": "q+chunk+letor+lambdamart", "members": 1, "hidden": 64, "phi_hidden": 16,
                      "max_epochs": 30, "batch_size": 32, "progress": False}),
    ):
        t = time.perf_counter()
        sel = make_selector(name, **params)
        if sel.requires_fit:
            sel.fit(train, None, val)
        else:
            sel.fit(train)
        sel.save(workdir / name)
        models[name] = workdir / name
        about[f"{name}_train_s"] = round(time.perf_counter() - t, 1)
    return models, test, about


def payloads(test: list, embeddings: bool) -> list[bytes]:
    out = []
    for inst in test:
        body = {"question": inst.question.text, "chunks": [c.text for c in inst.candidates],
                "titles": [c.title for c in inst.candidates], "k": 1}
        if embeddings:
            body["question_embedding"] = [round(float(x), 5) for x in inst.question.embedding]
            body["chunk_embeddings"] = [[round(float(x), 5) for x in c.embedding] for c in inst.candidates]
            body["chunk_scores"] = [round(float(c.score), 6) for c in inst.candidates]
        out.append(json.dumps(body).encode())
    return out


# ------------------------------------------------------------------ the server
def start_server(model: Path, workdir: Path, tag: str, timeout_s: float = 30.0,
                 workers: int = 2) -> tuple[subprocess.Popen, str, int, dict]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "chunksel.cli", "serve", "--model", str(model), "--host", "127.0.0.1",
           "--port", "0", "--no-answer", "--threads", "1", "--quiet", "--concurrency", "1",
           "--workers", str(workers), "--encoder", "onnx-int8", "--timeout", str(timeout_s), "--queue", "256",
           "--embedding-cache", str(workdir / f"chunk-cache-{tag}.sqlite")]
    log = workdir / f"server-{tag}.log"
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"the server did not start: {log.read_text()[-3000:]}")
    addr = json.loads(line)
    return proc, addr["host"], addr["port"], addr


def stop_server(proc: subprocess.Popen) -> int:
    proc.terminate()
    return proc.wait(timeout=120)


# ------------------------------------------------------------------ the client
async def _request(reader, writer, path: str, body: bytes, host: str, extra: bytes = b"") -> tuple[int, bytes]:
    writer.write(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: " + host.encode() + extra
                 + b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode()
                 + b"\r\n\r\n" + body)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n"):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
        elif line.lower().replace(b" ", b"") == b"connection:close":
            status = -status  # the server closes this connection after the answer
    return status, await reader.readexactly(length)


_REQUEST_MS = re.compile(rb'"request"\s*:\s*([0-9.eE+-]+)')


def request_ms(raw: bytes) -> float:
    """The server's ``timings_ms.request`` of an answer, read without parsing the whole
    JSON body (the load generator shares the cores it measures)."""
    m = _REQUEST_MS.search(raw)
    if m is None:
        raise ValueError(f"no timings_ms.request in the answer: {raw[:200]!r}")
    return float(m.group(1))


async def _closed_loop(host: str, port: int, clients: int, bodies: list[bytes], seconds: float,
                       max_requests: int | None, stages: bool = True) -> dict:
    client_ms: list[float] = []
    stage: dict[str, list[float]] = {s: [] for s in STAGES}
    errors: dict[str, int] = {}
    sent = [0]
    stop_at = time.perf_counter() + seconds

    async def one(w: int) -> None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while time.perf_counter() < stop_at and (max_requests is None or sent[0] < max_requests):
                n = sent[0]
                sent[0] += 1
                t = time.perf_counter()
                status, raw = await _request(reader, writer, "/select", bodies[n % len(bodies)], host)
                ms = (time.perf_counter() - t) * 1e3
                if status == 200:
                    client_ms.append(ms)
                    if stages:
                        tm = json.loads(raw)["timings_ms"]
                        for s in STAGES:
                            stage[s].append(float(tm.get(s, 0.0)))
                else:
                    errors[str(status)] = errors.get(str(status), 0) + 1
        finally:
            writer.close()

    t0, cpu0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one(w) for w in range(clients)))
    wall = time.perf_counter() - t0
    return {"clients": clients, "ok": len(client_ms), "errors": errors, "wall_s": round(wall, 2),
            "generator_cores": round((time.process_time() - cpu0) / wall, 3),
            "req_per_s": round(len(client_ms) / wall, 2),
            "client_ms": stats(client_ms), "server_ms": {s: stats(v) for s, v in stage.items()}}


def closed_loop(host, port, clients, bodies, seconds, max_requests=None, stages=True) -> dict:
    return asyncio.run(_closed_loop(host, port, clients, bodies, seconds, max_requests, stages))


async def _open_loop(host: str, port: int, rate: float, bodies: list[bytes], seconds: float,
                     timeout_s: float, max_connections: int = 1000, preopen: int = 512) -> dict:
    """Requests arriving at ``rate`` per second for ``seconds``, whatever the server does
    (open loop): each is sent on a free keep-alive connection (a new one is opened when
    none is free, up to ``max_connections``), and its latency runs from the time it was
    due, so a request the generator could not send at once is not hidden (no coordinated
    omission). Goodput: 200s within ``timeout_s`` of being due, per second of the window."""
    # idle connections are reused first in, first out: a LIFO pool would send most requests
    # down the connections that come back fastest, i.e. to the worker rejecting the most
    idle: deque = deque([await asyncio.open_connection(host, port) for _ in range(preopen)])
    slots = asyncio.Semaphore(max_connections)
    opened = [preopen]
    ok: list[float] = []
    late: list[float] = []
    codes: dict[str, int] = {}
    busy_ms: list[float] = []
    send_lag: list[float] = []
    server_ms: list[float] = []

    async def fire(n: int, due: float) -> None:
        async with slots:
            if idle:
                conn = idle.popleft()
            else:
                conn = await asyncio.open_connection(host, port)
                opened[0] += 1
            send_lag.append((time.perf_counter() - due) * 1e3)
            # the request's due time as X-Request-Start: the server counts the time it
            # waited here (send lag, the socket) against its deadline
            start = b"\r\nX-Request-Start: t=%.6f" % (wall0 + (due - t0))
            try:
                status, raw = await _request(*conn, "/select", bodies[n % len(bodies)], host, start)
                if abs(status) == 200:
                    server_ms.append(request_ms(raw))
            except (ConnectionError, asyncio.IncompleteReadError):
                codes["conn_error"] = codes.get("conn_error", 0) + 1
                conn[1].close()
                return
            if status < 0:  # closed by the server after answering
                status = -status
                conn[1].close()
            else:
                idle.append(conn)
        ms = (time.perf_counter() - due) * 1e3
        codes[str(status)] = codes.get(str(status), 0) + 1
        if status == 200:
            (ok if ms <= timeout_s * 1e3 else late).append(ms)
        elif status == 503:
            busy_ms.append(ms)

    # the generator's own pauses would show as late answers: no garbage collection in the window
    gc.collect()
    gc.disable()
    tasks, t0, n, cpu0 = [], time.perf_counter(), 0, time.process_time()
    wall0 = time.time() - (time.perf_counter() - t0)
    while True:
        due = t0 + n / rate
        if due - t0 >= seconds:
            break
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        tasks.append(asyncio.ensure_future(fire(n, due)))
        n += 1
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    gc.enable()
    for conn in idle:
        conn[1].close()
    return {"rate_offered": round(rate, 1), "sent": n, "codes": codes, "window_s": seconds, "wall_s": round(wall, 2),
            "goodput_per_s": round(len(ok) / seconds, 2), "answered_ms": stats(ok + late),
            "answered_after_deadline": len(late),
            "max_ms_past_deadline": round(max([m - timeout_s * 1e3 for m in late], default=0.0), 1),
            "busy_503_ms": stats(busy_ms), "send_lag_ms": stats(send_lag), "connections_opened": opened[0],
            "server_request_ms": stats(server_ms), "generator_cores": round(cpu / wall, 3),
            "server_max_ms_past_deadline": round(max([m - timeout_s * 1e3 for m in server_ms], default=0.0), 1)}


# ------------------------------------------------------------------ the encoder
def encoder_timing(test: list, n: int) -> dict:
    import torch

    from chunksel.retrieval.encoder import Encoder
    from chunksel.retrieval.onnx_encoder import OnnxEncoder

    torch.set_num_threads(1)
    out = {}
    batches = [[i.question.text] + [f"{c.title} {c.text}".strip() for c in i.candidates] for i in test[:n]]
    for name, enc in (("onnx-int8", OnnxEncoder(quantize="int8", threads=1)),
                      ("onnx-fp32", OnnxEncoder(quantize="fp32", threads=1)), ("torch", Encoder())):
        enc.encode(batches[0], progress=False)
        six, one = [], []
        for b in batches:
            t = time.perf_counter()
            enc.encode(b, progress=False)
            six.append((time.perf_counter() - t) * 1e3)
            t = time.perf_counter()
            enc.encode(b[:1], progress=False)
            one.append((time.perf_counter() - t) * 1e3)
        out[name] = {"question_and_5_chunks_ms": stats(six), "question_alone_ms": stats(one)}
    return out


# ------------------------------------------------------------------- overload
def overload(model: Path, work: Path, bodies: list[bytes], seconds: float, rounds: int,
             capacity_levels: float | None, timeout_s: float = 1.0, windows: int = 3) -> dict:
    """Goodput at twice the capacity, in ``rounds`` rounds on one server (1 s request
    timeout): each round measures the capacity (64 closed-loop clients, the median of
    ``windows`` windows of ``seconds``: one 5 s window read 386 to 593 req/s a minute apart
    on an idle machine) and then drives the server open-loop at twice that rate for twice
    ``seconds``; its share is its goodput over its own capacity. Both phases use the same
    light client (no JSON parsing of the answers). A capacity measured minutes earlier, on another
    server process, drifts with the shared machine's load as much as the shares differ, so
    each share pairs two measurements taken seconds apart. The headline share is the
    rounds' median; the worst round and the share against the best capacity seen anywhere
    in the run (``capacity_levels_per_s`` included) are given too."""
    import httpx

    proc, host, port, _ = start_server(model, work, "goodput", timeout_s=timeout_s)
    runs = []
    try:
        closed_loop(host, port, 8, bodies, 3.0)
        for r in range(rounds):
            caps = [closed_loop(host, port, 64, bodies, seconds, stages=False) for _ in range(windows)]
            cap = {"req_per_s": float(np.median([c["req_per_s"] for c in caps])),
                   "errors": {k: sum(c["errors"].get(k, 0) for c in caps) for c in caps for k in c["errors"]}}
            over = asyncio.run(_open_loop(host, port, 2 * cap["req_per_s"], bodies, seconds * 2, timeout_s))
            over["capacity_per_s"] = cap["req_per_s"]
            over["capacity_windows_per_s"] = [c["req_per_s"] for c in caps]
            over["capacity_errors"] = cap["errors"]
            over["goodput_share_of_capacity"] = round(over["goodput_per_s"] / cap["req_per_s"], 3)
            print(f"  overload round {r + 1}: capacity {cap['req_per_s']:.1f} req/s, goodput "
                  f"{over['goodput_per_s']:.1f} req/s at {over['rate_offered']:.1f} offered: share "
                  f"{over['goodput_share_of_capacity']:.3f}", flush=True)
            runs.append(over)
            time.sleep(1.0)  # the queue drains: the next capacity round starts from idle
        metrics = httpx.get(f"http://{host}:{port}/metrics", timeout=30).json()  # one worker's
    finally:
        stop_server(proc)
    shares = [o["goodput_share_of_capacity"] for o in runs]
    best = max([o["capacity_per_s"] for o in runs] + ([capacity_levels] if capacity_levels else []))
    return {"timeout_s": timeout_s, "rounds": runs,
            "goodput_share_of_capacity": round(float(np.median(shares)), 3),
            "worst_round_share": round(min(shares), 3),
            "goodput_share_of_best_capacity": round(float(np.median([o["goodput_per_s"] for o in runs])) / best, 3),
            "best_capacity_per_s": best, "capacity_levels_per_s": capacity_levels,
            "answered_after_deadline": sum(o["answered_after_deadline"] for o in runs),
            "max_ms_past_deadline": max(o["max_ms_past_deadline"] for o in runs),
            "server_max_ms_past_deadline": max(o["server_max_ms_past_deadline"] for o in runs),
            "one_worker_dropped": metrics.get("dropped")}


# ---------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=600, help="PopQA questions built (default 600)")
    ap.add_argument("--seconds", type=float, default=8.0, help="seconds per level (default 8)")
    ap.add_argument("--cold", type=int, default=40, help="requests of the cold-cache pass (default 40)")
    ap.add_argument("--encoder-batches", type=int, default=30, help="requests timed per encoder (default 30)")
    ap.add_argument("--rounds", type=int, default=3, help="capacity + overload rounds (default 3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--goodput-only", action="store_true",
                    help="only the overload rounds (after the set-up): no encoder timing, no client levels")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error(f"--rounds must be >= 1, got {args.rounds}")
    started = time.perf_counter()
    load_start = uptime()
    result: dict = {"benchmark": "serve_load", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "command": " ".join(["nice -n 5 python benchmarks/serve_load.py", *sys.argv[1:]]),
                    "uptime_start": load_start}
    with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
        work = Path(tmp)
        models, test, about = setup(work, args.questions, args.seed)
        result["data"] = about
        print(f"data: {about}", flush=True)
        if not args.goodput_only:
            result["encoder"] = encoder_timing(test, min(args.encoder_batches, len(test)))
            print(f"encoder: {json.dumps(result['encoder'])}", flush=True)
        emb, raw = payloads(test, True), payloads(test, False)
        result["request_bytes"] = {"embeddings": round(float(np.mean([len(b) for b in emb]))),
                                   "text": round(float(np.mean([len(b) for b in raw])))}
        runs: dict = {}
        capacity = None
        for name in () if args.goodput_only else ("bm25", "lambdamart", "anchored"):
            proc, host, port, addr = start_server(models[name], work, name)
            run: dict = {"workers": addr.get("workers")}
            try:
                modes = {"text": raw} if name == "bm25" else {"embeddings": emb}
                for mode, bodies in modes.items():
                    closed_loop(host, port, 8, bodies, 3.0)  # warm-up: every worker's lazy set-up
                    run[mode] = [closed_loop(host, port, c, bodies, args.seconds) for c in LEVELS]
                if name != "bm25":  # the raw-text path: one pass with a cold chunk cache, then warm
                    run["raw_cold"] = [closed_loop(host, port, 1, raw, 600, max_requests=min(len(raw), args.cold))]
                    warm = raw[: args.cold]  # the chunks the cold pass stored (the SQLite tier is shared)
                    run["raw_warm"] = [closed_loop(host, port, c, warm, args.seconds) for c in LEVELS]
                if name == "anchored":  # with few keep-alive connections the workers may not share
                    # them evenly: 64 clients probe what both workers serve together
                    run["capacity_probe"] = [closed_loop(host, port, 64, emb, args.seconds)]
                    capacity = max(lvl["req_per_s"] for lvl in run["embeddings"] + run["capacity_probe"])
            finally:
                run["exit_code"] = stop_server(proc)
            runs[name] = run
            for mode, levels in run.items():
                if mode != "workers" and isinstance(levels, list):
                    for lvl in levels:
                        print(f"  {name:<10} {mode:<10} clients={lvl['clients']:>2}: {lvl['req_per_s']:>7.1f} req/s, "
                              f"client p50 {lvl['client_ms'].get('p50')} ms, server p50 "
                              f"{lvl['server_ms']['request'].get('p50')} ms, errors {lvl['errors']}", flush=True)
        result["runs"] = runs
        result["overload"] = over = overload(models["anchored"], work, emb, args.seconds, args.rounds, capacity)
        print(f"overload: {json.dumps(over)}", flush=True)
    import onnxruntime
    import torch

    result["machine"] = {"cpus": os.cpu_count(), "uptime_end": uptime(), "python": platform.python_version(),
                         "torch": torch.__version__, "onnxruntime": onnxruntime.__version__,
                         "note": "shared 2-core machine; the load generator runs on the same cores"}
    result["goodput_only"] = args.goodput_only
    result["settings"] = {"server": "chunksel serve --workers 2 --concurrency 1 --threads 1 --encoder onnx-int8 "
                                    "--embedding-cache FILE",
                          "seconds_per_level": args.seconds, "levels": list(LEVELS), "k": 1, "chunks_per_request": 5,
                          "endpoint": "POST /select", "client": "asyncio HTTP/1.1, one keep-alive connection each (closed loop); open loop: a connection per request in flight"}
    result["total_s"] = round(time.perf_counter() - started, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out} ({result['total_s']} s)")


if __name__ == "__main__":
    main()
