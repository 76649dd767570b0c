"""Semantic support labels from an LLM judge (the chunk-selection paper, Sec. 4.1).

Every (question, candidate) pair is put to a judge LLM with the paper's prompt
(:data:`JUDGE_PROMPT`, verbatim) and read as a fixed-option decision,
``backend.choose(prompt, ["Yes", "No"])``: a backend with log-probabilities (the local
model, a server returning ``logprobs``) picks the more likely answer, a server without
them has its text parsed (an output naming neither option is **recorded** as unparsed and
labelled ``No``, never dropped).

Results go to the candidates as the label source ``semantic`` (1 = the chunk holds
enough evidence, 0 = not) and to ``Candidate.meta``: ``semantic_p_yes`` (the Yes
probability renormalised over Yes/No; ``None`` when the choice was parsed from text),
``semantic_judge`` (``backend/model``) and, for an unparsed output,
``semantic_unparsed`` (the reason).

Calls go through :func:`chunksel.llm.cache.map_cached` (item id ``question id`` +
``"::"`` + ``candidate id``), so a killed run resumes where it stopped and a re-run is
free. The labels are then persisted as a **sidecar** of the dataset's instance stores::

    <cache>/instances/<dataset>/labels/semantic@<judge>.jsonl      one row per pair
    <cache>/instances/<dataset>/labels/semantic@<judge>.meta.json  judge, template, counts

where ``<judge>`` is ``<backend>-<model id>`` made file-safe. A row is keyed by question
and candidate id, so it serves every store of the dataset (``--limit 500`` is a subset of
``--limit 3000``; the flat and IVF-PQ indexes share most candidates); a later run merges
its rows into the file. :func:`attach_sidecar_labels` (called by
:func:`chunksel.data.instances.load_instances` and by ``build_instances``) puts them
back on the candidates: each judge's labels as the source ``semantic@<judge>``, and the
plain ``semantic`` from the only judge (or, with several, the most recently written
one, with a warning), so ``--label semantic`` works wherever a label spec does.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chunksel.data.label_sidecars import (  # noqa: F401  (the judge's sidecar format, re-exported)
    LABELS_DIR,
    SOURCE,
    JudgeRow,
    apply_row,
    attach_sidecar_labels,
    labels_dir,
    merge_sidecar,
    missing_labels,
    read_sidecar,
    sidecar_files,
)
from chunksel.errors import DataError
from chunksel.types import Candidate, Instance

#: the paper's judge prompt (Sec. 4.1), verbatim, typographic apostrophes included
JUDGE_PROMPT = (
    "Can you find the evidence in the context to answer the question?\n"
    "Answer only with Yes/No. Don\u2019t use any external tool. Don\u2019t search\n"
    "on web. Only based on context, don\u2019t infer.\n"
    "Question: {question}\n"
    "Context: {context}"
)
#: the judge's fixed answers; the first one is the positive label
JUDGE_OPTIONS = ("Yes", "No")
#: the answer an unparseable text output falls back to (it is recorded as unparsed)
JUDGE_DEFAULT = "No"
#: the label source the judge writes
def judge_prompt(question: str, context: str) -> str:
    """The judge prompt for one pair: :data:`JUDGE_PROMPT` with both fields filled.

    Args:
        question: the question text.
        context: the candidate chunk's text (its title is not added: the paper judges
            the chunk as retrieved, and answer containment reads the text alone too).

    Raises:
        DataError: an empty question.
    """
    if not question or not question.strip():
        raise DataError("empty question text: the judge prompt needs a question")
    return JUDGE_PROMPT.format(question=question.strip(), context=(context or "").strip())


def pair_id(instance: Instance, candidate: Candidate) -> str:
    """The response-cache item id of one pair: ``question id::candidate id``."""
    return f"{instance.question.id}::{candidate.id}"


def judge_key(backend_name: str, model_id: str) -> str:
    """A file-safe name of a judge: ``<backend>-<model id>`` (long or odd ids hashed)."""
    raw = f"{backend_name}-{model_id}"
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", raw).strip("._") or "judge"
    if safe != raw or len(safe) > 100:
        safe = f"{safe[:80]}-{hashlib.sha256(raw.encode()).hexdigest()[:8]}"
    return safe


@dataclass
class JudgeResult:
    """What :func:`label_instances` returns.

    Attributes:
        judge: ``<backend>/<model id>``.
        key: :func:`judge_key` of the judge (the sidecar's name).
        rows: one :class:`JudgeRow` per pair, in instance then candidate order.
        stats: the response cache's accounting (:class:`~chunksel.llm.cache.CacheStats`
            as a dict: hits, misses, calls, tokens, seconds).
        failures: unparsed outputs (item id, raw text, reason, default used).
        cache_path: the response-cache file.
        seconds: wall time of the call (cache reads included).
    """

    judge: str
    key: str
    rows: list[JudgeRow]
    stats: dict[str, Any]
    failures: list[dict[str, Any]] = field(default_factory=list)
    cache_path: Path | None = None
    seconds: float = 0.0

    @property
    def pairs_per_second(self) -> float:
        """Newly judged pairs per second of backend time (``nan`` with none new)."""
        s = self.stats.get("seconds", 0.0)
        n = self.stats.get("misses", 0)
        return n / s if n and s > 0 else float("nan")


def label_instances(
    instances: Sequence[Instance],
    backend: Any,
    *,
    batch_size: int = 8,
    cache: str | os.PathLike | None = None,
    fsync: bool = True,
    progress: bool = True,
) -> JudgeResult:
    """Judge every candidate of ``instances`` and store the ``semantic`` labels on them.

    Each pair's decision is ``backend.choose_many(prompts, ["Yes", "No"])`` through the
    response cache (see the module docstring); the candidates are updated in place:
    ``labels["semantic"]`` and ``labels["semantic@<judge>"]`` (1/0), and
    ``meta["semantic_p_yes"]``, ``meta["semantic_judge"]``, ``meta["semantic_unparsed"]``
    (only for outputs that named neither option; their label is 0).

    Args:
        instances: the instances (every real candidate is judged).
        backend: any :class:`~chunksel.llm.backends.LLMBackend`.
        batch_size: pairs per backend call; raised to the backend's ``max_concurrency``
            (an HTTP server's requests in flight) so a call fills every slot.
        cache: cache root (default ``$CHUNKSEL_CACHE``).
        fsync: ``fsync`` every cached answer.
        progress: a progress bar over the pairs not yet cached.

    Returns:
        A :class:`JudgeResult`.

    Raises:
        DataError: a question with empty text.
    """
    from chunksel.llm.cache import map_cached

    pairs = [(inst, c) for inst in instances for c in inst.candidates]
    t0 = time.perf_counter()
    mapped = map_cached(
        backend, pairs,
        prompt=lambda p: judge_prompt(p[0].question.text, p[1].text),
        item_id=lambda p: pair_id(*p),
        template=JUDGE_PROMPT, options=JUDGE_OPTIONS, default=JUDGE_DEFAULT,
        batch_size=max(batch_size, int(getattr(backend, "max_concurrency", 1) or 1)),
        cache=cache, fsync=fsync, progress=progress, desc=f"judge {backend.name}",
    )
    judge = f"{backend.name}/{backend.model_id}"
    key = judge_key(backend.name, backend.model_id)
    rows = []
    for (inst, cand), choice in zip(pairs, mapped.results, strict=True):
        probs = choice.probabilities()
        row = JudgeRow(
            question_id=inst.question.id, candidate_id=cand.id,
            label=int(choice.parsed and choice.option == JUDGE_OPTIONS[0]),
            p_yes=None if probs is None else float(probs[0]),
            parsed=bool(choice.parsed), reason=choice.reason, text=choice.text,
        )
        rows.append(row)
        apply_row(cand, row, key, judge, plain=True)
    return JudgeResult(judge=judge, key=key, rows=rows, stats=mapped.stats.to_dict(),
                       failures=list(mapped.failures), cache_path=mapped.cache_path,
                       seconds=time.perf_counter() - t0)


# --------------------------------------------------------------------- sidecar
def write_sidecar(store: str | os.PathLike, result: JudgeResult) -> Path:
    """Merge ``result``'s rows into the judge's sidecar file beside ``store`` (atomic).

    Rows already in the file for other pairs are kept; a pair judged again is replaced.

    Returns:
        The sidecar's path.
    """
    path = labels_dir(store) / f"{SOURCE}@{result.key}.jsonl"
    return merge_sidecar(path, result.rows, {
        "source": SOURCE, "judge": result.judge, "key": result.key,
        "template": hashlib.sha256(JUDGE_PROMPT.encode()).hexdigest()[:12],
        "options": list(JUDGE_OPTIONS),
        "response_cache": str(result.cache_path) if result.cache_path else None,
        "written": round(time.time(), 3),
    })


__all__ = [
    "JUDGE_DEFAULT", "JUDGE_OPTIONS", "JUDGE_PROMPT", "SOURCE", "JudgeResult", "JudgeRow",
    "attach_sidecar_labels", "judge_key", "judge_prompt", "label_instances", "labels_dir",
    "missing_labels", "pair_id", "read_sidecar", "sidecar_files", "write_sidecar",
]
