"""k="auto" and min_p through the LangChain compressor and the LlamaIndex postprocessor:
both may return an empty list (and keep chunks when the selector is confident)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from tests.doubles import FakeEncoder  # noqa: E402
from tests.unit.pipeline.test_abstention_api import GOOD, _far, calibrated  # noqa: E402,F401

QUESTION = "what is the golf answer"
TEXTS = ["first passage", "second passage", "third passage"]


@pytest.fixture(scope="module")
def cs(calibrated):  # noqa: F811
    from chunksel import ChunkSelector

    return ChunkSelector.load(calibrated / "cal", encoder=FakeEncoder())


def test_langchain_compressor_may_return_no_document(cs):
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document

    from chunksel.pipeline.langchain import ChunkselCompressor

    far = _far(3)
    docs = [Document(page_content=t, metadata={"embedding": far[j].tolist()}) for j, t in enumerate(TEXTS)]
    assert ChunkselCompressor(selector=cs, k="auto").compress_documents(docs, QUESTION) == []
    assert ChunkselCompressor(selector=cs, k=3, min_p=1.0).compress_documents(docs, QUESTION) == []
    assert len(ChunkselCompressor(selector=cs, k=2).compress_documents(docs, QUESTION)) == 2
    near = np.vstack([far[:2], GOOD[None, :]])
    docs = [Document(page_content=t, metadata={"embedding": near[j].tolist()}) for j, t in enumerate(TEXTS)]
    kept = ChunkselCompressor(selector=cs, k="auto").compress_documents(docs, QUESTION)
    assert "third passage" in [d.page_content for d in kept]
    assert all(d.metadata["chunksel_probability"] >= cs.calibrator.auto_threshold for d in kept)
    # the score LangChain's rerankers write: the calibrated probability, not the raw score
    assert all(d.metadata["relevance_score"] == d.metadata["chunksel_probability"] for d in kept)
    assert any(d.metadata["relevance_score"] != d.metadata["chunksel_score"] for d in kept)


def test_llamaindex_postprocessor_may_return_no_node(cs):
    pytest.importorskip("llama_index.core")
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

    from chunksel.pipeline.llamaindex import ChunkselNodePostprocessor

    q = np.eye(8, dtype=np.float32)[1].tolist()

    def nodes(emb, score=0.1):  # the retriever's scores: low, like the toy sets without evidence
        return [NodeWithScore(node=TextNode(text=t, id_=f"n{j}", embedding=emb[j].tolist()), score=score)
                for j, t in enumerate(TEXTS)]

    bundle = QueryBundle(QUESTION, embedding=q)
    assert ChunkselNodePostprocessor(cs, top_n="auto").postprocess_nodes(nodes(_far(3)), bundle) == []
    assert ChunkselNodePostprocessor(cs, top_n=3, min_p=1.0).postprocess_nodes(nodes(_far(3)), bundle) == []
    assert len(ChunkselNodePostprocessor(cs, top_n=1).postprocess_nodes(nodes(_far(3)), bundle)) == 1
    near = np.vstack([_far(2), GOOD[None, :]])
    kept = ChunkselNodePostprocessor(cs, top_n="auto").postprocess_nodes(nodes(near, 0.6), bundle)
    assert "n2" in [n.node.node_id for n in kept]
    # node.score is the calibrated P(evidence) (a threshold on it means the same on every query)
    want = cs.select(QUESTION, TEXTS, k="auto", chunk_embeddings=near, question_embedding=np.asarray(q),
                     chunk_scores=[0.6] * 3)
    assert [n.score for n in kept] == [c.probability for c in want.selected]
    assert all(0.0 <= n.score <= 1.0 for n in kept)
