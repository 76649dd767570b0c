"""Fill a response cache through :func:`map_cached` (run as a subprocess by test_cache.py).

Usage: ``python llm_cache_worker.py CACHE_ROOT N DELAY`` - maps items ``item-0`` ..
``item-{N-1}`` through a slow :class:`EchoBackend`, one item per call, and prints the
results and stats as one JSON line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root: tests.doubles

from tests.doubles import EchoBackend  # noqa: E402

from chunksel.llm.cache import map_cached  # noqa: E402

TEMPLATE = "Repeat: {text}"


def run(cache: str, n: int, delay: float) -> dict:
    items = [f"item-{i}" for i in range(n)]
    out = map_cached(
        EchoBackend(delay=delay), items, prompt=lambda x: TEMPLATE.format(text=x),
        item_id=lambda x: x, template=TEMPLATE, batch_size=1, cache=cache, progress=False,
        max_new_tokens=16,
    )
    return {"results": [r.text for r in out.results], "stats": out.stats.to_dict(),
            "path": str(out.cache_path)}


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))), flush=True)
