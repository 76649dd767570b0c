"""MaxSim over the retriever's own token vectors: a late-interaction selector with no training.

Each candidate scores ``MaxSim(question, title + " " + text)`` over all-MiniLM-L6-v2's
token vectors (:mod:`chunksel.retrieval.tokens`): every question word finds its best match
in the chunk, so a chunk that matches the question word by word beats one that is only
on the topic. Nothing is learned; the question and the chunks are encoded at scoring
time (one MiniLM pass over them, from raw text), so its cost column is the raw-text path.
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
    """

    name = "maxsim"
    display_name = "MaxSim (MiniLM tokens, untrained)"
    family = "late interaction"
    role = "baseline"
    requires_fit = False

    def __init__(self, title: bool = True, max_seq_length: int = 256, batch_size: int = 64,
                 model: str | None = None) -> None:
        self.title = title
        self.max_seq_length = max_seq_length
        self.batch_size = batch_size
        self.model = model
        self._encoder: Any = None

    def encoder(self) -> Any:
        """The MiniLM encoder (loaded on first use)."""
        if self._encoder is None:
            from chunksel.retrieval.encoder import Encoder

            self._encoder = Encoder(self.model, batch_size=self.batch_size, max_seq_length=self.max_seq_length)
        return self._encoder

    def chunk_text(self, cand: Any) -> str:
        """What is encoded of a candidate: its title and text (or the text alone)."""
        return f"{cand.title} {cand.text}".strip() if self.title and cand.title else cand.text

    def _score(self, batch: Sequence[Instance], features: QuestionFeatures | None, k: int) -> np.ndarray:
        from chunksel.retrieval.tokens import maxsim, token_vectors

        texts = [t for inst in batch for t in (inst.question.text, *map(self.chunk_text, inst.candidates))]
        vecs = token_vectors(self.encoder(), texts)
        out = np.full((len(batch), k), -np.inf)
        at = 0
        for b, inst in enumerate(batch):
            q = vecs[at]
            for j in range(len(inst.candidates)):
                out[b, j] = maxsim(q, vecs[at + 1 + j])
            at += 1 + len(inst.candidates)
        return out

    def _load_state(self, path: Path, state: dict[str, Any]) -> None:
        return None
