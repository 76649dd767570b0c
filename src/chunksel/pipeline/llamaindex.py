"""A LlamaIndex node postprocessor (extra ``llamaindex``): keep the nodes a trained
selector chooses, best first.

Example (``nodes`` stand for what a retriever's ``retrieve(question)`` returns)::

    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

    from chunksel.pipeline.llamaindex import ChunkselNodePostprocessor

    question = "Who wrote Hamlet?"
    nodes = [NodeWithScore(node=TextNode(text="The Globe Theatre was built in 1599."), score=0.62),
             NodeWithScore(node=TextNode(text="Hamlet is a tragedy by William Shakespeare."), score=0.58)]
    post = ChunkselNodePostprocessor.from_path("models/anchored", top_n=1)
    for n in post.postprocess_nodes(nodes, query_bundle=QueryBundle(question)):
        print(n.score, n.node.get_content()[:60])

In a query engine: ``RetrieverQueryEngine.from_args(retriever, llm=llm,
node_postprocessors=[post])`` with your retriever and LLM.

The fast path, and the default (``reuse_embeddings=True``): nodes that carry their
embedding (a vector-store retriever's all-MiniLM-L6-v2 vectors) are not re-encoded, the
query bundle's embedding is reused, and the retriever's node scores are reused as
retrieval scores; then nothing is encoded by chunksel. Otherwise the text is encoded,
chunks through the selector's chunk-embedding cache.

``top_n="auto"`` (a calibrated selector's operating point), ``threshold=`` and ``min_p=``
(:meth:`chunksel.ChunkSelector.select`) may keep no node: the result is then an empty list.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chunksel.errors import require

require("llama_index.core", "llamaindex")

from llama_index.core.bridge.pydantic import PrivateAttr  # noqa: E402
from llama_index.core.postprocessor.types import BaseNodePostprocessor  # noqa: E402
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle  # noqa: E402

from chunksel.pipeline.adapters import as_chunk_selector, select_reusing  # noqa: E402


class ChunkselNodePostprocessor(BaseNodePostprocessor):
    """Keep the ``top_n`` nodes a chunksel selector ranks highest, best first; each node's
    score becomes the selector's calibrated P(evidence) in [0, 1] when the selector is
    calibrated (the shipped pretrained ones are), else its raw, unbounded score.

    Args:
        selector: a :class:`~chunksel.pipeline.chunk_selector.ChunkSelector` (or a path).
        top_n: nodes to keep, or ``"auto"`` (may keep none).
        threshold: keep only nodes with calibrated P(evidence) >= it (may keep none).
        min_p: keep none when P(some node holds the evidence) is below it.
        reuse_embeddings: reuse node and query embeddings (they must come from the
            selector's encoder).
    """

    top_n: int | str = 3
    reuse_embeddings: bool = True
    threshold: float | None = None
    min_p: float | None = None
    _selector: Any = PrivateAttr()

    def __init__(self, selector: Any, top_n: int | str = 3, reuse_embeddings: bool = True, **kwargs: Any) -> None:
        super().__init__(top_n=top_n, reuse_embeddings=reuse_embeddings, **kwargs)
        self._selector = as_chunk_selector(selector)

    @classmethod
    def from_path(cls, path: str | Path, top_n: int | str = 3, **load_kwargs: Any) -> ChunkselNodePostprocessor:
        rule = {n: load_kwargs.pop(n) for n in ("threshold", "min_p") if n in load_kwargs}
        return cls(as_chunk_selector(path, **load_kwargs), top_n=top_n, **rule)

    @classmethod
    def class_name(cls) -> str:
        return "ChunkselNodePostprocessor"

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if query_bundle is None:
            raise ValueError("ChunkselNodePostprocessor needs the query (query_bundle)")
        if not nodes:
            return []
        reuse = self.reuse_embeddings
        res = select_reusing(
            self._selector, query_bundle.query_str,
            [n.node.get_content(metadata_mode=MetadataMode.NONE) for n in nodes], self.top_n,
            [n.node.embedding for n in nodes] if reuse else None,
            [n.score for n in nodes],
            query_embedding=query_bundle.embedding if reuse else None,
            threshold=self.threshold, min_p=self.min_p,
        )
        # a calibrated selector's P(evidence) in [0, 1], which a threshold can read; else its raw score
        return [NodeWithScore(node=nodes[c.index].node, score=c.score if c.probability is None else c.probability)
                for c in res.selected]
