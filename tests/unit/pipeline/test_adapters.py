"""The LangChain compressor and the LlamaIndex postprocessor inside a minimal chain /
query engine of their framework (fake LLMs, no downloads), reusing the framework's
embeddings."""

from __future__ import annotations

import numpy as np
import pytest
from tests.conftest import make_toy_instances

from chunksel.errors import DataError

pytest.importorskip("torch")

from tests.doubles import FakeEncoder  # noqa: E402
from tests.unit.pipeline.test_application_api import CHUNKS, QUESTION  # noqa: E402


@pytest.fixture(scope="module")
def cs(tmp_path_factory):
    """A saved anchored selector reading q, E and the LETOR features (no generator)."""
    import torch

    from chunksel import ChunkSelector
    from chunksel.selectors import make_selector

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("adapters")
    insts = make_toy_instances(n=30, dim=8, seed=2)
    corpus = root / "corpus.tsv"
    corpus.write_text("id\ttext\ttitle\tsource\n" + "".join(
        f"{c.id}\t{c.text}\t\ttoy\n" for i in insts for c in i.candidates), encoding="utf-8")
    sel = make_selector("anchored", blocks="q+chunk+letor", corpus=str(corpus), hidden=16, phi_hidden=8,
                        max_epochs=3, batch_size=8, progress=False)
    sel.fit([i for i in insts if i.split == "train"], None, [i for i in insts if i.split == "val"])
    sel.save(root / "anchored")
    return ChunkSelector.load(root / "anchored", encoder=FakeEncoder())


def _vectors():
    return FakeEncoder().encode(CHUNKS), FakeEncoder().encode([QUESTION])[0]


def test_langchain_compressor_in_a_chain(cs):
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnableLambda, RunnableParallel, RunnablePassthrough

    from chunksel.pipeline.langchain import ChunkselCompressor

    emb, _ = _vectors()

    class FixedRetriever(BaseRetriever):
        def _get_relevant_documents(self, query, *, run_manager=None):
            return [Document(page_content=t, metadata={"embedding": emb[j].tolist(), "source": f"s{j}"})
                    for j, t in enumerate(CHUNKS)]

    compressor = ChunkselCompressor(selector=cs, k=2)
    seen = {}

    def compress(x):
        docs = compressor.compress_documents(x["docs"], x["question"])
        seen["docs"] = docs
        return {"question": x["question"], "context": "\n".join(d.page_content for d in docs)}

    prompt = ChatPromptTemplate.from_messages([("human", "Context:\n{context}\n\nQuestion: {question}")])
    chain = (RunnableParallel(question=RunnablePassthrough(), docs=FixedRetriever())
             | RunnableLambda(compress) | prompt | FakeListChatModel(responses=["golf"]) | StrOutputParser())
    before = cs.encoder.n_encoded
    assert chain.invoke(QUESTION) == "golf"
    assert cs.encoder.n_encoded - before == 1  # only the question: the documents' vectors were reused
    docs = seen["docs"]
    want = cs.select(QUESTION, CHUNKS, k=2, chunk_embeddings=emb)
    assert [d.page_content for d in docs] == want.chunks
    assert [d.metadata["chunksel_rank"] for d in docs] == [1, 2] and docs[0].metadata["source"].startswith("s")
    with pytest.raises(DataError, match="3-dim embeddings"):
        compressor.compress_documents([Document(page_content=t, metadata={"embedding": [1.0, 0.0, 0.0]})
                                       for t in CHUNKS], QUESTION)
    assert compressor.compress_documents([], QUESTION) == []


def test_langchain_compressor_with_the_stores_embeddings_encodes_nothing(cs):
    pytest.importorskip("langchain_core")
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings

    from chunksel.pipeline.langchain import ChunkselCompressor

    emb, q_emb = _vectors()

    class StoreEmbeddings(Embeddings):  # the vector store's embedder (the selector's encoder)
        def embed_documents(self, texts):
            return FakeEncoder().encode(texts).tolist()

        def embed_query(self, text):
            return FakeEncoder().encode([text])[0].tolist()

    compressor = ChunkselCompressor(selector=cs, k=2, embeddings=StoreEmbeddings())
    docs = [Document(page_content=t, metadata={"embedding": emb[j].tolist(), "score": 0.9 - 0.1 * j})
            for j, t in enumerate(CHUNKS)]
    before = cs.encoder.n_encoded
    got = compressor.compress_documents(docs, QUESTION)
    assert cs.encoder.n_encoded == before  # question and chunks came from the retriever side
    want = cs.select(QUESTION, CHUNKS, k=2, chunk_embeddings=emb, question_embedding=q_emb,
                     chunk_scores=[0.9 - 0.1 * j for j in range(len(CHUNKS))])
    assert [d.page_content for d in got] == want.chunks


def test_llamaindex_postprocessor_in_a_query_engine(cs):
    pytest.importorskip("llama_index.core")
    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

    from chunksel.pipeline.llamaindex import ChunkselNodePostprocessor

    emb, q_emb = _vectors()

    class FixedRetriever(BaseRetriever):
        def _retrieve(self, query_bundle):
            return [NodeWithScore(node=TextNode(text=t, id_=f"n{j}", embedding=emb[j].tolist()), score=1.0 - 0.1 * j)
                    for j, t in enumerate(CHUNKS)]

    post = ChunkselNodePostprocessor(cs, top_n=2)
    engine = RetrieverQueryEngine.from_args(FixedRetriever(), llm=MockLLM(max_tokens=4), node_postprocessors=[post])
    before = cs.encoder.n_encoded
    response = engine.query(QueryBundle(QUESTION, embedding=q_emb.tolist()))
    assert cs.encoder.n_encoded == before  # node and query embeddings reused: nothing encoded
    assert isinstance(str(response), str)
    got = [n.node.get_content() for n in response.source_nodes]
    want = cs.select(QUESTION, CHUNKS, k=2, chunk_embeddings=emb, question_embedding=q_emb,
                     chunk_scores=[1.0 - 0.1 * j for j in range(len(CHUNKS))])
    assert got == want.chunks
    # a calibrated selector's node score is its P(evidence)
    assert cs.calibrator is not None
    np.testing.assert_allclose([n.score for n in response.source_nodes], [c.probability for c in want.selected],
                               rtol=1e-5)
    assert post.postprocess_nodes([], QueryBundle(QUESTION)) == []
