"""LLM passage selection of the utility-selection paper: listwise relevance ranking
(``rankgpt``) and utility-based selection with pseudo-answers and dynamic k (``utility``).

**Relevance ranking** (the paper's Sec. 3.1: "the relevance ranking prompt is the same as
Sun et al. (2023)"): the model sees the query and up to ``window`` numbered passages
(:func:`rank_prompt`) and writes a permutation, ``[2] > [1] > [3] ...``. Longer lists are
ranked with a **back-to-front sliding window** (:func:`rank_windows`, window 20, step 10):
the last ``window`` positions first, then the window moves ``step`` positions towards the
head, until it covers position 0, so the most relevant passages bubble to the front.

**Utility-based selection** (Sec. 3.1-3.2, Fig. 2-3): one call per window; the model first
writes a pseudo-answer (``Answer: ...``) from the passages, then its selection
(``My selection: [[i],[j],...]``) (:func:`utility_prompt`). The window moves **front to
back**: the first window is positions ``0..window-1``; the passages selected in a window
are prepended to the selected queue (earlier entries follow, duplicates removed); the next
window holds the first ``carry`` (10) passages of the queue followed by as many unseen
passages as fill the window (``window - carried``, so a small selection lets more unseen
passages in and fewer windows are needed). When every passage has been seen, the queue is
the selection: **dynamic k** = its length; an empty selection is a valid outcome and is
reported as such. A carried passage not selected again stays in the queue behind the new
selections (the paper prepends new selections to the queue; it never removes from it).

**Malformed outputs** are repaired, and every repair is counted (:class:`Repairs`):

- permutation: ids out of range and repeated ids dropped, missing ids appended in input
  order; an output with no id at all keeps the input order (``unparsed``);
- selection: ids out of range and repeated ids dropped; an output without
  ``My selection:`` gives an empty selection (``unparsed``); one without ``Answer:`` takes
  the text before the selection as the pseudo-answer (``no_answer``).

**How the decision is read** (``read``):

- ``"text"`` (the paper's method; default for HTTP servers): the generated text is parsed
  as above.
- ``"logprobs"`` (default for the local backend): a 135M model rarely writes a usable
  ``My selection`` list, so the selection is read from log-probabilities instead. The
  window's single-call prompt is still generated greedily (``max_new_tokens``) and its
  pseudo-answer kept (the text's own selection is parsed and its repairs are counted
  under ``text_repairs``, for the record); then every passage of the window is put to the
  model with the question and that pseudo-answer (:func:`keep_prompt`) as a fixed-option
  decision, ``backend.choose_many(prompts, ["Yes", "No"])``. A passage is kept when its
  log-odds ``log p(Yes) - log p(No)`` exceed those of a content-free passage (``"N/A"``)
  put to the model with the same question and pseudo-answer (contextual calibration, one
  more choice per window: SmolLM2-135M answers this prompt No at p(Yes) 0.2-0.45 for
  every passage, so the plain argmax would select nothing; ``calibrate=False`` uses the
  plain ``log p(Yes) > log p(No)``). Kept passages enter the queue in window order. So a
  small model always produces a valid selection, possibly empty. For ``rankgpt`` the local
  backend generates the permutation (``read="text"``) like any other backend; the repair
  rules make any output a valid ranking.

**Fail open**: a question whose backend call fails after its retries
(:class:`~chunksel.llm.backends.BackendError`), or whose text output has no readable
ranking or selection at all (``repairs.unparsed``), gets retrieval order (utility: every
passage, in retrieval order) and :attr:`ListwiseRun.fallback` says why; callers count
these, nothing ties silently. **Concurrency**: :meth:`ListwiseLLM.run_many` runs up to
the backend's ``max_concurrency`` questions at once (windows within a question stay in
order: each depends on the one before).

Every call goes through the append-only response cache
(:class:`chunksel.llm.cache.ResponseCache`) keyed by backend, model, template hash and an
item id made of the question id and the window's passage ids, so a rerun is free and a
killed run resumes at the first window not yet answered. Per query, :class:`ListwiseRun`
records the LLM calls, prompt tokens, generated tokens, seconds (backend time of the calls
made now, and of the cached ones when they were made), cache hits, windows and repairs.

Prompt texts: the paper's text does not print Figure 2's prompt, so the wording here is
this project's, built on what the paper states (numbered passages, the pseudo-answer first
as "Answer:", then "My selection: [[i],[j],...]"; the permutation format ``[2] > [1]``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from chunksel.errors import ConfigError, DataError
from chunksel.llm.backends import BackendError, Choice, Generation, LLMBackend, Prompt
from chunksel.llm.listwise_text import (
    CONTENT_FREE,
    KEEP_OPTIONS,
    KEEP_TEMPLATE,
    KEEP_USER,
    RANK_SYSTEM,
    RANK_TEMPLATE,
    RANK_USER,
    UTILITY_SYSTEM,
    UTILITY_TEMPLATE,
    UTILITY_USER,
    ParsedSelection,
    Repairs,
    check_question,
    keep_prompt,
    merge_queue,
    next_utility_window,
    parse_permutation,
    parse_selection,
    passage_text,
    plan_utility,
    rank_prompt,
    rank_windows,
    utility_prompt,
)

log = logging.getLogger(__name__)


# ------------------------------------------------------------------ running
@dataclass
class ListwiseRun:
    """One query's LLM selection and its costs.

    Attributes:
        question_id: the question's id.
        method: ``"rankgpt"`` or ``"utility"``.
        order: 0-based candidate positions: the ranking (rankgpt, every candidate) or the
            selection (utility, dynamic k; may be empty).
        k: ``len(order)`` for utility (the dynamic k), the list length for rankgpt.
        empty: utility selected nothing.
        windows: the positions each window saw.
        answers: utility pseudo-answers, one per window.
        calls: LLM prompts answered (generation and choice prompts, cached ones included).
        cached: of those, answered from the response cache.
        prompt_tokens: prompt tokens over every call.
        output_tokens: generated tokens.
        seconds: backend seconds over every call (cached calls count what they cost).
        wall_seconds: wall time of this run (cache reads make a rerun fast).
        repairs: repairs of the outputs the selection was read from.
        text_repairs: utility with ``read="logprobs"``: repairs the generated selection
            text would have needed (it is parsed, recorded, and not used).
        read: ``"text"`` or ``"logprobs"``.
        fallback: why this question fell back to retrieval order (the backend failed
            after its retries, or an output had no readable ranking or selection);
            ``None`` when the LLM's decision was used.
    """

    question_id: str
    method: str
    order: list[int]
    k: int
    empty: bool = False
    windows: list[list[int]] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    calls: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    wall_seconds: float = 0.0
    repairs: Repairs = field(default_factory=Repairs)
    text_repairs: Repairs = field(default_factory=Repairs)
    read: str = "text"
    fallback: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["repairs"] = self.repairs.to_dict()
        d["text_repairs"] = self.text_repairs.to_dict()
        return d


class _Calls:
    """Cached generate / choose calls of one backend, with per-run accounting."""

    def __init__(self, backend: LLMBackend, max_new_tokens: int, cache: Any, fsync: bool) -> None:
        self.backend = backend
        self.max_new_tokens = max_new_tokens
        self.cache = cache
        self.fsync = fsync
        self._stores: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _store(self, task: str, template: str, settings: dict[str, Any]) -> Any:
        from chunksel.llm.cache import ResponseCache

        key = task + template
        with self._lock:  # questions run in threads: one store per namespace
            if key not in self._stores:
                self._stores[key] = ResponseCache.for_backend(
                    self.backend, task=task, template=template, settings=settings,
                    cache=self.cache, fsync=self.fsync)
            return self._stores[key]

    def close(self) -> None:
        for s in self._stores.values():
            s.close()
        self._stores.clear()

    def _account(self, run: ListwiseRun, res: Generation | Choice, hit: bool) -> None:
        run.calls += 1
        run.cached += int(hit)
        run.prompt_tokens += res.tokens_in
        run.output_tokens += res.tokens_out
        run.seconds += res.seconds

    def generate(self, run: ListwiseRun, item: str, prompt: Prompt, template: str) -> Generation:
        from chunksel.llm.cache import prompt_hash

        store = self._store("generate", template,
                            {"max_new_tokens": self.max_new_tokens, "temperature": 0.0})
        h = prompt_hash(prompt)
        hit = store.get(item, h)
        if hit is None:
            hit_flag = False
            res = self.backend.generate([prompt], self.max_new_tokens, temperature=0.0)[0]
            store.put(item, h, res)
        else:
            hit_flag, res = True, hit
        self._account(run, res, hit_flag)
        return res  # type: ignore[return-value]

    def choose(self, run: ListwiseRun, items: Sequence[str], prompts: Sequence[Prompt],
               template: str, options: Sequence[str], default: str) -> list[Choice]:
        from chunksel.llm.cache import prompt_hash

        store = self._store("choose", template, {"options": list(options), "default": default})
        hashes = [prompt_hash(p) for p in prompts]
        out: list[Choice | None] = [store.get(i, h) for i, h in zip(items, hashes)]  # type: ignore[misc]
        hits = [o is not None for o in out]
        todo = [j for j, o in enumerate(out) if o is None]
        if todo:
            got = self.backend.choose_many([prompts[j] for j in todo], options, default=default)
            for j, res in zip(todo, got, strict=True):
                store.put(items[j], hashes[j], res)
                out[j] = res
        for res, hit in zip(out, hits):
            self._account(run, res, hit)  # type: ignore[arg-type]
        return out  # type: ignore[return-value]


def _margin(choice: Choice) -> float:
    """``log p(Yes) - log p(No)`` of a keep/skip choice (+-inf-safe; text choices: +-1)."""
    if choice.logprobs is None:
        return 1.0 if choice.option == KEEP_OPTIONS[0] else -1.0
    yes, no = choice.logprobs
    if yes == no:
        return 0.0
    return yes - no if math.isfinite(yes) and math.isfinite(no) else (math.inf if yes > no else -math.inf)


def _ids_key(question_id: str, ids: Sequence[str]) -> str:
    digest = hashlib.sha256("\x1f".join(ids).encode()).hexdigest()[:16]
    return f"{question_id}::{len(ids)}::{digest}"


def _check_inputs(question: str, passages: Sequence[str], ids: Sequence[str]) -> None:
    check_question(question)
    if not passages:
        raise DataError("no candidate passages: LLM selection needs at least one")
    if len(ids) != len(passages):
        raise DataError(f"{len(ids)} passage ids for {len(passages)} passages")
    if len(set(ids)) != len(ids):
        raise DataError("passage ids must be distinct")


class ListwiseLLM:
    """Runs ``rankgpt`` and ``utility`` for one backend (see the module docstring).

    Args:
        backend: any :class:`~chunksel.llm.backends.LLMBackend`.
        window: passages per call (20).
        step: rankgpt's window step (10).
        carry: utility: queue passages carried into the next window (10).
        read: ``"text"``, ``"logprobs"`` (utility only) or ``None``: ``"logprobs"`` for
            the local backend, ``"text"`` otherwise.
        max_new_tokens: generation budget per call (rankgpt: the permutation; utility:
            pseudo-answer and selection).
        max_passage_words: each passage is cut to this many words in the prompt.
        calibrate: ``read="logprobs"``: keep a passage when its Yes-No log-odds exceed
            those of the content-free passage ``"N/A"`` under the same question and
            pseudo-answer (one more choice per window), instead of exceeding 0.
        cache: response-cache root (default ``$CHUNKSEL_CACHE``).
        fsync: ``fsync`` every cached answer.
    """

    def __init__(self, backend: LLMBackend, *, window: int = 20, step: int = 10, carry: int = 10,
                 read: str | None = None, max_new_tokens: int = 128, max_passage_words: int | None = 120,
                 calibrate: bool = True, cache: Any = None, fsync: bool = True) -> None:
        if read not in (None, "text", "logprobs"):
            raise ConfigError(f"read must be 'text' or 'logprobs', got {read!r}")
        rank_windows(1, window, step)  # validates window/step
        next_utility_window([], 0, 1, window, carry)  # validates window/carry
        if max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        self.backend = backend
        self.window, self.step, self.carry = window, step, carry
        self.read = read or ("logprobs" if getattr(backend, "name", "") == "local" else "text")
        self.max_new_tokens = max_new_tokens
        self.max_passage_words = max_passage_words
        self.calibrate = calibrate
        self._calls = _Calls(backend, max_new_tokens, cache, fsync)

    def close(self) -> None:
        """Close the response-cache files."""
        self._calls.close()

    def _texts(self, passages: Sequence[str], titles: Sequence[str] | None) -> list[str]:
        titles = list(titles) if titles is not None else [""] * len(passages)
        return [passage_text(p, t, self.max_passage_words) for p, t in zip(passages, titles, strict=True)]

    @property
    def concurrency(self) -> int:
        """Questions run at once: the backend's ``max_concurrency`` (1 for local models)."""
        return max(1, int(getattr(self.backend, "max_concurrency", 1) or 1))

    def _finish(self, run: ListwiseRun, n: int, t0: float, failed: BackendError | None) -> ListwiseRun:
        """Fail open: a failed backend or an unreadable output gives retrieval order."""
        reason = None
        if failed is not None:
            reason = f"backend failed: {failed}"
        elif run.read == "text" and run.repairs.unparsed:
            what = "ranking" if run.method == "rankgpt" else "selection"
            reason = f"{run.repairs.unparsed} output(s) with no readable {what}"
        if reason is not None:
            log.warning("%s %s: %s; retrieval order used", run.method, run.question_id, reason[:300])
            run.order, run.k, run.empty, run.fallback = list(range(n)), n, False, reason
        run.wall_seconds = time.perf_counter() - t0
        return run

    def rank(self, question_id: str, question: str, passages: Sequence[str], ids: Sequence[str],
             titles: Sequence[str] | None = None) -> ListwiseRun:
        """Rank the passages (retrieval order in) with the sliding permutation windows.

        A backend that fails after its retries, or an output without a single readable
        id, gives retrieval order with ``fallback`` saying why.
        """
        _check_inputs(question, passages, ids)
        t0 = time.perf_counter()
        texts = self._texts(passages, titles)
        order = list(range(len(texts)))
        run = ListwiseRun(question_id, "rankgpt", [], len(texts), read="text")
        try:
            for start, end in rank_windows(len(order), self.window, self.step):
                part = order[start:end]
                run.windows.append(list(part))
                prompt = rank_prompt(question, [texts[p] for p in part])
                item = "rank::" + _ids_key(question_id, [ids[p] for p in part])
                gen = self._calls.generate(run, item, prompt, RANK_TEMPLATE)
                perm, rep = parse_permutation(gen.text, len(part))
                run.repairs.add(rep)
                order[start:end] = [part[i] for i in perm]
        except BackendError as err:
            return self._finish(run, len(texts), t0, err)
        run.order = order
        return self._finish(run, len(texts), t0, None)

    def select(self, question_id: str, question: str, passages: Sequence[str], ids: Sequence[str],
               titles: Sequence[str] | None = None) -> ListwiseRun:
        """Utility-based selection with the front-to-back windows (dynamic k).

        A backend that fails after its retries, or (``read="text"``) an output without
        ``My selection``, gives every passage in retrieval order with ``fallback`` set.
        """
        _check_inputs(question, passages, ids)
        t0 = time.perf_counter()
        texts = self._texts(passages, titles)
        run = ListwiseRun(question_id, "utility", [], 0, read=self.read)

        def one_window(win: list[int]) -> list[int]:
            prompt = utility_prompt(question, [texts[p] for p in win])
            key = _ids_key(question_id, [ids[p] for p in win])
            gen = self._calls.generate(run, "utility::" + key, prompt, UTILITY_TEMPLATE)
            parsed = parse_selection(gen.text, len(win))
            run.answers.append(parsed.answer)
            if self.read == "text":
                run.repairs.add(parsed.repairs)
                return [win[i] for i in parsed.selected]
            run.text_repairs.add(parsed.repairs)
            stem = f"keep::{question_id}::{hashlib.sha256(parsed.answer.encode()).hexdigest()[:12]}"
            items = [f"{stem}::{ids[p]}" for p in win]
            prompts = [keep_prompt(question, parsed.answer, texts[p]) for p in win]
            if self.calibrate:
                items.append(f"{stem}::{CONTENT_FREE}")
                prompts.append(keep_prompt(question, parsed.answer, CONTENT_FREE))
            choices = self._calls.choose(run, items, prompts, KEEP_TEMPLATE, KEEP_OPTIONS, "No")
            base = _margin(choices.pop()) if self.calibrate else 0.0
            for c in choices:
                if not c.parsed:
                    run.repairs.unparsed += 1
            return [p for p, c in zip(win, choices) if c.parsed and _margin(c) > base]

        try:
            queue, windows = plan_utility(len(texts), one_window, self.window, self.carry)
        except BackendError as err:
            return self._finish(run, len(texts), t0, err)
        run.order, run.windows, run.k, run.empty = queue, windows, len(queue), not queue
        return self._finish(run, len(texts), t0, None)

    def run_many(self, method: str, questions: Sequence[Sequence[Any]], progress: Any = None) -> list[ListwiseRun]:
        """:meth:`rank` (``"rankgpt"``) or :meth:`select` (``"utility"``) over many
        questions, :attr:`concurrency` of them at a time, results in input order.

        Args:
            method: ``"rankgpt"`` or ``"utility"``.
            questions: ``(question_id, question, passages, ids, titles)`` tuples.
            progress: called with each finished run (e.g. a progress bar's update).
        """
        if method not in ("rankgpt", "utility"):
            raise ConfigError(f"method must be 'rankgpt' or 'utility', got {method!r}")
        fn = self.rank if method == "rankgpt" else self.select

        def one(args: Sequence[Any]) -> ListwiseRun:
            run = fn(*args)
            if progress is not None:
                progress(run)
            return run

        if self.concurrency == 1 or len(questions) < 2:
            return [one(q) for q in questions]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(questions))) as pool:
            return list(pool.map(one, questions))


__all__ = [
    "KEEP_OPTIONS", "KEEP_TEMPLATE", "KEEP_USER", "RANK_SYSTEM", "RANK_TEMPLATE", "RANK_USER",
    "UTILITY_SYSTEM", "UTILITY_TEMPLATE", "UTILITY_USER", "ListwiseLLM", "ListwiseRun",
    "ParsedSelection", "Repairs", "keep_prompt", "merge_queue", "next_utility_window",
    "parse_permutation", "parse_selection", "passage_text", "plan_utility", "rank_prompt",
    "rank_windows", "utility_prompt",
]
