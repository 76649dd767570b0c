"""Late-interaction features for the LETOR rankers: MaxSim over MiniLM's token vectors.

Three columns per candidate (:data:`LATE_NAMES`), appended to the twelve LETOR features
when a ranker is built with ``late=True``:

====  ==============  ============================================================
 #    name            definition
====  ==============  ============================================================
12    maxsim          the ``maxsim`` selector's score (:mod:`chunksel.selectors.maxsim`)
13    maxsim_gap      MaxSim minus the instance's best MaxSim
14    maxsim_rr       1 / (1 + MaxSim's rank in the instance), ties by position
====  ==============  ============================================================

The variant chosen on validation at the full profile's size
(``benchmarks/maxsim_features.py``, ``docs/decisions/maxsim-features.md``).

A question's MaxSim against each chunk is kept in a content-addressed score cache (the
``score`` table of a SQLite file under ``<cache>/maxsim/``, keyed by the encoder, the
question and the chunk text), so a long extraction resumes after an interruption and
seeds, selectors and processes that see the same pair compute it once. The chunks'
token vectors come from ``tokens`` as for the ``maxsim`` selector (by default they are
encoded from the text).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from chunksel.config import show_progress
from chunksel.types import Instance

LATE_NAMES = ("maxsim", "maxsim_gap", "maxsim_rr")
#: instances scored by one MaxSim call
BATCH = 32

_SCORERS: dict[Any, Any] = {}
_DBS: dict[str, Any] = {}
_LOCK = threading.Lock()


def feature_names(base: Sequence[str], late: bool) -> tuple[str, ...]:
    """The column names of a ranker's features: the LETOR ones, then the late ones."""
    return (*base, *LATE_NAMES) if late else tuple(base)


def late_cost(base: str, late: bool) -> str:
    """A ranker's ``query_cost`` with the late columns: its own, plus the token vectors."""
    return f"{base}+tokens" if late and "tokens" not in base else base


def scorer(tokens: str | None = None) -> Any:
    """The process's ``maxsim`` selector for ``tokens`` (the encoder loads once)."""
    from chunksel.selectors.maxsim import MaxSimSelector

    with _LOCK:
        if tokens not in _SCORERS:
            _SCORERS[tokens] = MaxSimSelector(tokens=tokens)
        return _SCORERS[tokens]


def _db() -> Any:
    from chunksel.config import cache_root
    from chunksel.retrieval.chunk_cache import open_cache_db

    path = cache_root() / "maxsim" / "scores.sqlite"
    with _LOCK:
        if str(path) not in _DBS:
            path.parent.mkdir(parents=True, exist_ok=True)
            _DBS[str(path)] = open_cache_db(path)
        return _DBS[str(path)]


def _keys(sel: Any, inst: Instance) -> list[str]:
    model = sel.encoder().model_id
    head = f"{model}\0{sel.title}\0{sel.max_seq_length}\0{inst.question.text}\0".encode("utf-8", "surrogatepass")
    return [hashlib.sha256(head + sel.chunk_text(c).encode("utf-8", "surrogatepass")).hexdigest()[:40]
            for c in inst.candidates]


def maxsim_scores(batch: Sequence[Instance], tokens: str | None = None, progress: bool = False) -> np.ndarray:
    """(B, K) MaxSim of every candidate (-inf at padding), from the score cache where it
    holds them; the rest computed (``BATCH`` instances a call) and stored. Inside
    :func:`~chunksel.selectors.letor.memo_off` (a cost measurement, the application path)
    the cache is neither read nor written: every score is computed."""
    from tqdm.auto import tqdm

    from chunksel.selectors.letor import MEMO_ENABLED

    sel = scorer(tokens)
    k = max((len(i.candidates) for i in batch), default=0)
    out = np.full((len(batch), k), -np.inf)
    db, keys, todo = None, [], list(range(len(batch)))
    if MEMO_ENABLED.get():
        db, keys, todo = _db(), [_keys(sel, inst) for inst in batch], []
        for b, ks in enumerate(keys):
            got = dict(db.execute(f"SELECT key, value FROM score WHERE key IN ({','.join('?' * len(ks))})",
                                  ks).fetchall())
            if len(got) == len(ks):
                out[b, : len(ks)] = [got[x] for x in ks]
            else:
                todo.append(b)
    starts = range(0, len(todo), BATCH)
    for start in tqdm(starts, desc="maxsim features", disable=not (show_progress(progress) and len(todo) > BATCH)):
        part = todo[start:start + BATCH]
        for b, row in zip(part, sel.score([batch[b] for b in part]), strict=True):
            out[b, : len(batch[b].candidates)] = row[: len(batch[b].candidates)]
        if db is not None:
            rows = [(key, float(v)) for b in part for key, v in zip(keys[b], out[b, : len(keys[b])], strict=True)]
            with _LOCK:
                db.executemany("INSERT OR REPLACE INTO score (key, value) VALUES (?, ?)", rows)
                db.commit()  # every finished call is kept: an interrupted extraction resumes here
    return out


def late_features(batch: Sequence[Instance], tokens: str | None = None, progress: bool = False) -> np.ndarray:
    """(B, K, 3) late-interaction features (:data:`LATE_NAMES`; 0 at padding)."""
    ms = maxsim_scores(batch, tokens, progress)
    mask = np.isfinite(ms)
    best = np.where(mask, ms, -np.inf).max(axis=1, keepdims=True) if ms.size else ms
    rank = np.argsort(np.argsort(-ms, axis=1, kind="stable"), axis=1, kind="stable")
    cols = [np.where(mask, ms, 0.0), np.where(mask, ms - best, 0.0), np.where(mask, 1.0 / (1 + rank), 0.0)]
    return np.stack(cols, axis=2)
