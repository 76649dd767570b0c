"""Load test of ``chunksel serve``: latency by stage, throughput, errors and memory.

Writes ``benchmarks/results/serve_load.json`` and prints a table.

    python benchmarks/serve_load.py                   # trains a tiny anchored model first
    python benchmarks/serve_load.py --selector prototype   # the paper's prototype: SmolLM2 warm-up
    python benchmarks/serve_load.py --model DIR       # any saved selector

Without ``--model`` the script writes a small user JSONL file (country capitals, 4
candidate chunks per question), builds it with the packaged all-MiniLM-L6-v2 and trains
the retrieval-anchored selector without generator blocks (``blocks=q+chunk+letor``:
question and chunk embeddings plus the LETOR features), so requests pay encoding and
scoring but no warm-up pass. ``--selector prototype`` trains the paper's prototype
selector instead (``h``, ``r`` from SmolLM2-135M-Instruct, extracted for the training
questions), so every request also pays the generator's warm-up pass; it writes
``serve_load_prototype.json``.

The server runs as a separate process (``chunksel serve --port 0 --no-answer
--threads 1``) bound to 127.0.0.1; the script reads the port it prints. Clients are
threads with their own ``httpx`` connection, posting ``/select`` requests (a question
and its chunks, ``k=1``) back to back. Each level (1, 4 and 16 concurrent clients) runs
until ``--requests`` requests or ``--seconds`` seconds, whichever comes first, after a
few warm-up requests. Reported per level: end-to-end client latency and the server's
own stage timings from each response (``queue``: waiting for a worker; ``encode``:
MiniLM for the chunks and the question; ``warmup``: the generator pass, 0 here;
``score``: features + model; ``request``: the whole request inside the server), p50 /
p99 / mean; throughput (successful requests per second); errors; and the server
process's RSS before the first request and after the last. The 16-client level runs a
second time with continuous batching on (``--batch-wait-ms``): requests that arrive
while the workers are busy run together as one encoder call, one batched warm-up pass
and one scoring call.

Numbers are from a shared 2-core machine (another benchmark was running), so they are
pessimistic and noisy; the JSON records the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
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

CAPITALS = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"), ("Portugal", "Lisbon"),
    ("Austria", "Vienna"), ("Poland", "Warsaw"), ("Norway", "Oslo"), ("Sweden", "Stockholm"),
    ("Finland", "Helsinki"), ("Denmark", "Copenhagen"), ("Ireland", "Dublin"), ("Greece", "Athens"),
    ("Hungary", "Budapest"), ("Egypt", "Cairo"), ("Kenya", "Nairobi"), ("Japan", "Tokyo"), ("Chile", "Santiago"),
    ("Peru", "Lima"), ("Canada", "Ottawa"), ("Cuba", "Havana"), ("Nepal", "Kathmandu"), ("Iran", "Tehran"),
    ("Iraq", "Baghdad"), ("Mali", "Bamako"), ("Ghana", "Accra"), ("Laos", "Vientiane"), ("Qatar", "Doha"),
    ("Oman", "Muscat"), ("Fiji", "Suva"), ("Togo", "Lome"), ("Niger", "Niamey"), ("Belgium", "Brussels"),
    ("Latvia", "Riga"), ("Estonia", "Tallinn"), ("Bolivia", "Sucre"), ("Uganda", "Kampala"), ("Sudan", "Khartoum"),
    ("Mongolia", "Ulaanbaatar"), ("Thailand", "Bangkok"),
]


def records() -> list[dict]:
    """One question per country; 4 chunks: the answer (at a rotating rank), a distractor
    about the same country and two other capitals."""
    n = len(CAPITALS)

    def fact(i):
        c, city = CAPITALS[i]
        return {"id": f"p{i}", "title": c, "text": f"{city} is the capital and largest city of {c}, "
                                                  f"home to its government and parliament."}

    out = []
    for i, (country, city) in enumerate(CAPITALS):
        ctxs = [{"id": f"d{i}", "title": country, "text": f"{country} has a long history, a varied climate "
                                                         f"and a population of several million people."},
                fact((i + 1) % n), fact((i + 5) % n)]
        ctxs.insert(i % 4, fact(i))
        out.append({"id": f"q{i}", "question": f"What is the capital of {country}?", "answers": [city],
                    "ctxs": ctxs})
    return out


def train_model(workdir: Path, name: str = "anchored") -> tuple[Path, dict]:
    """Train and save the tiny selector; returns its folder and a description."""
    import torch

    from chunksel.build import build_instances, extract_question_features
    from chunksel.selectors import make_selector

    torch.set_num_threads(1)
    data = workdir / "capitals.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records()))
    t = time.perf_counter()
    built = build_instances("user", k=4, input_path=data, progress=False)
    train = [i for i in built.instances if i.split == "train"]
    val = [i for i in built.instances if i.split == "val"]
    if name == "prototype":
        feats = extract_question_features([i.question for i in built.instances], progress=False)
        sel = make_selector("prototype", k=4, hidden=64, depth=2, max_epochs=30, batch_size=16, progress=False)
        sel.fit(train, feats, val)
        about = {"selector": "prototype", "blocks": "hs+rw+chunk", "generator": sel.provenance_["generator_id"]}
    else:
        feats = None
        sel = make_selector("anchored", k=4, blocks="q+chunk+letor", corpus=built.corpus, hidden=64,
                            phi_hidden=16, max_epochs=20, batch_size=16, progress=False)
        sel.fit(train, None, val)
        about = {"selector": "anchored", "blocks": "q+chunk+letor"}
    out = workdir / name
    sel.save(out)
    return out, {**about, "k": 4, "questions": len(built.instances), "n_parameters": sel.n_parameters(),
                 "train_s": round(time.perf_counter() - t, 1)}


def start_server(model: Path, batch_wait_ms: float, concurrency: int, log: Path) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "chunksel.cli", "serve", "--model", str(model), "--host", "127.0.0.1",
           "--port", "0", "--no-answer", "--threads", "1", "--quiet", "--concurrency", str(concurrency),
           "--batch-wait-ms", str(batch_wait_ms)]
    with open(log, "w") as err:  # a file, not a pipe: a chatty server never blocks on it
        proc = subprocess.Popen(["nice", "-n", "19", *cmd], stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"the server did not start: {log.read_text()[-2000:]}")
    addr = json.loads(line)
    return proc, f"http://{addr['host']}:{addr['port']}"


def rss_mb(pid: int) -> float:
    import psutil

    return round(psutil.Process(pid).memory_info().rss / 2**20, 1)


def stats(values: list[float]) -> dict:
    if not values:
        return {}
    a = np.asarray(values, dtype=np.float64)
    return {"p50": round(float(np.percentile(a, 50)), 2), "p99": round(float(np.percentile(a, 99)), 2),
            "mean": round(float(a.mean()), 2), "n": int(a.size)}


def run_level(url: str, clients: int, max_requests: int, seconds: float, payloads: list[dict]) -> dict:
    import httpx

    lock = threading.Lock()
    sent = [0]
    client_ms: list[float] = []
    stage_ms: dict[str, list[float]] = {s: [] for s in STAGES}
    errors: dict[str, int] = {}
    deadline = time.perf_counter() + seconds

    def worker(w: int) -> None:
        with httpx.Client(timeout=60) as http:
            while True:
                with lock:
                    if sent[0] >= max_requests or time.perf_counter() > deadline:
                        return
                    n = sent[0]
                    sent[0] += 1
                t = time.perf_counter()
                try:
                    r = http.post(url + "/select", json=payloads[(n * 7 + w) % len(payloads)])
                    ok = r.status_code == 200
                    body = r.json() if ok else None
                    key = None if ok else str(r.status_code)
                except httpx.HTTPError as err:
                    ok, body, key = False, None, type(err).__name__
                ms = (time.perf_counter() - t) * 1e3
                with lock:
                    if ok:
                        client_ms.append(ms)
                        for s in STAGES:
                            stage_ms[s].append(float(body["timings_ms"].get(s, 0.0)))
                    else:
                        errors[key] = errors.get(key, 0) + 1

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(worker, range(clients)))
    wall = time.perf_counter() - t0
    return {
        "clients": clients, "requests": sent[0], "ok": len(client_ms), "errors": sum(errors.values()),
        "errors_by_kind": errors, "wall_s": round(wall, 2),
        "throughput_rps": round(len(client_ms) / wall, 2) if wall > 0 else 0.0,
        "latency_ms": {"client": stats(client_ms), **{s: stats(v) for s, v in stage_ms.items()}},
    }


def bench_server(model: Path, batch_wait_ms: float, levels: list[int], args, payloads) -> dict:
    import httpx

    log = Path(args.workdir) / f"server-{batch_wait_ms:g}.log"
    proc, url = start_server(model, batch_wait_ms, args.concurrency, log)
    try:
        for _ in range(5):  # warm-up requests (first calls pay lazy initialisation)
            httpx.post(url + "/select", json=payloads[0], timeout=60).raise_for_status()
        before = rss_mb(proc.pid)
        out = []
        for c in levels:
            res = run_level(url, c, args.requests, args.seconds, payloads)
            print(f"  batch_wait_ms={batch_wait_ms:g} clients={c:>2}: {res['ok']:>4} ok, {res['errors']} errors, "
                  f"{res['throughput_rps']:>6.1f} req/s, client p50 {res['latency_ms']['client'].get('p50')} ms "
                  f"p99 {res['latency_ms']['client'].get('p99')} ms", flush=True)
            out.append(res)
        after = rss_mb(proc.pid)
        metrics = httpx.get(url + "/metrics", timeout=30).json()
    finally:
        proc.terminate()
        code = proc.wait(timeout=60)
    errors = [ln for ln in log.read_text().splitlines() if "Error" in ln or "error" in ln][:5]
    return {"batch_wait_ms": batch_wait_ms, "levels": out, "rss_mb": {"before": before, "after": after},
            "server_metrics": metrics, "exit_code": code, "server_error_lines": errors}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="a saved selector (default: train a tiny one)")
    ap.add_argument("--selector", choices=["anchored", "prototype"], default="anchored",
                    help="which tiny selector to train (default anchored, no generator)")
    ap.add_argument("--requests", type=int, default=400, help="requests per level at most (default 400)")
    ap.add_argument("--seconds", type=float, default=15.0, help="seconds per level at most (default 15)")
    ap.add_argument("--concurrency", type=int, default=2, help="server workers (default 2)")
    ap.add_argument("--batch-wait-ms", type=float, default=5.0, help="micro-batching window of the second run")
    ap.add_argument("--out", default=None, help="default benchmarks/results/serve_load[_prototype].json")
    args = ap.parse_args()
    if args.out is None:
        args.out = str(OUT if args.selector == "anchored" else OUT.with_name(f"serve_load_{args.selector}.json"))

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
        os.environ.setdefault("CHUNKSEL_CACHE", str(Path(tmp) / "cache"))
        args.workdir = tmp
        if args.model:
            model, about = Path(args.model), {"model": args.model}
        else:
            model, about = train_model(Path(tmp), args.selector)
        payloads = [{"question": r["question"], "chunks": [c["text"] for c in r["ctxs"]], "k": 1}
                    for r in records()]
        print(f"model: {about}", flush=True)
        runs = [bench_server(model, 0.0, [1, 4, 16], args, payloads)]
        runs.append(bench_server(model, args.batch_wait_ms, [16], args, payloads))
    import torch

    result = {
        "benchmark": "serve_load",
        "command": " ".join(["nice -n 19 python benchmarks/serve_load.py", *sys.argv[1:]]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
                    "python": platform.python_version(), "torch": torch.__version__,
                    "note": "shared 2-core machine with another benchmark running: pessimistic, noisy"},
        "model": about,
        "settings": {"requests_per_level": args.requests, "seconds_per_level": args.seconds,
                     "server_concurrency": args.concurrency, "server_threads": 1, "k": 1,
                     "chunks_per_request": 4, "endpoint": "POST /select", "host": "127.0.0.1"},
        "runs": runs,
        "total_s": round(time.perf_counter() - started, 1),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out} ({result['total_s']} s)")


if __name__ == "__main__":
    main()
