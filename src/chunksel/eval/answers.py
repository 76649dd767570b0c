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

**KV reuse** (:mod:`chunksel.features.kv`): the question-only warm-up pass runs once per
question (it is the pass that gives the selector its features); every generation
continues from a copy of its KV cache cropped to the longest common token prefix, so only
the chunk(s) and the closing template tokens are prefilled. The "no context" condition's
prompt *is* the warm-up prompt, so it prefills a single token. Per answer the module
records the prefilled tokens, the **time to first token** (TTFT: the prefill forward pass,
logits of the last position only, and the first argmax, from a cache already in memory) and the **peak memory**: the
growth of the process's peak resident set (``VmHWM`` of ``/proc/self/status``, reset
through ``/proc/self/clear_refs`` before each answer, minus ``VmRSS`` before it; torch's
CPU tensors are invisible to tracemalloc, so RSS it is). Without ``/proc`` (not Linux)
the memory figures are ``None``. The KV-reuse saving is measured on the same pairs: the
TTFT of a fresh prefill of the whole generation prompt, no cache, against the TTFT with
reuse.

**Cache**: answers are appended to a small JSONL file per (generator, settings) under
``<cache>/answers/``; a (question, chunk ids) pair is generated once, so selectors that
pick the same chunk share the answer, and a killed run resumes. A record whose prompt
tokens changed is recomputed.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import string
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.config import cache_root, config_hash, show_progress
from chunksel.errors import DataError
from chunksel.labels.answers import answer_accuracy, exact_match, normalize_answer, token_f1  # noqa: F401
from chunksel.types import Instance

#: the reference conditions :func:`answer_table` adds beside the selectors' picks
REFERENCE_CONDITIONS = ("no_context", "top1", "top5", "oracle")
#: separator between several chosen chunks inside the generation prompt's chunk part
CHUNK_JOIN = "\n\n"
#: version of the answer records' definition (part of the cache key)
ANSWER_VERSION = 2  # 2: logits of the last position only (TTFT and memory as a runtime would)

_PUNCT = frozenset(string.punctuation)


# ---------------------------------------------------------------- memory
def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def reset_peak_rss() -> bool:
    """Reset the process's peak RSS (VmHWM) to its current RSS (Linux >= 4.0); False where
    not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


# ---------------------------------------------------------------- generation
@dataclass
class Answer:
    """One generated answer and its costs.

    Attributes:
        text: the answer (special tokens removed).
        tokens_out: generated tokens (end of sequence excluded).
        prompt_tokens: generation-prompt length.
        prefill_tokens: tokens prefilled (prompt minus those reused from the warm-up).
        ttft_ms: time to first token with KV reuse.
        ttft_ms_noreuse: TTFT of a fresh prefill of the whole prompt (``None`` if not measured).
        first_token_agrees: the fresh prefill's first token equals the reused one's.
        peak_rss_mb: peak resident-set growth during the answer (``None`` without /proc).
        seconds: wall time of the whole answer.
        prompt: a hash of the prompt token ids (the cache checks it).
    """

    text: str
    tokens_out: int
    prompt_tokens: int
    prefill_tokens: int
    ttft_ms: float
    ttft_ms_noreuse: float | None
    first_token_agrees: bool | None
    peak_rss_mb: float | None
    seconds: float
    prompt: str


def _ids_hash(ids: Sequence[int]) -> str:
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:16]


class Generator:
    """The local generator with KV reuse from the question-only warm-up pass.

    Args:
        generator: a :class:`~chunksel.llm.local.LocalBackend` (its loaded model is used),
            a model folder / ``.gguf`` path, or ``None`` for SmolLM2-135M-Instruct.
        max_new_tokens: the answer budget (greedy decoding).
    """

    def __init__(self, generator: Any = None, max_new_tokens: int = 32) -> None:
        if max_new_tokens < 1:
            raise DataError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if generator is not None and hasattr(generator, "model") and hasattr(generator, "tokenizer"):
            self.model, self.tokenizer, self.model_id = generator.model, generator.tokenizer, generator.model_id
        else:
            from chunksel.llm.models import load_generator

            self.model, self.tokenizer, self.model_id = load_generator(generator)
        self.max_new_tokens = max_new_tokens
        self.calls = 0  # answers actually generated (cache misses)
        self._warm: tuple[str, Any] | None = None

    def prompt_ids(self, question: str, chunks: Sequence[str]) -> list[int]:
        """The generation prompt's ids: the question-only prompt without chunks, else
        question then the chunks joined by :data:`CHUNK_JOIN`."""
        from chunksel.llm.prompts import generation_prompt_ids, question_prompt_ids

        if not chunks:
            return question_prompt_ids(self.tokenizer, question)
        return generation_prompt_ids(self.tokenizer, question, CHUNK_JOIN.join(c.strip() for c in chunks))

    def warm_up(self, question: str) -> Any:
        """The question's warm-up pass (kept for the next answers of the same question)."""
        from chunksel.features.kv import warm_up

        if self._warm is None or self._warm[0] != question:
            self._warm = (question, warm_up(self.model, self.tokenizer, question))
        return self._warm[1]

    def _greedy(self, ids: list[int], cache: Any, keep: int, max_new: int) -> tuple[list[int], float]:
        """Greedy decoding from ``ids[keep:]`` on ``cache`` (cropped to ``keep``):
        ``(new token ids, TTFT seconds)``."""
        import torch

        from chunksel.features.kv import _cache_name, _crop

        name = _cache_name()
        device = next(self.model.parameters()).device
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if cache is not None:
            _crop(cache, keep)
        out: list[int] = []
        ttft = 0.0
        with torch.inference_mode():
            step = torch.tensor([ids[keep:]], device=device)
            pos = keep
            t0 = time.perf_counter()
            for i in range(max_new):
                n = step.shape[1]
                kw = {name: cache} if cache is not None else {}
                res = self.model(input_ids=step, use_cache=True, logits_to_keep=1, **kw,
                                 position_ids=torch.arange(pos, pos + n, device=device)[None])
                cache = getattr(res, name)
                nxt = int(res.logits[0, -1].argmax())
                if i == 0:
                    ttft = time.perf_counter() - t0
                pos += n
                if eos is not None and nxt == eos:
                    break
                out.append(nxt)
                step = torch.tensor([[nxt]], device=device)
        return out, ttft

    def answer(self, question: str, chunks: Sequence[str], measure_noreuse: bool = True) -> Answer:
        """Generate one answer with KV reuse (and, when asked, time a fresh prefill too)."""
        from chunksel.features.kv import common_prefix

        t_start = time.perf_counter()
        warm = self.warm_up(question)
        ids = self.prompt_ids(question, chunks)
        keep = min(common_prefix(warm.ids, ids), len(ids) - 1)
        cache = copy.deepcopy(warm.cache)
        rss0 = _status_kb("VmRSS")
        peak_ok = reset_peak_rss()
        toks, ttft = self._greedy(ids, cache, keep, self.max_new_tokens)
        hwm = _status_kb("VmHWM")
        peak = (hwm - rss0) / 1024 if peak_ok and hwm is not None and rss0 is not None else None
        del cache
        seconds = time.perf_counter() - t_start
        fresh_ms, agrees = None, None
        if measure_noreuse:
            first, t_fresh = self._greedy(ids, None, 0, 1)
            fresh_ms = 1000 * t_fresh
            agrees = (first[:1] == toks[:1])
        self.calls += 1
        return Answer(
            text=self.tokenizer.decode(toks, skip_special_tokens=True).strip(), tokens_out=len(toks),
            prompt_tokens=len(ids), prefill_tokens=len(ids) - keep, ttft_ms=1000 * ttft,
            ttft_ms_noreuse=fresh_ms, first_token_agrees=agrees,
            peak_rss_mb=None if peak is None else max(0.0, peak), seconds=seconds, prompt=_ids_hash(ids),
        )


class AnswerCache:
    """Append-only JSONL of answers keyed by ``question id::chunk ids`` (see module doc).

    A torn last line (a killed writer) is ignored on reading and cut off on the next write.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.records: dict[str, dict[str, Any]] = {}
        if self.path.is_file():
            data = self.path.read_bytes()
            end = data.rfind(b"\n") + 1
            if end < len(data):
                with open(self.path, "r+b") as fh:
                    fh.truncate(end)
            for line in data[:end].splitlines():
                try:
                    rec = json.loads(line)
                    self.records[str(rec["key"])] = rec
                except (ValueError, KeyError, TypeError):
                    continue

    @classmethod
    def for_generator(cls, model_id: str, max_new_tokens: int, cache: str | os.PathLike | None = None) -> AnswerCache:
        """The cache file of one generator and its settings."""
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model_id)
        key = config_hash({"model": model_id, "max_new_tokens": max_new_tokens, "join": CHUNK_JOIN,
                           "version": ANSWER_VERSION})
        return cls(cache_root(cache) / "answers" / slug / f"answers-{key}.jsonl")

    def get(self, key: str) -> dict[str, Any] | None:
        return self.records.get(key)

    def put(self, key: str, answer: Answer) -> None:
        rec = {"key": key, **asdict(answer)}
        line = (json.dumps(rec, ensure_ascii=False) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        self.records[key] = rec


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
            if rec is not None and rec.get("prompt") == _ids_hash(gen.prompt_ids(inst.question.text, chunks)):
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


__all__ = [
    "REFERENCE_CONDITIONS", "Answer", "AnswerCache", "Generator", "answer_accuracy", "answer_table",
    "exact_match",
    "normalize_answer", "reference_picks", "sample_instances", "token_f1",
]
