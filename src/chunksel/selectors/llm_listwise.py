"""LLM selectors of the utility-selection paper: ``rankgpt`` (listwise relevance ranking)
and ``utility`` (utility-based selection with pseudo-answers and dynamic k).

Both learn nothing (``requires_fit`` is false) and run one LLM backend through
:class:`chunksel.llm.listwise.ListwiseLLM` (prompts, windows, repairs, response cache and
how the local backend reads its decisions: see that module). Settings:

- ``backend``: ``"local"`` (transformers; ``model`` is a model folder or ``.gguf``,
  default SmolLM2-135M-Instruct), ``"openai"`` (``base_url`` and ``model`` = the server's
  model name; ``backend_options``: more :class:`~chunksel.llm.openai_http.OpenAIBackend`
  arguments such as ``max_concurrency``, ``timeout``, ``extra_body``) or any name
  registered with :func:`chunksel.llm.backends.register_backend`.
- ``window`` / ``step`` / ``carry``: 20 / 10 / 10 as in the paper.
- ``read``: ``None`` (local: log-probabilities, else text), ``"text"`` or ``"logprobs"``;
  ``calibrate``: the logprobs read's content-free calibration (on by default).

Scores (the :class:`~chunksel.selectors.base.Selector` contract, so both work at any K in
the main harness, K = 5 included): ``rankgpt`` scores each candidate by its place in the
LLM's final permutation (``-position``). ``utility`` scores the selected candidates
``1 + (k - place) / k`` (queue order) and the others ``-rank / K`` (retrieval order), so
``select(k)`` follows the contract (top ``k``) and the selected ones come first;
:meth:`UtilitySelector.select_dynamic` returns the selection itself (dynamic k, possibly
empty). Every query's :class:`~chunksel.llm.listwise.ListwiseRun` (calls, tokens,
seconds, repairs, k, ``fallback``) is kept in ``runs_`` by question id. Questions are
sent concurrently up to the backend's ``max_concurrency``. A question whose LLM call
fails after its retries, or whose output has no readable ranking or selection, is
scored in retrieval order and flagged (``run.fallback``); :meth:`fallbacks` counts them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from chunksel.config import show_progress
from chunksel.errors import ConfigError
from chunksel.selectors.base import QuestionFeatures, Selector
from chunksel.types import Instance, Selection


class _ListwiseSelector(Selector):
    family = "LLM"
    role = "llm"
    requires_fit = False
    query_cost = "llm"
    method: ClassVar[str] = ""

    def __init__(self, backend: str = "local", model: str | None = None, base_url: str | None = None,
                 window: int = 20, step: int = 10, carry: int = 10, read: str | None = None,
                 max_new_tokens: int = 128, max_passage_words: int | None = 120,
                 calibrate: bool = True, progress: bool = True,
                 backend_options: dict[str, Any] | None = None) -> None:
        self.backend = backend
        self.model = model
        self.base_url = base_url
        self.window = window
        self.step = step
        self.carry = carry
        self.read = read
        self.max_new_tokens = max_new_tokens
        self.max_passage_words = max_passage_words
        self.calibrate = calibrate
        self.progress = progress
        self.backend_options = dict(backend_options or {})

    # ----------------------------------------------------------- the backend
    def use_backend(self, backend: Any) -> _ListwiseSelector:
        """Run on an already built backend (e.g. a loaded LocalBackend); returns self."""
        self._backend = backend
        self._runner = None
        return self

    def llm(self) -> Any:
        """The :class:`~chunksel.llm.listwise.ListwiseLLM` (its backend built on first use)."""
        from chunksel.llm.listwise import ListwiseLLM

        if getattr(self, "_runner", None) is None:
            backend = getattr(self, "_backend", None)
            if backend is None:
                backend = self._make_backend()
                self._backend = backend
            self._runner = ListwiseLLM(
                backend, window=self.window, step=self.step, carry=self.carry, read=self.read,
                max_new_tokens=self.max_new_tokens, max_passage_words=self.max_passage_words,
                calibrate=self.calibrate)
        return self._runner

    def _make_backend(self) -> Any:
        from chunksel.llm.backends import get_backend

        if self.backend == "local":
            if self.backend_options:
                raise ConfigError(f"{self.name}: backend_options {sorted(self.backend_options)} are for an HTTP backend")
            return get_backend("local", model_path=self.model)
        if self.backend == "openai":
            if not self.base_url or not self.model:
                raise ConfigError(f"{self.name}: backend 'openai' needs base_url and model (the server's model name)")
            return get_backend("openai", base_url=self.base_url, model=self.model, **self.backend_options)
        return get_backend(self.backend, **self.backend_options)

    # ----------------------------------------------------------- running
    def run(self, batch: Sequence[Instance]) -> list[Any]:
        """The :class:`~chunksel.llm.listwise.ListwiseRun` of each instance (kept in
        ``runs_``)."""
        from tqdm.auto import tqdm

        runner = self.llm()
        if not hasattr(self, "runs_"):
            self.runs_: dict[str, Any] = {}
        questions = [(inst.id, inst.question.text, [c.text for c in inst.candidates],
                      [c.id for c in inst.candidates], [c.title for c in inst.candidates]) for inst in batch]
        bar = tqdm(total=len(batch), desc=self.name, unit="q",
                   disable=not show_progress(self.progress) or len(batch) < 2)
        try:
            out = runner.run_many(self.method, questions, progress=lambda _run: bar.update(1))
        finally:
            bar.close()
        for inst, res in zip(batch, out, strict=True):
            self.runs_[inst.id] = res
        return out

    def fallbacks(self) -> dict[str, str]:
        """Question id -> why that question fell back to retrieval order (so far)."""
        return {qid: r.fallback for qid, r in getattr(self, "runs_", {}).items() if r.fallback}

    def _load_state(self, path: Path, state: dict[str, Any]) -> None:
        return None


class RankGPTSelector(_ListwiseSelector):
    """Listwise relevance ranking by permutation generation, back-to-front windows."""

    name = "rankgpt"
    display_name = "RankGPT (LLM listwise ranking)"
    method = "rankgpt"

    def _score(self, batch: Sequence[Instance], features: QuestionFeatures | None, k: int) -> np.ndarray:
        out = np.full((len(batch), k), -np.inf)
        for b, run in enumerate(self.run(batch)):
            for place, pos in enumerate(run.order):
                out[b, pos] = -float(place)
        return out


class UtilitySelector(_ListwiseSelector):
    """Utility-based selection: pseudo-answer then selection, front-to-back windows, dynamic k."""

    name = "utility"
    display_name = "Utility selection (LLM, dynamic k)"
    method = "utility"

    def _score(self, batch: Sequence[Instance], features: QuestionFeatures | None, k: int) -> np.ndarray:
        out = np.full((len(batch), k), -np.inf)
        for b, (inst, run) in enumerate(zip(batch, self.run(batch), strict=True)):
            n = len(inst.candidates)
            out[b, :n] = -np.arange(n) / max(n, 1)
            for place, pos in enumerate(run.order):
                out[b, pos] = 1.0 + (len(run.order) - place) / len(run.order)
        return out

    def select_dynamic(self, batch: Sequence[Instance]) -> list[Selection]:
        """The selections themselves: every selected candidate, queue order (k may be 0)."""
        batch = list(batch)
        if not batch:
            return []
        scores = self.score(batch)
        out = []
        for inst, row in zip(batch, scores, strict=True):
            order = self.runs_[inst.id].order
            out.append(Selection(question_id=inst.id, indices=list(order),
                                 candidate_ids=[inst.candidates[i].id for i in order],
                                 scores=[float(row[i]) for i in order]))
        return out


__all__ = ["RankGPTSelector", "UtilitySelector"]
