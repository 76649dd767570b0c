"""A LangChain document compressor (extra ``langchain``): keep the chunks a trained
selector chooses, best first.

The fast path, and the default: reuse what the retriever computed. Documents whose
``metadata[embedding_key]`` holds the retriever's vector (all-MiniLM-L6-v2) are not
re-encoded, ``metadata[score_key]`` is reused as the retrieval score, and with
``embeddings=`` (the vector store's LangChain ``Embeddings``) the question's vector comes
from its ``embed_query``; then nothing is encoded by chunksel. Otherwise the text is
encoded, chunks through the selector's chunk-embedding cache.

Example (``docs`` stand for what a retriever's ``invoke(question)`` returns)::

    from langchain_core.documents import Document

    from chunksel.pipeline.langchain import ChunkselCompressor

    question = "Who wrote Hamlet?"
    docs = [Document(page_content="The Globe Theatre was built in 1599.", metadata={"score": 0.62}),
            Document(page_content="Hamlet is a tragedy by William Shakespeare.", metadata={"score": 0.58})]
    compressor = ChunkselCompressor.from_path("models/anchored", k=1)
    for d in compressor.compress_documents(docs, question):
        print(d.metadata["chunksel_rank"], d.metadata["chunksel_score"], d.page_content[:60])

It is a ``BaseDocumentCompressor``: a ``ContextualCompressionRetriever`` takes it (that
class is in ``langchain-classic`` since LangChain 1.0, which the extra does not install).

``k="auto"`` (a calibrated selector's operating point), ``threshold=`` (a minimum
P(evidence)) and ``min_p=`` (abstain below this P(some chunk holds the evidence)) may keep
no document at all: the result is then an empty list. Kept documents carry
``metadata["relevance_score"]`` (the key LangChain's rerankers use): the calibrated
P(evidence) of a calibrated selector, else its raw score; and ``chunksel_score`` (raw),
``chunksel_probability`` and ``chunksel_rank``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chunksel.errors import require

require("langchain_core", "langchain")

from langchain_core.callbacks import Callbacks  # noqa: E402
from langchain_core.documents import BaseDocumentCompressor, Document  # noqa: E402
from pydantic import ConfigDict  # noqa: E402

from chunksel.pipeline.adapters import as_chunk_selector, select_reusing  # noqa: E402


class ChunkselCompressor(BaseDocumentCompressor):
    """Keep the ``k`` documents a chunksel selector ranks highest (best first).

    Attributes:
        selector: a :class:`~chunksel.pipeline.chunk_selector.ChunkSelector`.
        k: documents to keep, or ``"auto"`` (may keep none).
        threshold: keep only documents with calibrated P(evidence) >= it (may keep none).
        min_p: keep none when P(some document holds the evidence) is below it.
        embedding_key: metadata key of a document's retriever embedding (reused when every
            document has one); None never reuses.
        score_key: metadata key of its retrieval score; None never reuses.
        title_key: metadata key of its title.
        embeddings: the retriever's LangChain ``Embeddings`` (same model as the selector's
            encoder); its ``embed_query`` gives the question embedding. None: encoded here.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    selector: Any
    k: int | str = 3
    threshold: float | None = None
    min_p: float | None = None
    embedding_key: str | None = "embedding"
    score_key: str | None = "score"
    title_key: str | None = "title"
    embeddings: Any = None

    @classmethod
    def from_path(cls, path: str | Path, k: int | str = 3, **kwargs: Any) -> ChunkselCompressor:
        """Load a saved selector (``ChunkSelector.load``; ``corpus=`` etc. go there)."""
        fields = {n: kwargs.pop(n) for n in ("embedding_key", "score_key", "title_key", "embeddings", "threshold",
                                             "min_p") if n in kwargs}
        return cls(selector=as_chunk_selector(path, **kwargs), k=k, **fields)

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        docs = list(documents)
        if not docs:
            return []

        def meta(key):
            return None if key is None else [d.metadata.get(key) for d in docs]

        titles = meta(self.title_key)
        cs = as_chunk_selector(self.selector)
        q_emb = None
        if self.embeddings is not None and cs.inputs & {"question_embedding", "retrieval_score"}:
            q_emb = self.embeddings.embed_query(query)
        res = select_reusing(
            cs, query, [d.page_content for d in docs], self.k, meta(self.embedding_key), meta(self.score_key),
            query_embedding=q_emb,
            titles=None if titles is None or any(t is None for t in titles) else [str(t) for t in titles],
            threshold=self.threshold, min_p=self.min_p,
        )
        out = []
        for c in res.selected:
            d = docs[c.index]
            out.append(Document(page_content=d.page_content, id=d.id,
                                metadata={**d.metadata, "chunksel_score": c.score, "chunksel_rank": c.rank,
                                          "chunksel_probability": c.probability,
                                          "relevance_score": c.score if c.probability is None else c.probability}))
        return out
