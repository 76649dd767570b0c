"""What every stage of the study shares: building a selector from a profile's settings,
scoring it on a batch (metrics, per-instance hits, picks), the settings that key the memo,
combining seeds' hits for the significance tests, and the progress log."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.study.profiles import Profile


def say(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def make_selector(name: str, seed: int, progress: bool, prof: Profile, **extra: Any):
    from chunksel.selectors import get_selector_class

    cls = get_selector_class(name)
    names = cls._param_names()
    settings = {"seed": seed, "progress": progress, **prof.overrides.get(name, {}), **extra}
    if cls.stacked:  # a stacked row: its members' settings are the profile's
        settings.setdefault("base_params", dict(prof.overrides.get(cls.base_name, {})))
        settings.setdefault("member_params", dict(prof.overrides.get(cls.member_name, {})))
    params = {k: v for k, v in settings.items() if k in names}
    return cls(**params)


def evaluate_selector(selector, batch, features, picks: bool = False, scores=None) -> tuple:
    """Metrics (fractions), per-instance rank-1 hits and the answerable mask (and, with
    ``picks``, each instance's top-ranked candidate index); ``scores``: the selector's
    scores of ``batch`` when already computed."""
    from chunksel.eval.metrics import evaluate, per_instance_hits, rank_matrix, subset_mask
    from chunksel.types import candidate_mask, label_matrix

    scores = selector.score(batch, features) if scores is None else scores
    k = scores.shape[1]
    labels = label_matrix(batch, k=k)
    mask = candidate_mask(batch, k=k)
    hits = per_instance_hits(scores, labels, mask)
    answerable = subset_mask(labels, mask, "answerable")
    out = (evaluate(scores, labels, mask), hits, answerable)
    if picks:
        top = rank_matrix(scores, mask)[:, 0] if k else np.zeros(len(batch), dtype=int)
        out += (top.astype(int),)
    return out


def settings_of(name: str, seed: int, prof: Profile, **extra: Any) -> dict[str, Any]:
    sel = make_selector(name, seed, False, prof, **extra)
    return {"selector": name, "params": {k: v for k, v in sel.get_params().items() if k != "progress"}}


def sum_repairs(runs: Sequence[Any]) -> dict[str, int]:
    """Repairs of the LLM outputs over ``runs``, by kind (the read outputs)."""
    out: dict[str, int] = {}
    for r in runs:
        for k, v in r.repairs.to_dict().items():
            out[k] = out.get(k, 0) + int(v)
    return out


def combine_hits(per_seed: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per-instance hits of several seeds -> (hit rate averaged over seeds, majority hit).

    The significance tests take the seeds together this way: the paired bootstrap
    resamples instances of the averaged hit rate (so its interval reflects the seeds'
    mean accuracy), McNemar's exact test reads the seeds' majority (a hit when more than
    half of the seeds hit; with one seed, its hits).
    """
    stack = np.stack([np.asarray(h, dtype=np.float64) for h in per_seed])
    rate = stack.mean(axis=0)
    return rate, rate > 0.5
