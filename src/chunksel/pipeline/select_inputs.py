"""The checks and the embedding fill behind :meth:`ChunkSelector.select_batch`.

Every caller-supplied input is checked before any model runs, and each problem is one
:class:`~chunksel.errors.DataError` whose ``field`` attribute names the argument (the
server answers it as HTTP 422 with that field): chunks given as one string, wrong
embedding dimensions (both shapes named), counts that disagree, NaN. The deadline check
(:func:`check_deadline`) runs before each stage. What the caller did not give is encoded
in one encoder call, chunk texts through the content-addressed
:class:`~chunksel.retrieval.chunk_cache.EmbeddingCache`.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.errors import ConfigError, DataError, DeadlineExceeded
from chunksel.retrieval.chunk_cache import EmbeddingCache, cache_key
from chunksel.types import Candidate, Instance, Question


def field_error(field: str, message: str) -> DataError:
    """A :class:`DataError` that names the request field at fault (``err.field``)."""
    err = DataError(message)
    err.field = field  # type: ignore[attr-defined]
    return err


def check_deadline(deadline: float | None, stage: str) -> None:
    """Raise :class:`DeadlineExceeded` if ``deadline`` (``time.monotonic()`` seconds) has
    passed before ``stage`` starts."""
    if deadline is None:
        return
    late = time.monotonic() - deadline
    if late >= 0:
        raise DeadlineExceeded(f"the deadline passed {late * 1e3:.1f} ms before the {stage} stage", stage=stage)


def unit(v: np.ndarray) -> np.ndarray:
    return (v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)).astype(np.float32)


def as_list(arg: Any, b: int, what: str) -> list[Any]:
    """One entry per question (``None`` -> all ``None``)."""
    if arg is None:
        return [None] * b
    if isinstance(arg, (str, bytes)):
        raise field_error(what, f"{what} must be a list with one entry per question, got a string")
    arg = list(arg)
    if len(arg) != b:
        raise field_error(what, f"{what}: {len(arg)} entries for {b} questions")
    return arg


def _at(i: int, b: int) -> str:
    """Which question a message is about, in a batch of ``b``."""
    return f"question #{i}: " if b > 1 else ""


def check_embedding_model(selector: str, want: str, model: str) -> None:
    """Raise unless ``model`` names the encoder ``want`` that ``selector`` was trained with
    (``"sentence-transformers/all-MiniLM-L6-v2"`` matches ``"all-MiniLM-L6-v2-<hash>-L256"``).

    Raises:
        DataError: another model; the message names the fix.
    """
    def base(name: str) -> str:
        return re.sub(r"-[0-9a-f]{10}-l\d+$", "", str(name).rsplit("/", 1)[-1].lower())

    short = base(want)
    if base(model) != short:
        raise DataError(
            f"the {selector} selector compares {want!r} embeddings, but these come from {model!r}: its scores "
            f"would be meaningless. Pass the texts without embeddings (chunksel encodes them with {short}, e.g. "
            f"ChunkSelector.load(..., encoder='onnx-int8')), or embed the question and chunks with {short} as well"
        )


def check_score_scale(selector: str, encoder_id: str, scores_l: list[Any]) -> None:
    """Raise when the caller's ``chunk_scores`` cannot be the cosines of unit vectors that a
    selector trained on ``encoder_id``'s retrieval scores reads (another retriever's, e.g.
    BM25's, are on another scale and would mislead its features)."""
    for i, scores in enumerate(scores_l):
        if scores is None:
            continue
        s = np.asarray(scores, dtype=np.float64)
        if s.size and np.abs(s).max() > 1.0 + 1e-4:
            raise field_error(
                "chunk_scores", f"{_at(i, len(scores_l))}chunk_scores reach {np.abs(s).max():.4g}, but the {selector} "
                f"selector reads the cosine retrieval scores of {encoder_id} (in [-1, 1]): scores from another retriever "
                "(BM25?) would mislead it. Leave chunk_scores out (the cosines are computed from the embeddings; "
                "the chunks keep the order you give them), or pass the cosines")


def check_questions(questions: Any) -> list[str]:
    if isinstance(questions, str):
        raise field_error("questions", "questions must be a list of strings, got one string (use select())")
    questions = list(questions)
    for i, q in enumerate(questions):
        if not isinstance(q, str) or not q.strip():
            raise field_error("question", "empty question" + (f" (#{i})" if len(questions) > 1 else ""))
    return questions


def check_chunks(chunks_l: list[Any], emb_l: list[Any], scores_l: list[Any], title_l: list[Any],
                 reads_text: bool, name: str, dim: int | None) -> list[list[str]]:
    """Check each question's chunks and the caller's arrays (``emb_l`` is normalised in
    place); returns the chunk texts."""
    texts: list[list[str]] = []
    b = len(chunks_l)
    for i in range(b):
        emb = emb_l[i]
        if emb is not None:
            try:
                emb = np.asarray(emb, dtype=np.float32)
            except (TypeError, ValueError):
                raise field_error("chunk_embeddings", "chunk_embeddings must be an (n, d) array of numbers") from None
            if emb.ndim != 2 or emb.shape[0] == 0:
                raise field_error("chunk_embeddings",
                                  f"chunk_embeddings must be a non-empty (n, d) array, got shape {emb.shape}")
            if dim and emb.shape[1] != dim:
                raise field_error("chunk_embeddings", f"chunk_embeddings has shape {emb.shape}, but the {name} "
                                  f"selector reads {dim}-dimensional embeddings: expected ({emb.shape[0]}, {dim}). "
                                  "Another model's embeddings? Pass the retriever's all-MiniLM-L6-v2 vectors, or "
                                  "leave the embeddings out and chunksel encodes the texts")
            if not np.isfinite(emb).all():
                raise field_error("chunk_embeddings", "chunk_embeddings contain NaN or infinite values")
            zero = np.flatnonzero(~emb.any(axis=1))
            if zero.size:
                raise field_error("chunk_embeddings", f"{_at(i, b)}chunk_embeddings[{zero[0]}] is all zeros (a "
                                  "zero vector has no direction to compare): pass the chunk's real embedding")
            emb_l[i] = unit(emb)
        ch = chunks_l[i]
        if isinstance(ch, (str, bytes)):
            raise field_error("chunks", "chunks must be a list of strings, got one string "
                              "(wrap a single chunk in a list)")
        if ch is None:
            if emb is None:
                raise field_error("chunks", "no candidate chunks given")
            if reads_text:
                raise field_error("chunks", f"the {name} selector reads the chunks' text: pass chunks")
            ch = [f"chunk {j}" for j in range(emb.shape[0])]
        ch = list(ch)
        if not ch:
            raise field_error("chunks", "no candidate chunks given")
        for j, t in enumerate(ch):
            if not isinstance(t, str):
                raise field_error("chunks", f"{_at(i, b)}chunks[{j}] must be a string, got {type(t).__name__}")
            if not t.strip():
                raise field_error("chunks", f"{_at(i, b)}chunks[{j}] is empty" + (" (only whitespace)" if t else "")
                                  + ": drop it, or pass the chunk's text")
        if emb is not None and emb.shape[0] != len(ch):
            raise field_error("chunk_embeddings", f"{len(ch)} chunks but {emb.shape[0]} embeddings in chunk_embeddings")
        for field, arr in (("chunk_scores", scores_l[i]), ("titles", title_l[i])):
            if arr is None:
                continue
            if isinstance(arr, (str, bytes)) or not hasattr(arr, "__len__"):
                raise field_error(field, f"{field} must be a list with one entry per chunk")
            if len(arr) != len(ch):
                raise field_error(field, f"{len(ch)} chunks but {len(arr)} {field}")
        if scores_l[i] is not None:
            try:
                s = np.asarray(scores_l[i], dtype=np.float64)
            except (TypeError, ValueError):
                raise field_error("chunk_scores", "chunk_scores must be numbers") from None
            if s.ndim != 1:
                raise field_error("chunk_scores", f"chunk_scores must be a flat list, got shape {s.shape}")
            bad = np.flatnonzero(~np.isfinite(s))
            if bad.size:
                raise field_error("chunk_scores", f"chunk_scores[{bad[0]}] is not a finite number")
        texts.append(ch)
    return texts


def check_question_embeddings(qemb_l: list[Any], emb_l: list[Any], dim: int | None) -> None:
    """Flatten, check (finite, the chunk embeddings' dimension) and normalise in place."""
    for i, qv in enumerate(qemb_l):
        if qv is None:
            continue
        try:
            arr = np.asarray(qv, dtype=np.float32)
        except (TypeError, ValueError):
            raise field_error("question_embedding", "question_embedding must be a (d,) array of numbers") from None
        if arr.ndim > 1 and not (arr.ndim == 2 and arr.shape[0] == 1):
            raise field_error("question_embedding", f"question_embedding must have shape (d,), got {arr.shape}")
        arr = arr.reshape(-1)
        want = dim or (emb_l[i].shape[1] if emb_l[i] is not None else None)
        if want and arr.shape[0] != want:
            raise field_error("question_embedding", f"question_embedding has shape {arr.shape}, but the chunk "
                              f"embeddings are {want}-dimensional: expected ({want},)")
        if not np.isfinite(arr).all():
            raise field_error("question_embedding", "question_embedding contains NaN or infinite values")
        if not arr.any():
            raise field_error("question_embedding", f"{_at(i, len(qemb_l))}question_embedding is all zeros (a zero "
                              "vector has no direction to compare): pass the question's real embedding")
        qemb_l[i] = unit(arr)


def encoder_cache_id(encoder: Any) -> str:
    """What the embedding cache keys an encoder's vectors by."""
    return str(getattr(encoder, "cache_id", "") or getattr(encoder, "model_id", "") or type(encoder).__name__)


def fill_embeddings(encoder: Any, cache: EmbeddingCache | None, inputs: frozenset[str] | set[str],
                    questions: list[str], texts: list[list[str]], titles: list[Any], n_scored: list[int],
                    emb_l: list[Any], qemb_l: list[Any], skip_scores: list[bool]) -> dict[str, int]:
    """Encode what the caller did not give: the chunks' embeddings (through ``cache``) and
    the questions' (a question's only when the selector reads it or a retrieval score).
    ``encoder`` may be a function that returns it: it is called only when something is
    encoded (a caller that passes every embedding needs no encoder installed).

    Returns ``{"chunks": chunk texts embedded, "chunks_encoded": those the cache did not
    hold, "questions": questions encoded}``.
    """
    need_e = bool(inputs & {"chunk_embedding", "retrieval_score"})
    todo_e = [i for i in range(len(texts)) if need_e and emb_l[i] is None and (
        "chunk_embedding" in inputs or not skip_scores[i])]
    todo_q = [i for i in range(len(texts)) if qemb_l[i] is None and (
        "question_embedding" in inputs or ("retrieval_score" in inputs and not skip_scores[i]))]
    flat = []
    for i in todo_e:
        ts = titles[i]
        flat += [((ts[j] + " " if ts is not None and ts[j] else "") + texts[i][j]).strip()
                 for j in range(n_scored[i])]
    qs = [questions[i] for i in todo_q]
    if not flat and not qs:
        return {"chunks": 0, "chunks_encoded": 0, "questions": 0}
    if callable(encoder) and not hasattr(encoder, "encode"):
        encoder = encoder()

    def encode(batch: list[str]) -> np.ndarray:
        return np.asarray(encoder.encode(batch, progress=False), dtype=np.float32)

    if cache is not None and flat:
        # chunks through the cache; the questions go with the cache misses in one call
        enc_id = encoder_cache_id(encoder)
        got = cache.get_many([cache_key(t, enc_id) for t in flat])
        missing = list(dict.fromkeys(flat[j] for j, v in enumerate(got) if v is None))
        vecs = encode(missing + qs) if missing or qs else None
        if missing:
            cache.put_many([cache_key(t, enc_id) for t in missing], vecs[: len(missing)])
            by_text = dict(zip(missing, vecs[: len(missing)], strict=True))
            got = [v if v is not None else by_text[flat[j]] for j, v in enumerate(got)]
        chunk_vecs = np.stack(got)
        q_vecs = vecs[len(missing):] if vecs is not None else None
        n_encoded = len(missing)
    else:
        vecs = encode(flat + qs)
        chunk_vecs, q_vecs = vecs[: len(flat)], vecs[len(flat):]
        n_encoded = len(flat)
    at = 0
    for i in todo_e:
        full = np.zeros((len(texts[i]), chunk_vecs.shape[1]), dtype=np.float32)
        full[: n_scored[i]] = chunk_vecs[at: at + n_scored[i]]
        emb_l[i] = full
        at += n_scored[i]
    for n, i in enumerate(todo_q):
        qemb_l[i] = q_vecs[n]
    return {"chunks": len(flat), "chunks_encoded": n_encoded, "questions": len(qs)}

def make_cache(spec: Any, kind: type = EmbeddingCache, arg: str = "embedding_cache") -> Any:
    """``embedding_cache=`` (or, with ``kind=TokenCache``, ``token_cache=``) of
    :class:`ChunkSelector` -> a cache of that kind or None: ``True`` = memory only, a path =
    backed by that SQLite file, ``False``/``None`` = none, or a cache object."""
    if spec is None or spec is False:
        return None
    if spec is True:
        return kind()
    if isinstance(spec, (str, Path)):
        return kind(path=spec)
    if isinstance(spec, kind):
        return spec
    raise ConfigError(f"{arg} must be True, False, a SQLite path or a {kind.__name__}, got {spec!r}")


def trained_dim(selector: Any, provenance: dict[str, Any]) -> int:
    """The embedding dimension ``selector`` was trained on (0 when it reads none or it is unknown)."""
    layout = getattr(selector, "layout_", None)
    if layout is not None and getattr(layout, "d_e", 0):
        return int(layout.d_e)
    dim = provenance.get("embedding_dim")
    return int(dim) if isinstance(dim, int) and not isinstance(dim, bool) and dim > 0 else 0


def build_instances(questions: list[str], texts: list[list[str]], n_scored: list[int], emb_l: list[Any],
                    qemb_l: list[Any], scores_l: list[Any], title_l: list[Any], reads_score: bool,
                    qtok_l: list[Any] | None = None, ctok_l: list[Any] | None = None) -> list[Instance]:
    """The selector's input: one :class:`Instance` per question with its first
    ``n_scored`` chunks; a chunk's retrieval score is the caller's, else the cosine of the
    embeddings when the selector reads one, else NaN. ``qtok_l`` / ``ctok_l``: token
    vectors (:mod:`chunksel.pipeline.token_inputs`), set as ``Question.tokens`` /
    ``Candidate.tokens``."""
    batch = []
    for i, text in enumerate(questions):
        qv = qemb_l[i]
        q = Question(id=f"q{i}", text=text.strip(), dataset="user",
                     embedding=None if qv is None else np.asarray(qv, dtype=np.float32),
                     tokens=None if qtok_l is None else qtok_l[i])
        ctoks = None if ctok_l is None else ctok_l[i]
        cands = []
        for j in range(n_scored[i]):
            e = None if emb_l[i] is None else emb_l[i][j]
            if scores_l[i] is not None:
                s = float(scores_l[i][j])
            elif reads_score and e is not None and qv is not None:
                s = float(np.dot(qv, e))
            else:
                s = float("nan")
            cands.append(Candidate(id=str(j), text=texts[i][j], rank=j, score=s, embedding=e,
                                   title=str(title_l[i][j]) if title_l[i] is not None else "",
                                   tokens=None if ctoks is None else ctoks[j]))
        batch.append(Instance(question=q, candidates=cands))
    return batch


def given_features(f: Any) -> tuple[np.ndarray, np.ndarray]:
    """A caller's warm-up features ``{"h": array, "r": array}`` as two float32 vectors."""
    try:
        return np.asarray(f["h"], dtype=np.float32).reshape(-1), np.asarray(f["r"], dtype=np.float32).reshape(-1)
    except (KeyError, TypeError, ValueError):
        raise DataError('features must be {"h": array, "r": array}') from None


def warm_features(questions: list[str], given: list[Any], warm_up: Any, extract: Any) -> tuple[Any, list[Any]]:
    """The warm-up features of every question (the caller's where ``given``): one question
    alone keeps its warm-up pass and KV cache (``warm_up(question)``), several run as one
    batch (``extract(texts)`` -> ``{"h", "r"}``). Returns the features and the warm-ups."""
    from chunksel.features.base import InMemoryFeatures

    todo = [i for i, f in enumerate(given) if f is None]
    warm_ups: list[Any] = [None] * len(questions)
    h: list[Any] = [None] * len(questions)
    r: list[Any] = [None] * len(questions)
    for i, f in enumerate(given):
        if f is not None:
            h[i], r[i] = given_features(f)
    if len(todo) == 1:
        i = todo[0]
        warm_ups[i] = warm_up(questions[i])
        h[i], r[i] = warm_ups[i].h, warm_ups[i].r
    elif todo:
        got = extract([questions[i] for i in todo])
        for n, i in enumerate(todo):
            h[i], r[i] = got["h"][n], got["r"][n]
    if len({len(x) for x in h}) != 1 or len({len(x) for x in r}) != 1:
        raise DataError("features of different sizes in one batch")
    return InMemoryFeatures([f"q{i}" for i in range(len(questions))], h=np.stack(h), r=np.stack(r)), warm_ups


#: selectors that need no training but cannot choose chunks for a new question
_NOT_APPLICATION = {"oracle": "it reads the gold labels, which a new question does not have"}


def load_or_make(path: str | Path, quantize: str | None = None, engine: str | None = None) -> tuple[Any, Any]:
    """``ChunkSelector.load``'s selector: a saved selector directory (checksums verified),
    the name of a shipped pretrained one (``"anchored-base"``, ``"lambdamart-base"``,
    :mod:`chunksel.pretrained`), or the registered name of one that needs no training;
    returns (selector, the directory or None).

    Raises:
        ConfigError: a registered name that must be trained first (the message says
            how), ``quantize=`` / ``engine=`` on anything but a saved prototype.
        DataError: neither a saved selector directory nor a registered name.
    """
    from chunksel.pretrained import resolve
    from chunksel.selectors import REGISTRY, get_selector_class, make_selector
    from chunksel.selectors.base import read_config

    name = str(path)
    path = resolve(path)  # a shipped model's name: its folder
    if name in REGISTRY and not Path(path).expanduser().exists():
        if quantize is not None or engine is not None:
            raise ConfigError(f"quantize= and engine= apply to a saved prototype selector, not {name!r}")
        if name in _NOT_APPLICATION:
            raise ConfigError(f"selector {name!r} cannot select chunks for new questions: {_NOT_APPLICATION[name]}")
        sel = make_selector(name, **({"progress": False} if name == "bm25" else {}))
        if not sel.is_fitted():
            raise ConfigError(f"selector {name!r} must be trained first: chunksel train --selector {name} "
                              "--out DIR, then ChunkSelector.load(DIR)")
        return sel, None
    try:
        name = read_config(path)["name"]
    except DataError as err:
        if any(ch in str(path) for ch in "/\\") or str(path).startswith((".", "~")):
            raise
        raise DataError(f"{err}; nor is {str(path)!r} a registered selector (known: {', '.join(sorted(REGISTRY))})"
                        ) from None
    cls_ = get_selector_class(name)
    if quantize is not None or engine is not None:
        if name != "prototype":
            raise ConfigError(f"quantize= and engine= apply to a prototype selector, not {name!r}")
        return cls_.load(path, quantize=quantize, engine=engine), path
    return cls_.load(path), path
