"""The retriever encoder on ONNX Runtime: all-MiniLM-L6-v2 exported as an fp32 or int8
graph (:mod:`chunksel.export.encoder`), tokenised by the model's own ``tokenizer.json``
(the ``tokenizers`` library), no torch at query time.

Same interface as :class:`~chunksel.retrieval.encoder.Encoder` (``encode``,
``encode_questions``, ``model_id``, ``dim``): the ``model_id`` is the source model's,
because the embeddings are that model's (each graph is checked at export to stay within
cosine 0.99 of sentence-transformers per text), so a selector trained on MiniLM
embeddings accepts it. ``cache_id`` tells the engines apart for the chunk-embedding cache.
fp32 texts are encoded in batches of near-equal length (:func:`length_batches`: a short
question is never padded to a long chunk's length, which halves the time of a question and
five 100-word chunks on one thread); int8 texts one at a time, so that a text's vector does
not depend on the texts encoded with it (dynamic quantisation reads the batch's range). The graph is exported on
first use when absent (that needs torch and transformers once).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.errors import ConfigError, DataError, require
from chunksel.types import Question

ENGINES = ("torch", "onnx", "onnx-int8")


def length_batches(lengths: Sequence[int], batch_size: int, waste: float = 0.1) -> list[list[int]]:
    """Indices grouped into batches, longest first, so that padding adds at most ``waste``
    of the tokens of a batch: a padded token costs as much as a real one (attention
    quadratically), so a short question is not padded to a long chunk's length. One
    text alone when nothing else is close in length."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        b = batches[-1] if batches else None
        if (b is not None and len(b) < batch_size
                and lengths[b[0]] * (len(b) + 1) <= (1 + waste) * (sum(lengths[j] for j in b) + lengths[i])):
            b.append(i)
        else:
            batches.append([i])
    return batches


class OnnxEncoder:
    """Encode texts into L2-normalised float32 vectors with an exported MiniLM graph.

    Args:
        model: a local sentence-transformers directory (default: the packaged MiniLM).
        quantize: ``"int8"`` (dynamic quantisation, the fast one) or ``"fp32"``.
        threads: ONNX Runtime intra-op threads (default 1: one per server worker).
        batch_size: texts per graph call (fp32; int8 encodes each text alone).
        max_seq_length: tokens kept per text.
        path: an export folder (default: the cache's, exported on first use).
    """

    def __init__(self, model: str | Path | None = None, quantize: str = "int8", threads: int | None = 1,
                 batch_size: int = 64, max_seq_length: int = 256, path: str | Path | None = None) -> None:
        from chunksel.retrieval.encoder import Encoder

        if quantize not in ("fp32", "int8"):
            raise ConfigError(f"ONNX encoder quantize must be 'fp32' or 'int8', got {quantize!r}")
        if batch_size < 1:
            raise ConfigError(f"encoder batch_size must be >= 1, got {batch_size}")
        if threads is not None and threads < 1:
            raise ConfigError(f"encoder threads must be >= 1, got {threads}")
        self._source = Encoder(model, max_seq_length=max_seq_length)  # ids, paths: loads no weights
        self.model_dir = self._source.model_dir
        self.quantize = quantize
        self.threads = threads
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length
        self.path = None if path is None else Path(path)
        self.n_encoded = 0
        self._session: Any = None
        self._tok: Any = None

    @property
    def model_id(self) -> str:
        return self._source.model_id

    @property
    def cache_id(self) -> str:
        """Tells this engine's vectors apart in the chunk-embedding cache."""
        return f"{self.model_id}-onnx-{self.quantize}"

    @property
    def dim(self) -> int:
        return self._source.dim

    def load(self) -> OnnxEncoder:
        """Open the graph (exporting it first when absent); checks the file digests."""
        if self._session is not None:
            return self
        require("onnxruntime", "export")  # the extra, named when it is missing
        from chunksel.export.encoder import (
            default_dir,
            export_encoder,
            graph_file,
            load_tokenizer,
            session,
        )

        folder = self.path or default_dir(self.model_id)
        meta_file = folder / "meta.json"
        if not self._exported(meta_file):
            if self.path is not None:
                raise DataError(f"{folder} holds no {self.quantize} encoder export (chunksel.export.encoder)")
            import fcntl

            folder.parent.mkdir(parents=True, exist_ok=True)
            with open(folder.parent / f".{folder.name}.lock", "w") as lock:  # one exporter (server workers)
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not self._exported(meta_file):
                    export_encoder(self.model_dir, folder, self.model_id, max_seq_length=self.max_seq_length)
        meta = json.loads(meta_file.read_text())
        if meta.get("model_id") != self.model_id or meta.get("max_seq_length") != self.max_seq_length:
            raise DataError(f"{folder}: exported from {meta.get('model_id')!r} (L{meta.get('max_seq_length')}), "
                            f"not {self.model_id!r}: export it again")
        graph = folder / graph_file(self.quantize)
        for name in (graph.name, "tokenizer.json"):
            digest = hashlib.sha256((folder / name).read_bytes()).hexdigest()
            if digest != meta.get("sha256", {}).get(name):
                raise DataError(f"corrupt encoder export {folder}: {name} does not match its checksum")
        self._session = session(graph, self.quantize, self.threads)
        self._tok = load_tokenizer(folder / "tokenizer.json", self.max_seq_length)
        self._pad_id = self._tok.token_to_id("[PAD]") or 0
        return self

    def _exported(self, meta_file: Path) -> bool:
        """An export holding this graph; an int8 graph of an older recipe is made again
        (only in the cache's own folder: a given ``path`` is used as it is)."""
        from chunksel.export.encoder import INT8_RECIPE

        if not meta_file.is_file():
            return False
        meta = json.loads(meta_file.read_text())
        if self.quantize not in meta.get("quantize", []):
            return False
        stale = self.quantize == "int8" and (meta.get("int8") or {}).get("recipe") != INT8_RECIPE
        return self.path is not None or not stale

    def encode(self, texts: Sequence[str], progress: bool = False, batch_size: int | None = None) -> np.ndarray:
        """Embed ``texts`` -> float32 ``(N, dim)``, each row L2-normalised."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        self.load()
        enc = self._tok.encode_batch(texts)
        rows = [e.ids[: sum(e.attention_mask)] for e in enc]
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        # int8: each text alone. Dynamic quantisation takes the activations' range from the
        # whole batch, so a batched text's vector would depend on its neighbours; alone it is
        # the same in any call (what the chunk-embedding cache assumes) and closer to fp32.
        bs = 1 if self.quantize == "int8" else (batch_size or self.batch_size)
        for idx in length_batches([len(r) for r in rows], bs):
            width = len(rows[idx[0]])
            ids = np.full((len(idx), width), self._pad_id, dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for j, i in enumerate(idx):
                ids[j, : len(rows[i])] = rows[i]
                mask[j, : len(rows[i])] = 1
            out[idx] = self._session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        self.n_encoded += len(texts)
        return out

    def encode_questions(self, questions: Sequence[Question | str], progress: bool = False) -> np.ndarray:
        texts = []
        for q in questions:
            text = q.text if isinstance(q, Question) else q
            if not isinstance(text, str) or not text.strip():
                raise DataError(f"empty question (id {q.id if isinstance(q, Question) else f'#{len(texts)}'})")
            texts.append(text)
        return self.encode(texts, progress=progress)

    def __getstate__(self) -> dict[str, Any]:  # picklable to bulk workers: each opens its own session
        return {**self.__dict__, "_session": None, "_tok": None}

    def __repr__(self) -> str:
        return f"OnnxEncoder({str(self.model_dir)!r}, quantize={self.quantize!r})"


def make_encoder(engine: str = "torch", model: str | Path | None = None, threads: int | None = None,
                 **kwargs: Any) -> Any:
    """An encoder by engine: ``"torch"`` (sentence-transformers), ``"onnx"`` (fp32 graph)
    or ``"onnx-int8"`` (the int8 graph)."""
    if engine == "torch":
        from chunksel.retrieval.encoder import Encoder

        return Encoder(model, **kwargs)
    if engine in ("onnx", "onnx-int8"):
        return OnnxEncoder(model, quantize="int8" if engine == "onnx-int8" else "fp32",
                           threads=threads or 1, **kwargs)
    raise ConfigError(f"unknown encoder engine {engine!r}; use one of {', '.join(ENGINES)}")
