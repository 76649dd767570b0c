"""The zero-shot run's parts and their provenance, shared by the run
(:mod:`chunksel.study.zeroshot`) and its report (:mod:`chunksel.study.zeroshot_report`).

A part is one collection (its key, e.g. ``"arguana/minilm"``) or the held-out datasets
with one kind of list (``"lodo/minilm"``, ``"lodo/bm25"``). ``--update`` re-runs some parts
and keeps the others, so each part records the pretrained models (``pretrained_commit``)
and the code (``commit``) it was measured with, in ``results["parts"]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: collections of the zero-shot average (MiniLM candidates; the held-out datasets join it)
AVERAGE = ("wikiqa", "nfcorpus/minilm", "arguana/minilm")


def part_keys(results: Mapping[str, Any]) -> list[str]:
    """The run's parts: each collection's key, then ``lodo/<candidates>``."""
    return list(results.get("collections") or {}) + [f"lodo/{c}" for c in (results.get("lodo") or {})]


def backfill_parts(results: dict[str, Any]) -> None:
    """Give every part of an earlier run its provenance (``results["parts"]``): a run
    before per-part records measured all its parts with one set of pretrained models, the
    ``pretrained_commit`` it recorded."""
    parts = results.setdefault("parts", {})
    for key in part_keys(results):
        parts.setdefault(key, {"pretrained_commit": results.get("pretrained_commit"), "commit": None})


def stale_parts(results: Mapping[str, Any]) -> dict[str, str | None]:
    """``{part: pretrained commit}`` of the parts measured on other pretrained models than
    the run's latest (``results["pretrained_commit"]``): what ``--update`` kept from an
    earlier run. Empty when every part is the latest models'."""
    latest, parts = results.get("pretrained_commit"), results.get("parts") or {}
    out = {}
    for key in part_keys(results):
        commit = (parts.get(key) or {}).get("pretrained_commit", latest)
        if commit != latest:
            out[key] = commit
    return out


def parts_to_rerun(results: Mapping[str, Any], latest: str | None, collections: Sequence[str],
                   lodo_candidates: Sequence[str]) -> tuple[list[str], list[str]]:
    """The ``collections`` and the held-out ``lodo_candidates`` that ``--stale`` runs: those
    not measured on the pretrained models ``latest``. That includes a part an interrupted
    run never reached, since the run saves ``results.json`` after each part."""
    parts = results.get("parts") or {}
    done = {k for k in part_keys(results) if (parts.get(k) or {}).get("pretrained_commit") == latest}
    return [k for k in collections if k not in done], [c for c in lodo_candidates if f"lodo/{c}" not in done]
