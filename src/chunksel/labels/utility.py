"""Utility labels: the teacher LLM's utility-based selections as a label source.

The distillation step of the utility-selection paper: a teacher LLM selects the useful
candidates of each question (:meth:`chunksel.llm.listwise.ListwiseLLM.select`: the
single-call pseudo-answer + selection prompt, front-to-back windows, dynamic k, repairs
counted; the local backend reads the selection from log-probabilities, see that module),
and the selections become the label source ``utility`` (1 = selected, 0 = not) that the
small selectors train on with ``--label utility``, like the judge's ``semantic`` labels.

The teacher's calls go through the response cache (a killed run resumes; a rerun is
free). The labels are persisted as a sidecar beside the dataset's instance stores, in the
judge's row format (:class:`~chunksel.data.label_sidecars.JudgeRow`; ``p_yes`` is
``None``, ``parsed`` is false for a question whose teacher call failed or whose output
had no readable selection: such a question fails open to retrieval order in the
teacher's run and its rows say why, and ``summary()`` counts them as ``fallbacks``)::

    <cache>/instances/<dataset>/labels/utility@<teacher>.jsonl
    <cache>/instances/<dataset>/labels/utility@<teacher>.meta.json

and :func:`~chunksel.data.label_sidecars.attach_sidecar_labels` puts them back on loaded
instances as ``utility@<teacher>`` and ``utility``.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chunksel.data.label_sidecars import JudgeRow, apply_row, labels_dir, merge_sidecar
from chunksel.labels.judge import judge_key
from chunksel.llm.listwise import UTILITY_TEMPLATE, ListwiseLLM, ListwiseRun
from chunksel.types import Instance

#: the label source the utility teacher writes
UTILITY_SOURCE = "utility"


@dataclass
class UtilityLabels:
    """What :func:`label_instances` returns.

    Attributes:
        teacher: ``<backend>/<model id>``.
        key: the file-safe teacher name (the sidecar's name).
        rows: one row per (question, candidate).
        runs: the teacher's :class:`~chunksel.llm.listwise.ListwiseRun` per question.
        seconds: wall time (cache reads included).
    """

    teacher: str
    key: str
    rows: list[JudgeRow]
    runs: list[ListwiseRun] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        """Questions, positives, empty selections, calls, tokens, seconds and repairs."""
        runs = self.runs
        return {
            "questions": len(runs), "pairs": len(self.rows), "positive": sum(r.label for r in self.rows),
            "empty_selections": sum(r.empty for r in runs),
            "fallbacks": sum(r.fallback is not None for r in runs),
            "calls": sum(r.calls for r in runs), "cached_calls": sum(r.cached for r in runs),
            "prompt_tokens": sum(r.prompt_tokens for r in runs),
            "llm_seconds": round(sum(r.seconds for r in runs), 2),
            "repairs": sum(r.repairs.total() for r in runs),
            "text_repairs": sum(r.text_repairs.total() for r in runs),
        }


def label_instances(
    instances: Sequence[Instance],
    backend: Any,
    *,
    read: str | None = None,
    window: int = 20,
    carry: int = 10,
    max_new_tokens: int = 128,
    max_passage_words: int | None = 120,
    cache: str | os.PathLike | None = None,
    progress: bool = True,
) -> UtilityLabels:
    """Run the utility teacher on every instance and put the ``utility`` labels on the
    candidates (in place; see the module docstring).

    Raises:
        DataError: a question with empty text or an instance without candidates.
    """
    from tqdm.auto import tqdm

    from chunksel.config import show_progress

    t0 = time.perf_counter()
    llm = ListwiseLLM(backend, window=window, carry=carry, read=read, max_new_tokens=max_new_tokens,
                      max_passage_words=max_passage_words, cache=cache)
    teacher = f"{backend.name}/{backend.model_id}"
    key = judge_key(backend.name, backend.model_id)
    rows: list[JudgeRow] = []
    runs: list[ListwiseRun] = []
    questions = [(inst.id, inst.question.text, [c.text for c in inst.candidates],
                  [c.id for c in inst.candidates], [c.title for c in inst.candidates]) for inst in instances]
    bar = tqdm(total=len(questions), desc="utility teacher", unit="q", disable=not show_progress(progress))
    try:  # questions concurrently, up to the backend's max_concurrency
        runs = llm.run_many("utility", questions, progress=lambda _run: bar.update(1))
    finally:
        bar.close()
        llm.close()
    for inst, run in zip(instances, runs, strict=True):
        chosen = set(run.order)
        for j, cand in enumerate(inst.candidates):
            if run.fallback:  # no teacher decision: not a label, and the row says why
                row = JudgeRow(inst.id, cand.id, 0, None, parsed=False, reason=f"teacher fell back: {run.fallback}"[:300])
            else:
                row = JudgeRow(inst.id, cand.id, int(j in chosen), None, parsed=True)
            rows.append(row)
            apply_row(cand, row, key, teacher, plain=True, source=UTILITY_SOURCE)
    return UtilityLabels(teacher, key, rows, runs, time.perf_counter() - t0)


def write_sidecar(store: str | os.PathLike, result: UtilityLabels) -> Path:
    """Merge ``result``'s rows into the teacher's ``utility`` sidecar beside ``store``
    (atomic; rows of other pairs kept, a pair labelled again replaced)."""
    path = labels_dir(store) / f"{UTILITY_SOURCE}@{result.key}.jsonl"
    return merge_sidecar(path, result.rows, {
        "source": UTILITY_SOURCE, "judge": result.teacher, "key": result.key,
        "template": hashlib.sha256(UTILITY_TEMPLATE.encode()).hexdigest()[:12],
        "last_run": result.summary(), "written": round(time.time(), 3),
    })


__all__ = ["UTILITY_SOURCE", "UtilityLabels", "label_instances", "write_sidecar"]
