"""Where a trained selector came from: recorded when it is fitted, saved in config.json.

:func:`training_provenance` is called by every selector's ``fit`` (the
:class:`~chunksel.selectors.base.Selector` base class wraps each subclass's ``fit``) and
:meth:`~chunksel.selectors.base.Selector.save` writes the record under ``"provenance"``:

==================  ===================================================================
key                 value
==================  ===================================================================
chunksel_version    the package version that trained it
datasets            the training instances' dataset names (sorted)
n_train             training instances
label_source        the label spec it learned from (its ``label`` setting, else the
                    instances' own ``label_source`` values joined by ``,``)
data_fingerprint    sha256 (16 hex) of the training questions' ids and texts and their
                    candidates' ids, in order
generator_id        the generator whose warm-up gave ``h`` and ``r`` (the feature
                    store's, else the selector's ``generator_id`` setting; "" if none)
feature_dims        ``{"h": d_h, "r": d_r}`` of those features ({} if none)
encoder_id          the retriever encoder of the candidates' (and questions')
                    embeddings: the selector's ``encoder_id`` setting, else the packaged
                    all-MiniLM-L6-v2 when the embeddings have its dimension ("" if none)
embedding_dim       the candidates' embedding dimension (0 if they carry none)
corpora             ``{dataset: corpus}`` whose BM25 / TF-IDF statistics it read ({} if
                    it reads none)
retrieval_scores    whether the training candidates carried retrieval scores (the LETOR
                    features read them; a user's ``ctxs`` without ``score`` have none,
                    and then the application path leaves them out too)
==================  ===================================================================

:class:`chunksel.pipeline.chunk_selector.ChunkSelector` checks ``generator_id`` and
``encoder_id`` against the models it runs, and the corpus statistics named by
``corpora`` travel with the save (``corpus_stats/<checksum>.npz``,
:mod:`chunksel.selectors.bm25`). This module never imports torch.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Sequence
from typing import Any

from chunksel.errors import ChunkselError
from chunksel.types import Instance

PROVENANCE_VERSION = 1


def selector_inputs(selector: Any) -> frozenset[str]:
    """What a selector reads at query time, beyond the question and chunk texts.

    A subset of ``"chunk_embedding"``, ``"question_embedding"``, ``"retrieval_score"``,
    ``"corpus_stats"``, ``"warmup"`` and ``"token_vectors"`` (MiniLM token vectors of
    the question and the chunks, for late interaction). A selector class may declare it as a method
    ``required_inputs()`` (the anchored selector and SRAS do); otherwise it is derived
    from ``query_cost``, the paper prototype's ``blocks`` and the LETOR features' inputs.
    """
    declared = getattr(selector, "required_inputs", None)
    if callable(declared):
        return frozenset(declared())
    cost = getattr(selector, "query_cost", "none") or "none"
    name = getattr(selector, "name", "")
    blocks = getattr(selector, "blocks", None)
    out: set[str] = set()
    if "warmup" in cost and (blocks is None or set(blocks) & {"hs", "rw"}):
        out.add("warmup")
    if "bm25" in cost:
        out.add("corpus_stats")
        if name != "bm25":  # LETOR features: the retrieval score, its gap and its rank
            out.add("retrieval_score")
    if name == "prototype" or getattr(selector, "reads_embeddings", False):
        out.add("chunk_embedding")
    if getattr(selector, "reads_question_embedding", False):
        out.add("question_embedding")
    if "tokens" in cost:  # late interaction: the question's and the chunks' token vectors
        out.add("token_vectors")
    return frozenset(out)


@functools.lru_cache(maxsize=1)
def default_encoder_dim() -> int:
    """The packaged all-MiniLM-L6-v2's dimension, read from its config (0 if absent)."""
    try:
        from chunksel.retrieval.encoder import Encoder

        return Encoder().dim
    except (ChunkselError, ImportError, OSError, ValueError, KeyError):
        return 0


@functools.lru_cache(maxsize=1)
def default_encoder_id() -> str:
    """The packaged all-MiniLM-L6-v2's ``model_id`` (hashes its files once per process)."""
    try:
        from chunksel.retrieval.encoder import Encoder

        return Encoder().model_id
    except (ChunkselError, ImportError, OSError, ValueError, KeyError):
        return ""


def data_fingerprint(instances: Sequence[Instance]) -> str:
    """sha256 (16 hex) of the questions' ids and texts and their candidates' ids, in order."""
    h = hashlib.sha256()
    for inst in instances:
        h.update(f"{inst.id}\t{inst.question.text}\t".encode())
        h.update("\x1f".join(c.id for c in inst.candidates).encode() + b"\n")
    return h.hexdigest()[:16]


def _feature_generator(features: Any) -> tuple[str, dict[str, int]]:
    if features is None:
        return "", {}
    gen = getattr(features, "generator_id", None)
    if not isinstance(gen, str):
        meta = getattr(features, "_meta", None)
        gen = meta.get("generator_id", "") if isinstance(meta, dict) else ""
    try:
        dims = {k: int(v) for k, v in dict(getattr(features, "dims", {}) or {}).items()}
    except (TypeError, ValueError):
        dims = {}
    return gen or "", dims


def training_provenance(selector: Any, train: Sequence[Instance], features: Any = None) -> dict[str, Any]:
    """The provenance record of ``selector`` fitted on ``train`` (see the module table)."""
    from chunksel import __version__

    train = list(train)
    inputs = selector_inputs(selector)
    gen_id, dims = _feature_generator(features) if "warmup" in inputs else ("", {})
    gen_id = gen_id or str(getattr(selector, "generator_id", "") or "")
    emb_dim = 0
    for inst in train:
        for c in inst.candidates:
            if c.embedding is not None:
                emb_dim = int(c.embedding.shape[-1])
                break
        if emb_dim:
            break
    enc_id = str(getattr(selector, "encoder_id", "") or "")
    if not enc_id and emb_dim and inputs & {"chunk_embedding", "question_embedding", "retrieval_score"}:
        enc_id = default_encoder_id() if default_encoder_dim() == emb_dim else ""
    label = getattr(selector, "label", None)
    label_source = label or ",".join(sorted({i.label_source for i in train}))
    corpora: dict[str, str] = {}
    if "corpus_stats" in inputs:
        from chunksel.selectors.bm25_stats import resolve_corpus

        for inst in train:
            ds = inst.question.dataset or inst.id.split(":", 1)[0]
            if ds not in corpora:
                corpora[ds] = resolve_corpus(getattr(selector, "corpus", None), inst)
    return {
        "version": PROVENANCE_VERSION,
        "chunksel_version": __version__,
        "datasets": sorted({i.question.dataset or i.id.split(":", 1)[0] for i in train}),
        "n_train": len(train),
        "label_source": label_source,
        "data_fingerprint": data_fingerprint(train),
        "generator_id": gen_id,
        "feature_dims": dims,
        "encoder_id": enc_id,
        "embedding_dim": emb_dim,
        "corpora": corpora,
        "retrieval_scores": any(not math.isnan(c.score) for i in train for c in i.candidates),
    }


def record_provenance(selector: Any, train: Any, features: Any) -> None:
    """Set ``selector.provenance_`` from a finished fit; never fails the fit itself."""
    if train is None:
        return
    try:
        selector.provenance_ = training_provenance(selector, train, features)
    except ChunkselError as err:  # e.g. no corpus known: the record says so
        from chunksel import __version__

        selector.provenance_ = {"version": PROVENANCE_VERSION, "chunksel_version": __version__,
                                "error": str(err)}
