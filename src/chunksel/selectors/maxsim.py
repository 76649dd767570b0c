"""MaxSim over the retriever's own token vectors: a late-interaction selector with no training.

Each candidate scores ``MaxSim(question, title + " " + text)`` over all-MiniLM-L6-v2's
token vectors (:mod:`chunksel.retrieval.tokens`): every question word finds its best match
in the chunk, so a chunk that matches the question word by word beats one that is only
on the topic. Nothing is learned. By default the question and the chunks are encoded at
scoring time (one MiniLM pass over them, from raw text). With ``tokens=`` the chunks'
token vectors come from where they are kept (the chunk cache, or the bulk job's shards)
and only the question is encoded. Token vectors already on the instances
(``Question.tokens``, ``Candidate.tokens``: what
:class:`~chunksel.pipeline.chunk_selector.ChunkSelector` passes when the caller gives
them, and the study's cost stage) are used as they are: nothing is encoded.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.selectors.base import QuestionFeatures, Selector
from chunksel.types import Instance


class MaxSimSelector(Selector):
    """Late interaction (ColBERT-style MaxSim) over MiniLM token vectors, untrained.

    Args:
        title: prepend each chunk's title to its text (as the corpus embeddings do).
        max_seq_length: tokens read per text.
        batch_size: texts per MiniLM forward pass.
        model: a local sentence-transformers folder; None: the packaged all-MiniLM-L6-v2.
        tokens: where the chunks' token vectors are kept: ``None`` (encoded from the text
            every time), ``"memory"`` (an in-process
            :class:`~chunksel.retrieval.chunk_cache.TokenCache`), a SQLite file (a
            persistent TokenCache; the embedding cache's file will do), or a folder of the
            bulk job's shards (:func:`chunksel.bulk.jobs.encode_tokens`, read by passage
            id; a chunk it lacks is encoded from its text). Chunks are read through the
            same int8 codes on every path, so the scores agree.
    """

    name = "maxsim"
    display_name = "MaxSim (MiniLM tokens, untrained)"
    family = "late interaction"
    role = "baseline"
    requires_fit = False
    query_cost = "tokens"

    def __init__(self, title: bool = True, max_seq_length: int = 256, batch_size: int = 64,
                 model: str | None = None, tokens: str | None = None) -> None:
        self.title = title
        self.max_seq_length = max_seq_length
        self.batch_size = batch_size
        self.model = model
        self.tokens = tokens
        self._encoder: Any = None
        self._source: Any = None

    def encoder(self) -> Any:
        """The MiniLM encoder (loaded on first use)."""
        if self._encoder is None:
            from chunksel.retrieval.encoder import Encoder

            self._encoder = Encoder(self.model, batch_size=self.batch_size, max_seq_length=self.max_seq_length)
        return self._encoder

    def chunk_text(self, cand: Any) -> str:
        """What is encoded of a candidate: its title and text (or the text alone)."""
        return f"{cand.title} {cand.text}".strip() if self.title and cand.title else cand.text

    def token_source(self) -> Any:
        """The TokenCache or TokenShards that ``tokens`` names (``None`` without one)."""
        if self._source is None and self.tokens is not None:
            from chunksel.errors import ConfigError
            from chunksel.retrieval.chunk_cache import TokenCache
            from chunksel.retrieval.tokens import TokenShards

            spec = str(self.tokens)
            if spec == "memory":
                self._source = TokenCache()
            elif Path(spec).expanduser().is_dir():
                self._source = TokenShards(Path(spec).expanduser())
            elif spec.endswith((".sqlite", ".sqlite3", ".db")) or Path(spec).expanduser().is_file():
                self._source = TokenCache(path=spec)
            else:
                raise ConfigError(f"maxsim tokens={spec!r} is neither 'memory', a token-shard folder, "
                                  "nor a SQLite file (.sqlite, .sqlite3 or .db)")
        return self._source

    def chunk_codes(self, cands: Sequence[Any]) -> list[np.ndarray]:
        """The stored form (int8 codes) of each candidate's token vectors: the candidate's
        own (``Candidate.tokens``, given by the caller) where it has them."""
        from chunksel.retrieval.chunk_cache import TokenCache, tokens_cached
        from chunksel.retrieval.tokens import chunk_codes

        given = [c.tokens for c in cands]
        if all(g is not None for g in given):  # the caller's (ChunkSelector's ``chunk_tokens``)
            return given
        if any(g is not None for g in given):
            todo = [c for c, g in zip(cands, given, strict=True) if g is None]
            fill = iter(self.chunk_codes(todo))
            return [g if g is not None else next(fill) for g in given]
        texts = [self.chunk_text(c) for c in cands]
        source = self.token_source()
        if source is None or isinstance(source, TokenCache):
            return tokens_cached(self.encoder(), texts, source)
        got = source.get([c.id for c in cands])
        todo = [i for i, g in enumerate(got) if g is None]
        for i, codes in zip(todo, chunk_codes(self.encoder(), [texts[i] for i in todo]), strict=True):
            got[i] = codes
        return [g for g in got if g is not None]

    def _score(self, batch: Sequence[Instance], features: QuestionFeatures | None, k: int) -> np.ndarray:
        from chunksel.retrieval.tokens import maxsim_many, token_vectors

        todo = [b for b, inst in enumerate(batch) if inst.question.tokens is None]
        encoded = iter(token_vectors(self.encoder(), [batch[b].question.text for b in todo]) if todo else [])
        questions = [inst.question.tokens if inst.question.tokens is not None else next(encoded) for inst in batch]
        chunks = self.chunk_codes([c for inst in batch for c in inst.candidates])
        out = np.full((len(batch), k), -np.inf)
        at = 0
        for b, inst in enumerate(batch):
            n = len(inst.candidates)
            out[b, :n] = maxsim_many(questions[b], chunks[at:at + n])
            at += n
        return out

    def _load_state(self, path: Path, state: dict[str, Any]) -> None:
        return None
