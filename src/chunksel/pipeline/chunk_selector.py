"""The application API: question text and chunk texts in, the chosen chunk(s) out.

**The fast path reuses what the retriever computed**: pass the question and chunk
embeddings and the retrieval scores and nothing is encoded here::

    cs = ChunkSelector.load("models/anchored")
    sel = cs.select(question, chunks, k="auto", question_embedding=q_vec,
                    chunk_embeddings=chunk_vecs, chunk_scores=retrieval_scores, titles=titles)

From raw text, ``select`` runs only what the selector reads
(:func:`~chunksel.selectors.provenance.selector_inputs`): the retriever encoder through
the content-addressed chunk-embedding cache (:mod:`chunksel.retrieval.chunk_cache`), the
generator's question-only warm-up pass for ``h`` and ``r``, and the BM25 statistics saved
beside the selector (or ``corpus=``). A selector with a fixed K scores the first K chunks
given (the rest get ``null`` and an :class:`~chunksel.errors.UnscoredChunksWarning`).
The result is a :class:`~chunksel.pipeline.selection.ChunkSelection`. A ``ChunkSelector``
may be shared by threads: generator passes run one at a time. A generator or encoder
other than the one in the saved provenance is a :class:`~chunksel.errors.DataError`.
``docs/serving.md`` walks through the whole path.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.config import quiet_loading
from chunksel.errors import ConfigError, DataError, UnscoredChunksWarning
from chunksel.pipeline.select_inputs import (
    as_list,
    build_instances,
    check_chunks,
    check_deadline,
    check_embedding_model,
    check_question_embeddings,
    check_questions,
    check_score_scale,
    fill_embeddings,
    load_or_make,
    make_cache,
    trained_dim,
    warm_features,
)
from chunksel.pipeline.select_rules import check_rule, choose, probability_list
from chunksel.pipeline.selection import ChosenChunk, ChunkSelection, max_chunks
from chunksel.pipeline.token_inputs import check_tokens, fill_tokens, make_token_cache
from chunksel.selectors.provenance import selector_inputs

#: inputs that need the retriever encoder when the caller does not supply them
_ENCODER_INPUTS = frozenset({"chunk_embedding", "question_embedding", "retrieval_score"})


class ChunkSelector:
    """A trained selector with the models it reads, ready to use.

    Args:
        selector: a fitted selector (any registered one).
        encoder: the retriever encoder (default: the packaged all-MiniLM-L6-v2), loaded on
            first use and only if the selector reads embeddings or retrieval scores.
        generator: a generator path, or an already loaded ``(model, tokenizer, id)``
            (default: SmolLM2-135M-Instruct); loaded on first use, only when the selector
            reads the warm-up features and the caller does not pass them.
        corpus: the user's own corpus (a name, a passage TSV or JSONL file) for the BM25
            statistics, instead of those saved with the selector.
        path: the folder the selector was loaded from (where its corpus statistics are).
        embedding_cache: the chunk-embedding cache of the raw-text path
            (:class:`~chunksel.retrieval.chunk_cache.EmbeddingCache`): ``True`` = a
            memory-only one (20,000 chunks), a path = one backed by that SQLite file,
            ``False``/``None`` = none, or a cache object (shared between selectors).
        token_cache: the chunks' token vectors of late interaction (selectors that read
            ``"token_vectors"``): the same choices (:mod:`~chunksel.pipeline.token_inputs`).

    Raises:
        DataError: the encoder differs from the one the selector was trained with.
        ConfigError: a BM25-based selector without any known corpus.
    """

    def __init__(
        self,
        selector: Any,
        encoder: Any = None,
        generator: str | tuple[Any, Any, str] | None = None,
        corpus: str | Path | None = None,
        path: str | Path | None = None,
        embedding_cache: Any = True,
        token_cache: Any = True,
    ) -> None:
        if not selector.is_fitted():
            raise ConfigError(f"selector {selector.name!r} is not fitted: train it, save it, and load the save")
        self.selector = selector
        self.name = selector.name
        self.provenance: dict[str, Any] = dict(getattr(selector, "provenance_", None) or {})
        inputs = selector_inputs(selector)
        if self.provenance.get("retrieval_scores") is False:
            # trained on candidates without retrieval scores (a user's ctxs): none at query time either
            inputs = inputs - {"retrieval_score"}
        self.calibrator = getattr(selector, "calibrator_", None)
        if self.calibrator is not None and self.calibrator.reads_retrieval:
            inputs = inputs | {"retrieval_score"}  # its probabilities read the retriever's scores
        self.inputs = inputs
        self.k_max = max_chunks(selector)
        #: whether scores depend on the chunks' text (else embeddings alone suffice)
        self.reads_text = "chunk_embedding" not in self.inputs or "corpus_stats" in self.inputs
        self._encoder = encoder
        self.embedding_cache = make_cache(embedding_cache)
        self.token_cache = make_token_cache(token_cache) if "token_vectors" in inputs else None
        #: the embedding dimension the selector was trained on (0: unknown)
        self.embedding_dim = trained_dim(selector, self.provenance)
        self._generator_path: str | None = None
        self._generator: tuple[Any, Any, str] | None = None
        if isinstance(generator, tuple):
            self._generator = generator
            self._check_generator(generator[2])
        else:
            self._generator_path = generator
        self._lock = threading.Lock()
        #: one generator pass at a time: the feature hooks are attached to the shared model,
        #: so concurrent passes would read each other's activations
        self._gen_lock = threading.RLock()
        self.corpus: str | None = None
        if "corpus_stats" in self.inputs:
            from chunksel.selectors.bm25_stats import use_saved_corpus

            if corpus is not None:
                from chunksel.data.corpus import user_corpus_path

                corpus = user_corpus_path(corpus)
            self.corpus = use_saved_corpus(selector, path or ".", corpus)
        elif corpus is not None:
            raise ConfigError(f"the {self.name} selector reads no corpus statistics: corpus= does not apply")
        if encoder is not None:
            self._check_encoder(encoder)

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        corpus: str | Path | None = None,
        encoder: Any = None,
        generator: str | tuple[Any, Any, str] | None = None,
        quantize: str | None = None,
        engine: str | None = None,
        embedding_cache: Any = True,
        token_cache: Any = True,
    ) -> ChunkSelector:
        """Load any saved selector (checksums verified) and check its provenance; ``path``
        may also be the registered name of a selector that needs no training
        (``"retrieval"``, ``"random"``, ``"bm25"`` with ``corpus=``).

        ``quantize`` / ``engine`` override the inference settings of a prototype selector.
        ``encoder`` may be an encoder object or an engine name: ``"torch"``
        (sentence-transformers), ``"onnx"`` or ``"onnx-int8"`` (MiniLM on ONNX Runtime,
        :class:`~chunksel.retrieval.onnx_encoder.OnnxEncoder`).
        The encoder is checked against the saved encoder id here (without loading it);
        the generator when it loads.
        """
        with quiet_loading():  # a library call: no "Loading weights" bars
            sel, path = load_or_make(path, quantize, engine)
        if isinstance(encoder, str):  # an engine name: "torch", "onnx", "onnx-int8"
            from chunksel.retrieval.onnx_encoder import make_encoder

            encoder = make_encoder(encoder)
        out = cls(sel, encoder=encoder, generator=generator, corpus=corpus, path=path,
                  embedding_cache=embedding_cache, token_cache=token_cache)
        if encoder is None and out.inputs & _ENCODER_INPUTS and out.provenance.get("encoder_id"):
            try:
                default = out.encoder
            except ConfigError:  # no packaged MiniLM: the caller passes embeddings (the text path names the extra)
                default = None
            if default is not None:
                out._check_encoder(default)
        return out

    # ------------------------------------------------------------------ parts
    @property
    def encoder(self) -> Any:
        """The retriever encoder (created on first use; its model loads on first encode)."""
        if self._encoder is None:
            from chunksel.retrieval.encoder import Encoder

            self._encoder = Encoder()
        return self._encoder

    def _check_encoder(self, encoder: Any) -> None:
        want = self.provenance.get("encoder_id") or getattr(self.selector, "encoder_id", "")
        got = getattr(encoder, "model_id", None)
        if want and got and got != want:
            raise DataError(
                f"the {self.name} selector was trained with encoder {want!r}, but encoder {got!r} is "
                "configured: use the encoder it was trained with (or pass chunk_embeddings= from it)"
            )

    def check_embedding_model(self, model: str) -> None:
        """Raise a ``DataError`` naming the fix unless ``model`` (where the caller's
        embeddings come from) is the encoder the selector was trained with."""
        want = self.provenance.get("encoder_id") or getattr(self.selector, "encoder_id", "")
        if want and "chunk_embedding" in self.inputs:
            check_embedding_model(self.name, want, model)

    def _check_generator(self, got: str) -> None:
        want = self.provenance.get("generator_id") or getattr(self.selector, "generator_id", "")
        if want and got != want:
            raise DataError(
                f"the {self.name} selector was trained on generator {want!r}, but {got!r} is loaded: "
                "load it with that generator (generator=PATH) or pass features= from it"
            )

    def generator(self) -> tuple[Any, Any, str]:
        """(model, tokenizer, generator id), loaded once and checked against the provenance."""
        with self._lock:
            if self._generator is None:
                from chunksel.llm.models import load_generator

                with quiet_loading():
                    loaded = load_generator(self._generator_path)
                self._check_generator(loaded[2])
                self._generator = loaded
        return self._generator

    def warm(self, generator: bool | None = None) -> ChunkSelector:
        """Load now what the selector reads (encoder weights, generator, corpus
        statistics), so the first request pays nothing; ``generator=True`` loads the
        generator even when selection does not need it (to generate answers)."""
        if self.inputs & _ENCODER_INPUTS:
            self.encoder.encode(["warm-up"], progress=False)
        if generator or (generator is None and "warmup" in self.inputs):
            self.generator()
        if "corpus_stats" in self.inputs and self.corpus:
            from chunksel.selectors.bm25_stats import corpus_stats

            corpus_stats(self.corpus, progress=False)
        return self

    def describe(self) -> dict[str, Any]:
        """JSON-ready facts about the loaded selector (for ``/health``)."""
        from chunksel.selectors.base import describe

        return {
            **describe(self.name),
            "inputs": sorted(self.inputs),
            "k": self.k_max,
            "corpus": self.corpus,
            "provenance": {k: v for k, v in self.provenance.items() if k != "corpus_stats"},
        }

    # ----------------------------------------------------------------- select
    def select(
        self,
        question: str,
        chunks: Sequence[str] | None = None,
        k: int | str = 1,
        *,
        chunk_embeddings: np.ndarray | None = None,
        question_embedding: np.ndarray | None = None,
        chunk_scores: Sequence[float] | None = None,
        features: dict[str, np.ndarray] | None = None,
        titles: Sequence[str] | None = None,
        deadline: float | None = None,
        threshold: float | None = None,
        min_p: float | None = None,
        embedding_model: str | None = None,
        question_tokens: np.ndarray | None = None,
        chunk_tokens: Sequence[np.ndarray] | None = None,
    ) -> ChunkSelection:
        """Choose the top ``k`` chunks for ``question`` (possibly none, see ``k="auto"``).

        The fast path, and the one to use when a retriever produced the chunks: pass what
        it already computed, ``question_embedding``, ``chunk_embeddings`` and
        ``chunk_scores`` (from the encoder the selector was trained with), and nothing is
        encoded here. From raw text alone the chunks go through the encoder, via the
        chunk-embedding cache (a chunk seen before is not encoded again).

        Args:
            question: the question text (non-empty).
            chunks: candidate chunk texts (a list), best retrieved first (optional when
                ``chunk_embeddings`` is given and the selector reads no text); the list
                is never changed, and every returned index refers to its order.
            k: how many chunks to return (at most the number of scored chunks), or
                ``"auto"``: every chunk whose calibrated P(evidence) reaches the
                operating point chosen on validation (may be none).
            chunk_embeddings: (n, d) retriever embeddings of the chunks (L2-normalised
                here); encoded from ``chunks`` when the selector needs them.
            question_embedding: (d,) retriever embedding of the question.
            chunk_scores: the caller's retrieval scores of the chunks (default: the
                encoder's cosine, when the selector reads retrieval scores).
            features: ``{"h": (d_h,), "r": (d_r,)}`` from the caller's warm-up pass;
                computed with the generator when the selector needs them.
            titles: the chunks' titles (default empty).
            deadline: an absolute ``time.monotonic()`` time; checked before each stage
                (encode, warm-up, score).
            threshold: keep only chunks with P(evidence) >= it (may keep none).
            min_p: keep none when P(some chunk holds the evidence) is below it.
            embedding_model: the name of the model the caller's embeddings come from;
                another model than the selector's encoder is a ``DataError`` naming the
                fix (without it, only a dimension that differs is caught).
            question_tokens, chunk_tokens: for selectors that read ``"token_vectors"``
                (late interaction): the question's ``(tokens, d)`` MiniLM token vectors
                (``Encoder.encode_with_tokens``) and one per chunk (float, or the stored
                int8 codes); what is missing is encoded, chunks through ``token_cache``.

        ``k="auto"``, ``threshold`` and ``min_p`` need a calibrated selector (fitted with
        a validation split); :mod:`chunksel.pipeline.select_rules` has the rules.

        Raises:
            ConfigError: ``k`` < 1, a threshold outside [0, 1], or a rule that needs
                probabilities on an uncalibrated selector; ``k`` neither an int nor
                "auto" is its subclass :class:`~chunksel.errors.ArgumentTypeError`
                (also a ``TypeError``).
            DataError: an empty question, no chunks, an empty chunk, chunks given as one
                string, inputs of the wrong shape (the message names the argument and
                both shapes; ``err.field`` names it), an all-zero embedding, or NaN scores.
            DeadlineExceeded: ``deadline`` passed before a stage (named) started.
        """
        return self.select_batch(
            [question], [chunks] if chunks is not None else None, k,
            chunk_embeddings=None if chunk_embeddings is None else [chunk_embeddings],
            question_embeddings=None if question_embedding is None else [question_embedding],
            chunk_scores=None if chunk_scores is None else [chunk_scores],
            features=None if features is None else [features],
            titles=None if titles is None else [titles],
            deadline=deadline, threshold=threshold, min_p=min_p, embedding_model=embedding_model,
            question_tokens=None if question_tokens is None else [question_tokens],
            chunk_tokens=None if chunk_tokens is None else [chunk_tokens], _stacklevel=3,
        )[0]

    def select_batch(
        self,
        questions: Sequence[str],
        chunks: Sequence[Sequence[str] | None] | None = None,
        k: int | str = 1,
        *,
        chunk_embeddings: Sequence[np.ndarray | None] | None = None,
        question_embeddings: Sequence[np.ndarray | None] | None = None,
        chunk_scores: Sequence[Sequence[float] | None] | None = None,
        features: Sequence[dict[str, np.ndarray] | None] | None = None,
        titles: Sequence[Sequence[str] | None] | None = None,
        deadline: float | None = None,
        threshold: float | None = None,
        min_p: float | None = None,
        embedding_model: str | None = None,
        question_tokens: Sequence[np.ndarray | None] | None = None,
        chunk_tokens: Sequence[Sequence[np.ndarray] | None] | None = None,
        _stacklevel: int = 2,
    ) -> list[ChunkSelection]:
        """:meth:`select` for several questions at once (one list entry per question for
        every argument); the encoder, the warm-up pass and the selector run once each."""
        t0 = time.perf_counter()
        if embedding_model is not None:
            self.check_embedding_model(embedding_model)
        check_rule(k, threshold, min_p, self.calibrator, self.name)
        questions = check_questions(questions)
        b = len(questions)
        if b == 0:
            return []
        chunks_l, emb_l = as_list(chunks, b, "chunks"), as_list(chunk_embeddings, b, "chunk_embeddings")
        qemb_l, scores_l = as_list(question_embeddings, b, "question_embeddings"), as_list(chunk_scores, b, "chunk_scores")
        feat_l, title_l = as_list(features, b, "features"), as_list(titles, b, "titles")
        texts = check_chunks(chunks_l, emb_l, scores_l, title_l, self.reads_text, self.name, self.embedding_dim)
        check_question_embeddings(qemb_l, emb_l, self.embedding_dim)
        qtok_l, ctok_l = as_list(question_tokens, b, "question_tokens"), as_list(chunk_tokens, b, "chunk_tokens")
        check_tokens(qtok_l, ctok_l, texts, self.embedding_dim or 384)
        if "retrieval_score" in self.inputs and self.provenance.get("encoder_id"):
            check_score_scale(self.name, self.provenance["encoder_id"], scores_l)
        n_scored = [min(len(t), self.k_max) if self.k_max else len(t) for t in texts]

        timings = {"encode": 0.0, "warmup": 0.0, "score": 0.0}
        if self.inputs & (_ENCODER_INPUTS | {"token_vectors"}):
            check_deadline(deadline, "encode")
            t = time.perf_counter()
            # without an embedding cache, this call's own holds the chunks' embeddings of the token pass
            emb_cache = self.embedding_cache
            if emb_cache is None and "token_vectors" in self.inputs:
                emb_cache = make_cache(True)
            if "token_vectors" in self.inputs:  # first: a question's embedding comes from the same pass
                fill_tokens(lambda: self.encoder, self.token_cache, questions, texts, title_l, n_scored,
                            qtok_l, ctok_l, qemb_l, emb_cache)
            fill_embeddings(lambda: self.encoder, emb_cache, self.inputs, questions, texts, title_l, n_scored,
                            emb_l, qemb_l, skip_scores=[s is not None for s in scores_l])
            check_question_embeddings(qemb_l, emb_l, None)
            timings["encode"] = (time.perf_counter() - t) * 1e3

        warm_ups: list[Any] = [None] * b
        feats = None
        if "warmup" in self.inputs:
            check_deadline(deadline, "warmup")
            t = time.perf_counter()
            feats, warm_ups = self._warm_features(questions, feat_l)
            timings["warmup"] = (time.perf_counter() - t) * 1e3

        batch = build_instances(questions, texts, n_scored, emb_l, qemb_l, scores_l, title_l,
                                "retrieval_score" in self.inputs, qtok_l, ctok_l)
        check_deadline(deadline, "score")
        t = time.perf_counter()
        if "corpus_stats" in self.inputs:
            from chunksel.selectors.letor import MEMO_ENABLED

            token = MEMO_ENABLED.set(False)  # a server's memo would keep every request's chunks
            try:
                scores = self.selector.score(batch, feats)
            finally:
                MEMO_ENABLED.reset(token)
        else:
            scores = self.selector.score(batch, feats)
        chunk_p = p_set = None
        if self.calibrator is not None:
            chunk_p, p_set = self.selector.probabilities(batch, feats, scores)
        timings["score"] = (time.perf_counter() - t) * 1e3
        timings["total"] = (time.perf_counter() - t0) * 1e3

        left_out = [(len(texts[i]) - n_scored[i], len(texts[i])) for i in range(b) if n_scored[i] < len(texts[i])]
        if left_out:
            extra, total = left_out[0]
            warnings.warn(
                f"{extra} of {total} chunks were not scored: the model scores the first K={self.k_max} chunks "
                "in the order given (the rest get null scores and are never selected)"
                + (f"; {len(left_out)} questions were cut" if len(left_out) > 1 else ""),
                UnscoredChunksWarning,
                stacklevel=_stacklevel,
            )
        out = []
        for i in range(b):
            row = scores[i, : n_scored[i]]
            p_row = None if chunk_p is None else chunk_p[i, : n_scored[i]]
            p_ans = None if p_set is None else float(p_set[i])
            chosen, abstained = choose(row, p_row, p_ans, k, threshold, min_p,
                                       None if self.calibrator is None else self.calibrator.auto_threshold)
            out.append(ChunkSelection(
                question=questions[i],
                selected=[ChosenChunk(index=j, rank=r + 1, score=float(row[j]), text=texts[i][j],
                                      probability=None if p_row is None else float(p_row[j]))
                          for r, j in enumerate(chosen)],
                all_scores=[float(row[j]) if j < n_scored[i] else None for j in range(len(texts[i]))],
                n_scored=n_scored[i],
                selector=self.name,
                timings=dict(timings),
                warm_up=warm_ups[i],
                probabilities=probability_list(p_row, n_scored[i], len(texts[i])),
                p_answerable=p_ans,
                abstained=abstained,
            ))
        return out

    def _warm_features(self, questions, given) -> tuple[Any, list[Any]]:
        def extract(texts: list[str]) -> dict[str, np.ndarray]:
            from chunksel.features.extract import extract_features

            model, tokenizer, _ = self.generator()
            with self._gen_lock:
                return extract_features(model, tokenizer, texts, batch_size=len(texts), progress=False)

        return warm_features(questions, given, self.warm_up, extract)

    def warm_up(self, question: str) -> Any:
        """The question-only warm-up pass with its KV cache
        (:class:`chunksel.features.kv.WarmUp`). ``r`` averages over the question's own
        tokens, as the feature store's extraction does (the features it was trained on)."""
        from chunksel.features.kv import warm_up

        model, tokenizer, _ = self.generator()
        with self._gen_lock:
            return warm_up(model, tokenizer, question)

    # ----------------------------------------------------------------- answer
    def answer(
        self, question: str, chunks: Sequence[str], max_new_tokens: int = 32, **select_kwargs: Any
    ) -> tuple[str, ChunkSelection]:
        """End-to-end RAG: select one chunk, then generate greedily from the warm-up's KV
        cache (:func:`chunksel.features.kv.generate_with_reuse`). Selectors that read no
        warm-up features still run the warm-up pass here: generation needs it anyway.
        The selection's ``timings`` gain ``generate`` (and ``warmup``)."""
        from chunksel.features.kv import generate_with_reuse

        sel = self.select(question, chunks, k=1, **select_kwargs)
        if not sel.selected:
            raise DataError("no chunk could be selected")
        model, tokenizer, _ = self.generator()
        warm = sel.warm_up
        if warm is None:
            t = time.perf_counter()
            warm = self.warm_up(question)
            sel.timings["warmup"] = sel.timings.get("warmup", 0.0) + (time.perf_counter() - t) * 1e3
        t = time.perf_counter()
        with self._gen_lock:
            gen = generate_with_reuse(model, tokenizer, question, sel.chunks[0], warm.cache, warm.ids,
                                      max_new_tokens)
        sel.timings["generate"] = (time.perf_counter() - t) * 1e3
        sel.warm_up = None  # its cache was cropped in place by generation
        return gen.text, sel

