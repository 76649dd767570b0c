"""What a refused request costs ``chunksel serve``: server CPU time per 503.

Writes ``benchmarks/results/serve_reject_cost.json`` and prints one line per layer.

    nice -n 5 python benchmarks/serve_reject_cost.py           # about 20 s

One server process (uvicorn, httptools) over the ``retrieval`` selector (no model loads),
its admission gate held full, so that every ``POST /select`` is refused with 503 ``busy``.
Eight keep-alive clients (asyncio, raw HTTP/1.1) send ``--requests`` requests of the
serve_load size (a question, five 600-character chunks with their 384-dimensional
embeddings: about 24 KB) back to back; the server's CPU time (user + system, from
``/proc``) over that window, divided by the requests, is the cost of one refusal. Two
layers, in ``--rounds`` alternating turns on one machine:

- ``protocol``: ``make_server`` as ``chunksel serve`` runs it: the gate in uvicorn's
  httptools protocol, which answers from the headers callback;
- ``asgi``: the same app behind a plain pass-through ASGI function, so uvicorn's own
  protocol runs and the gate's bare ASGI layer answers (what every request paid before
  the protocol gate).

Linux only (``/proc``). The load average at the start and end is recorded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "serve_reject_cost.json"

SERVER = """
import json, os, sys
from chunksel import ChunkSelector
from chunksel.pipeline.server import ServeSettings, bind, create_app, make_server
s = ServeSettings(port=0, concurrency=1, queue=1, timeout_s=1.0, answer=False)
app = create_app(ChunkSelector.load("retrieval"), s)
app.state.gate.admitted = 10 ** 9  # held full: every gated request is refused
sock = bind("127.0.0.1", 0)
print(json.dumps({"port": sock.getsockname()[1], "pid": os.getpid()}), flush=True)
if sys.argv[1] == "protocol":
    make_server(app, s).run(sockets=[sock])
else:
    async def plain(scope, receive, send):  # no app.state: uvicorn's own protocol
        await app(scope, receive, send)
    make_server(plain, s).run(sockets=[sock])
"""


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def request_bytes() -> bytes:
    body = json.dumps({"question": "q" * 60, "chunks": ["x" * 600] * 5,
                       "chunk_embeddings": [[0.01234] * 384] * 5, "question_embedding": [0.01234] * 384}).encode()
    return (b"POST /select HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body)


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def client(port: int, req: bytes, n: int) -> dict[str, int]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    codes: dict[str, int] = {}
    try:
        for _ in range(n):
            writer.write(req)
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length"))
            await reader.readexactly(length)
            codes[head[9:12].decode()] = codes.get(head[9:12].decode(), 0) + 1
    finally:
        writer.close()
    return codes


async def drive(port: int, pid: int, requests: int, clients: int = 8) -> dict:
    req = request_bytes()
    for _ in range(300):  # warm-up, once the server accepts
        try:
            await client(port, req, 200)
            break
        except OSError:
            await asyncio.sleep(0.1)
    c0, t0 = cpu_s(pid), time.perf_counter()
    got = await asyncio.gather(*[client(port, req, requests // clients) for _ in range(clients)])
    wall, cpu = time.perf_counter() - t0, cpu_s(pid) - c0
    codes: dict[str, int] = {}
    for c in got:
        for k, v in c.items():
            codes[k] = codes.get(k, 0) + v
    n = sum(codes.values())
    return {"codes": codes, "server_cpu_ms_per_request": round(cpu * 1e3 / n, 4),
            "refusals_per_s": round(n / wall, 1), "wall_s": round(wall, 2)}


def one(layer: str, requests: int) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-c", SERVER, layer], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env, text=True)
    try:
        info = json.loads(proc.stdout.readline())
        return asyncio.run(asyncio.wait_for(drive(info["port"], info["pid"], requests), 300))
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=8000, help="refused requests per turn (default 8000)")
    ap.add_argument("--rounds", type=int, default=3, help="turns of each layer, alternating (default 3)")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    result: dict = {"benchmark": "serve_reject_cost",
                    "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    "command": " ".join(["nice -n 5 python benchmarks/serve_reject_cost.py", *sys.argv[1:]]),
                    "uptime_start": uptime(), "request_bytes": len(request_bytes()),
                    "layers": {"protocol": [], "asgi": []}}
    for r in range(args.rounds):
        for layer in ("protocol", "asgi"):
            got = one(layer, args.requests)
            result["layers"][layer].append(got)
            print(f"round {r + 1} {layer:<8}: {got['server_cpu_ms_per_request']:.4f} ms server CPU per 503, "
                  f"{got['refusals_per_s']:.0f}/s, codes {got['codes']}", flush=True)
    result["median_cpu_ms_per_refusal"] = {
        layer: sorted(x["server_cpu_ms_per_request"] for x in runs)[len(runs) // 2]
        for layer, runs in result["layers"].items()}
    result["uptime_end"] = uptime()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}: median {result['median_cpu_ms_per_refusal']}")


if __name__ == "__main__":
    main()
