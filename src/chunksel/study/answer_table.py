"""Answer-level evaluation: generate from the question and the chosen chunk(s), score EM / F1.

Rank-1 accuracy says whether a selector picked a positive chunk; this module asks what the
generator then answers. For each condition (a selector's pick, or a reference condition)
and each question of a sample, the local generator answers greedily (at most
``max_new_tokens``) from the generation prompt of :mod:`chunksel.llm.prompts`: the
question first, then the chosen chunk(s) (several joined by a blank line, in the order
given), one user turn. The answer is scored against every reference alias:

- **exact match** (EM): SQuAD normalisation (lower case, punctuation and the articles
  a/an/the removed, whitespace collapsed; Rajpurkar et al., 2016), 1 if the normalised
  answer equals a normalised alias, max over the aliases;
- **token F1**: the harmonic mean of token precision and recall between the normalised
  answer and an alias (bag of tokens), max over the aliases;
- **answer accuracy** (``acc``, the "match" metric of PopQA / Self-RAG for generators that
  answer in sentences): 1 if a normalised alias occurs as a whole token sequence inside
  the normalised answer;
- **regex answers** (``Question.answer_type == "regex"``, CuratedTREC): EM is 1 when a
  pattern matches at the start of the answer (``re.match``, case-insensitive; DrQA's
  ``regex_match_score``); F1 is the token F1 between the answer and the first span a
  pattern finds anywhere in it (``re.search``), 0 when none does; ``acc`` is 1 when a
  pattern is found anywhere.

Generation goes through :class:`chunksel.features.generation.Generator` (KV reuse from the
question's warm-up pass, TTFT and peak memory per answer); the KV-reuse saving is measured
on the same pairs: the TTFT of a fresh prefill of the whole generation prompt, no cache,
against the TTFT with reuse. Answers are cached (:class:`~chunksel.features.generation.AnswerCache`):
a (question, chunk ids) pair is generated once, so selectors that pick the same chunk
share the answer; a record whose prompt tokens changed is recomputed.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from chunksel.config import show_progress
from chunksel.errors import DataError
from chunksel.features.generation import Answer, AnswerCache, Generator, ids_hash  # noqa: F401
from chunksel.labels.answers import answer_accuracy, exact_match, normalize_answer, token_f1  # noqa: F401
from chunksel.types import Instance

#: the reference conditions :func:`answer_table` adds beside the selectors' picks
REFERENCE_CONDITIONS = ("no_context", "top1", "top5", "oracle")


# ---------------------------------------------------------------- the table
def sample_instances(instances: Sequence[Instance], sample: int | None) -> list[int]:
    """Indices of a deterministic sample: the ``sample`` instances with the smallest
    sha256 of their question id (all when ``None``), in input order."""
    idx = list(range(len(instances)))
    if sample is None or sample >= len(idx):
        return idx
    if sample < 1:
        raise DataError(f"sample must be >= 1, got {sample}")
    keep = sorted(idx, key=lambda i: hashlib.sha256(instances[i].id.encode()).hexdigest())[:sample]
    return sorted(keep)


def reference_picks(instances: Sequence[Instance], label: str | None = None) -> dict[str, list[list[int]]]:
    """The reference conditions as picks: ``no_context`` (no chunk), ``top1``, ``top5``
    (every candidate up to 5, retrieval order) and ``oracle`` (the best-ranked positive
    under ``label``, default each instance's spec; the top-1 where none is positive)."""
    oracle = []
    for inst in instances:
        pos = np.flatnonzero(inst.labels(label))
        oracle.append([int(pos[0])] if len(pos) else [0])
    return {
        "no_context": [[] for _ in instances],
        "top1": [[0] if inst.candidates else [] for inst in instances],
        "top5": [list(range(min(5, len(inst.candidates)))) for inst in instances],
        "oracle": oracle,
    }


def _interval(values: Sequence[float], seed: int) -> dict[str, float]:
    from chunksel.eval.significance import bootstrap_interval

    mean, lo, hi = bootstrap_interval(np.asarray(values, dtype=float), n_resamples=10_000, seed=seed)
    return {"mean": round(mean, 4), "lo": round(lo, 4), "hi": round(hi, 4)}


def _mean(xs: Sequence[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return round(float(np.mean(v)), 3) if v else None


def answer_table(
    instances: Sequence[Instance],
    picks: Mapping[str, Sequence[Sequence[int]]],
    generator: Any = None,
    sample: int | None = None,
    *,
    references: Sequence[str] = REFERENCE_CONDITIONS,
    label: str | None = None,
    max_new_tokens: int = 32,
    noreuse_pairs: int | None = None,
    cache: str | os.PathLike | None = None,
    seed: int = 0,
    progress: bool = True,
    keep_answers: bool = True,
    abstain: Mapping[str, Sequence[bool]] | None = None,
) -> dict[str, Any]:
    """Answer quality and cost per condition: the selectors' picks and the references.

    Args:
        instances: the evaluated instances (e.g. a test split).
        picks: selector name -> one list of chosen candidate indices per instance,
            aligned with ``instances`` (``Selection.indices``; several = all in the prompt).
        generator: a :class:`~chunksel.llm.local.LocalBackend`, a model path, ``None``
            (SmolLM2), or a ready :class:`Generator`.
        sample: evaluate a deterministic sample of this many instances
            (:func:`sample_instances`); ``None``: all.
        references: reference conditions to add (:data:`REFERENCE_CONDITIONS`); a
            selector named like one replaces it.
        label: label spec of the oracle (default: each instance's).
        max_new_tokens: answer budget.
        noreuse_pairs: how many distinct generated pairs also get a fresh, no-reuse
            prefill timed (``None``: all). Cached answers keep what they measured.
        cache: cache root (answers go to ``<cache>/answers/``).
        seed: bootstrap seed.
        progress: a progress bar over the distinct pairs.
        keep_answers: include every answer with its scores under ``"answers"``.
        abstain: selector name -> one flag per instance: the selector abstained there
            (``k="auto"`` kept no chunk), so the pipeline answers "I don't know" and
            generates nothing (:func:`idk_row`).

    Returns:
        A JSON-ready dict::

            {
              "generator": str, "max_new_tokens": int, "questions": int,
              "question_ids": [str],               # the sample, in input order
              "conditions": {name: {
                  "em": {"mean", "lo", "hi"},       # fraction, 95% percentile bootstrap
                  "f1": {"mean", "lo", "hi"},       #   (10,000 resamples, seed)
                  "acc": {"mean", "lo", "hi"},      # alias inside the answer
                  "chunks": float,                  # mean chunks in the prompt
                  "prompt_tokens": float,           # mean generation-prompt length
                  "prefill_tokens": float,          # mean tokens prefilled with KV reuse
                  "ttft_ms": float, "ttft_ms_p50": float,   # with KV reuse
                  "peak_rss_mb": float | None,      # mean peak-RSS growth per answer
                  "answer_tokens": float,
                  "answerable": {"questions", "em", "f1", "acc"},  # same, on the questions
                                                    #   with a positive candidate (label)
                  "oracle_fallback": int,           # only "oracle": questions w/o positive
              }},
              "kv_reuse": {"pairs", "ttft_ms_reuse", "ttft_ms_noreuse", "saving_ms",
                           "saving_pct", "prefill_tokens_reuse", "prefill_tokens_full",
                           "first_token_agrees"},   # same pairs, means
              "cache": {"pairs": distinct pairs, "generated": new this call, "cached": hits,
                        "path": str},
              "memory": str,                        # how peak memory is measured
              "answers": {name: [{"id", "pick", "answer", "em", "f1", "acc"}]},  # keep_answers
              "abstention": {name: idk_row(...)},   # the selectors given in ``abstain``
            }

    Raises:
        DataError: a pick list of the wrong length or an index out of range.
    """
    from tqdm.auto import tqdm

    n = len(instances)
    conds: dict[str, Sequence[Sequence[int]]] = {}
    refs = reference_picks(instances, label)
    for r in references:
        if r not in refs:
            raise DataError(f"unknown reference condition {r!r}; known: {', '.join(refs)}")
        conds[r] = refs[r]
    for name, rows in picks.items():
        if len(rows) != n:
            raise DataError(f"picks[{name!r}] has {len(rows)} rows for {n} instances")
        conds[name] = rows
    chosen = sample_instances(instances, sample)
    for name, rows in conds.items():
        for i in chosen:
            for j in rows[i]:
                if not 0 <= int(j) < len(instances[i].candidates):
                    raise DataError(f"picks[{name!r}] of {instances[i].id!r}: index {j} out of range")
    gen = generator if isinstance(generator, Generator) else Generator(generator, max_new_tokens)
    store = AnswerCache.for_generator(gen.model_id, gen.max_new_tokens, cache)

    def key(i: int, pick: Sequence[int]) -> str:
        inst = instances[i]
        return inst.id + "::" + "+".join(inst.candidates[int(j)].id for j in pick)

    todo: dict[str, tuple[int, list[int]]] = {}
    for rows in conds.values():
        for i in chosen:
            todo.setdefault(key(i, rows[i]), (i, [int(j) for j in rows[i]]))
    # group by question so one warm-up serves all of its pairs
    order = sorted(todo, key=lambda k: (todo[k][0], len(todo[k][1])))
    generated, hits, timed = 0, 0, 0
    results: dict[str, dict[str, Any]] = {}
    bar = tqdm(total=len(order), desc="answers", unit="pair", disable=not show_progress(progress))
    try:
        for k in order:
            i, pick = todo[k]
            inst = instances[i]
            chunks = [inst.candidates[j].text for j in pick]
            rec = store.get(k)
            if rec is not None and rec.get("prompt") == ids_hash(gen.prompt_ids(inst.question.text, chunks)):
                hits += 1
            else:
                measure = noreuse_pairs is None or timed < noreuse_pairs
                ans = gen.answer(inst.question.text, chunks, measure_noreuse=measure)
                timed += measure
                store.put(k, ans)
                rec = store.get(k)
                generated += 1
            results[k] = rec
            bar.update(1)
    finally:
        bar.close()

    out: dict[str, Any] = {
        "generator": gen.model_id, "max_new_tokens": gen.max_new_tokens, "questions": len(chosen),
        "question_ids": [instances[i].id for i in chosen], "conditions": {},
        "memory": "peak RSS growth per answer: VmHWM (reset via /proc/self/clear_refs) minus VmRSS "
                  "before, in MiB; covers the KV cache copy, activations and allocator growth",
    }
    answers: dict[str, list[dict[str, Any]]] = {}
    scored: dict[str, tuple[list[float], list[float], list[float], list[dict[str, Any]]]] = {}
    for name, rows in conds.items():
        em, f1, acc, recs, listing = [], [], [], [], []
        for i in chosen:
            q = instances[i].question
            rec = results[key(i, rows[i])]
            e = exact_match(rec["text"], q.answers, q.answer_type)
            f = token_f1(rec["text"], q.answers, q.answer_type)
            a = answer_accuracy(rec["text"], q.answers, q.answer_type)
            em.append(e)
            f1.append(f)
            acc.append(a)
            recs.append(rec)
            listing.append({"id": q.id, "pick": [int(j) for j in rows[i]], "answer": rec["text"],
                            "em": e, "f1": round(f, 4), "acc": a})
        entry = {
            "em": _interval(em, seed), "f1": _interval(f1, seed), "acc": _interval(acc, seed),
            "chunks": _mean([len(rows[i]) for i in chosen]),
            "prompt_tokens": _mean([r["prompt_tokens"] for r in recs]),
            "prefill_tokens": _mean([r["prefill_tokens"] for r in recs]),
            "ttft_ms": _mean([r["ttft_ms"] for r in recs]),
            "ttft_ms_p50": round(float(np.median([r["ttft_ms"] for r in recs])), 3) if recs else None,
            "peak_rss_mb": _mean([r["peak_rss_mb"] for r in recs]),
            "answer_tokens": _mean([r["tokens_out"] for r in recs]),
        }
        ans_rows = [n for n, i in enumerate(chosen) if instances[i].answerable(label)]
        if ans_rows:  # the questions with a positive candidate, where the pick can matter
            entry["answerable"] = {
                "questions": len(ans_rows),
                **{m: _interval([v[n] for n in ans_rows], seed) for m, v in (("em", em), ("f1", f1), ("acc", acc))},
            }
        if name == "oracle" and "oracle" not in picks:
            entry["oracle_fallback"] = sum(not instances[i].answerable(label) for i in chosen)
        out["conditions"][name] = entry
        answers[name] = listing
        scored[name] = (em, f1, acc, recs)
    for name, flags in (abstain or {}).items():
        if name not in scored:
            continue
        if len(flags) != n:
            raise DataError(f"abstain[{name!r}] has {len(flags)} flags for {n} instances")
        em, f1, acc, recs = scored[name]
        out.setdefault("abstention", {})[name] = idk_row(
            [bool(flags[i]) for i in chosen], em, f1, acc, [r["prefill_tokens"] for r in recs],
            [instances[i].answerable(label) for i in chosen], seed)
    both = [r for r in results.values() if r.get("ttft_ms_noreuse") is not None]
    if both:
        reuse = float(np.mean([r["ttft_ms"] for r in both]))
        fresh = float(np.mean([r["ttft_ms_noreuse"] for r in both]))
        out["kv_reuse"] = {
            "pairs": len(both), "ttft_ms_reuse": round(reuse, 3), "ttft_ms_noreuse": round(fresh, 3),
            "saving_ms": round(fresh - reuse, 3),
            "saving_pct": round(100 * (fresh - reuse) / fresh, 2) if fresh > 0 else None,
            "prefill_tokens_reuse": _mean([r["prefill_tokens"] for r in both]),
            "prefill_tokens_full": _mean([r["prompt_tokens"] for r in both]),
            "first_token_agrees": _mean([float(bool(r["first_token_agrees"])) for r in both]),
        }
    out["cache"] = {"pairs": len(order), "generated": generated, "cached": hits, "path": str(store.path)}
    if keep_answers:
        out["answers"] = answers
    return out


def idk_row(abstained: Sequence[bool], em: Sequence[float], f1: Sequence[float], acc: Sequence[float],
            prefill: Sequence[float | None], answerable: Sequence[bool], seed: int = 0) -> dict[str, Any]:
    """Table 4's "I don't know" row of one selector: where it abstained the pipeline
    answers "I don't know" and prefills nothing; elsewhere its answer stands.

    Returns ``{"questions", "answered", "coverage", "em", "f1", "acc"`` (intervals over the
    answered questions), ``"f1_all"`` (every question, "I don't know" scoring 0: the
    plain row's F1 minus what abstaining lost), ``"abstained_answerable"``,
    ``"abstained_unanswerable"`` (abstentions on questions with / without a positive
    candidate), ``"abstained_correct"`` (abstained where the answer would have matched,
    ``acc``), ``"prefill_tokens"`` (mean per question, none where it abstained) and
    ``"prefill_saved_pct"`` (against answering every question)}``."""
    keep = [k for k, a in enumerate(abstained) if not a]
    gone = [k for k, a in enumerate(abstained) if a]
    pre = [float(p or 0.0) for p in prefill]
    total = sum(pre)
    out: dict[str, Any] = {
        "questions": len(abstained), "answered": len(keep),
        "coverage": round(len(keep) / len(abstained), 4) if abstained else None,
        "f1_all": _interval([f1[k] if not abstained[k] else 0.0 for k in range(len(abstained))], seed),
        "abstained_answerable": sum(1 for k in gone if answerable[k]),
        "abstained_unanswerable": sum(1 for k in gone if not answerable[k]),
        "abstained_correct": int(sum(acc[k] for k in gone)),
        "prefill_tokens": round(sum(pre[k] for k in keep) / len(abstained), 3) if abstained else None,
        "prefill_saved_pct": round(100 * sum(pre[k] for k in gone) / total, 2) if total > 0 else None,
    }
    for m, v in (("em", em), ("f1", f1), ("acc", acc)):
        out[m] = _interval([v[k] for k in keep], seed) if keep else None
    return out


__all__ = [
    "REFERENCE_CONDITIONS", "Answer", "AnswerCache", "Generator", "answer_accuracy", "answer_table", "idk_row",
    "exact_match",
    "normalize_answer", "reference_picks", "sample_instances", "token_f1",
]
