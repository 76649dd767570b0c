"""A content-addressed cache of chunk embeddings: the same chunk text, encoded by the same
encoder, is embedded once.

A retriever returns the same popular chunks query after query, so a server that encodes
raw chunk text spends most of its encoder time re-encoding chunks it has seen. Keys are
the SHA-256 of the encoder id and the exact text given to the encoder (title included),
so a different encoder or a changed text never hits. The memory tier is a bounded LRU
(``max_items`` vectors); the optional disk tier is one SQLite file (WAL mode, so several
server worker processes can share it) that survives restarts. Both are thread-safe.

:class:`TokenCache` keeps a chunk's token vectors the same way (int8 codes,
:mod:`chunksel.retrieval.tokens`), for late interaction (the ``maxsim`` selector): in
memory, and in the same SQLite file's ``tok`` table.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.errors import ConfigError


def cache_key(text: str, encoder_id: str) -> str:
    """The content address of ``text`` embedded by encoder ``encoder_id``."""
    return hashlib.sha256(encoder_id.encode() + b"\0" + text.encode("utf-8", "surrogatepass")).hexdigest()[:40]


class _Tiered:
    """A bounded in-memory LRU of arrays by key, optionally backed by one table of a SQLite
    file; subclasses say how a row is read (``_SELECT``, :meth:`_decode`) and written."""

    _WHAT = "cache"
    _SELECT = ""

    def __init__(self, max_items: int, path: str | Path | None) -> None:
        if isinstance(max_items, bool) or not isinstance(max_items, int) or max_items < 0:
            raise ConfigError(f"{self._WHAT} max_items must be a whole number >= 0, got {max_items!r}")
        self.max_items = max_items
        self.path = None if path is None else Path(path).expanduser()
        self._mem: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self.hits = 0
        self.misses = 0
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = open_cache_db(self.path)

    def __len__(self) -> int:
        return len(self._mem)

    def _decode(self, row: tuple) -> np.ndarray:
        raise NotImplementedError

    def get_many(self, keys: Sequence[str]) -> list[np.ndarray | None]:
        """The cached array of each key (``None`` where absent)."""
        out: list[np.ndarray | None] = []
        with self._lock:
            for k in keys:
                v = self._mem.get(k)
                if v is not None:
                    self._mem.move_to_end(k)
                elif self._db is not None:
                    row = self._db.execute(self._SELECT, (k,)).fetchone()
                    if row is not None:
                        v = self._decode(row)
                        self._remember(k, v)
                out.append(v)
            found = sum(v is not None for v in out)
            self.hits += found
            self.misses += len(out) - found
        return out

    def _put(self, keys: Sequence[str], values: Sequence[np.ndarray], insert: str, rows: list[tuple]) -> None:
        with self._lock:
            for k, v in zip(keys, values, strict=True):
                self._remember(k, v)
            if self._db is not None:
                self._db.executemany(insert, rows)
                self._db.commit()

    def _remember(self, key: str, vec: np.ndarray) -> None:
        if self.max_items == 0:
            return
        self._mem[key] = vec
        self._mem.move_to_end(key)
        while len(self._mem) > self.max_items:
            self._mem.popitem(last=False)

    def clear(self) -> None:
        """Forget the memory tier (the disk tier stays)."""
        with self._lock:
            self._mem.clear()

    def stats(self) -> dict[str, Any]:
        return {"items": len(self._mem), "max_items": self.max_items, "hits": self.hits, "misses": self.misses,
                "disk": self.path is not None}


class EmbeddingCache(_Tiered):
    """Bounded in-memory LRU of embeddings, optionally backed by a SQLite file.

    Args:
        max_items: vectors kept in memory (MiniLM: 1.5 KB each); the least recently used
            go first.
        path: a SQLite file for a persistent tier (created if absent); ``None`` = memory only.

    Attributes:
        hits, misses: lookups answered and not answered (memory or disk).
    """

    _WHAT = "embedding cache"
    _SELECT = "SELECT dim, vec FROM emb WHERE key = ?"

    def __init__(self, max_items: int = 20_000, path: str | Path | None = None) -> None:
        super().__init__(max_items, path)

    def _decode(self, row: tuple) -> np.ndarray:
        return np.frombuffer(row[1], dtype=np.float32, count=row[0]).copy()

    def put_many(self, keys: Sequence[str], vectors: np.ndarray) -> None:
        """Store one vector per key (float32 copies)."""
        vectors = np.asarray(vectors, dtype=np.float32)
        self._put(keys, [v.copy() for v in vectors], "INSERT OR REPLACE INTO emb (key, dim, vec) VALUES (?, ?, ?)",
                  [(k, int(v.shape[0]), v.tobytes()) for k, v in zip(keys, vectors, strict=True)])


def open_cache_db(path: Path, wait_s: float = 30.0) -> sqlite3.Connection:
    """Open (or create) a chunk cache's SQLite file in WAL mode, with its tables:
    ``emb`` (embeddings), ``tok`` (token vectors) and ``score`` (pair scores, e.g.
    MaxSim's, :mod:`chunksel.selectors.late_features`). Several server workers open one file
    at once, and switching a new file to WAL answers "database is locked" at once
    instead of waiting on the busy timeout: the set-up is retried until ``wait_s``."""
    give_up = time.monotonic() + wait_s
    delay = 0.01
    while True:
        db = None
        try:
            db = sqlite3.connect(str(path), check_same_thread=False, timeout=wait_s)
            if db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE IF NOT EXISTS emb (key TEXT PRIMARY KEY, dim INTEGER, vec BLOB)")
            db.execute("CREATE TABLE IF NOT EXISTS tok (key TEXT PRIMARY KEY, n INTEGER, dim INTEGER, codes BLOB)")
            db.execute("CREATE TABLE IF NOT EXISTS score (key TEXT PRIMARY KEY, value REAL)")
            db.commit()
            return db
        except sqlite3.OperationalError as err:
            if db is not None:
                db.close()
            if "locked" not in str(err) or time.monotonic() > give_up:
                raise ConfigError(f"embedding cache {str(path)!r} is not a usable SQLite file ({err})") from None
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
        except sqlite3.DatabaseError as err:
            if db is not None:
                db.close()
            raise ConfigError(f"embedding cache {str(path)!r} is not a usable SQLite file ({err})") from None


def encode_cached(encode: Callable[[list[str]], np.ndarray], texts: Sequence[str], encoder_id: str,
                  cache: EmbeddingCache | None) -> np.ndarray:
    """Embed ``texts`` with ``encode``, taking the vectors ``cache`` holds and encoding
    only the rest (in one call); the new vectors are stored."""
    texts = list(texts)
    if cache is None or not texts:
        return encode(texts)
    keys = [cache_key(t, encoder_id) for t in texts]
    got = cache.get_many(keys)
    todo = [i for i, v in enumerate(got) if v is None]
    if todo:
        # a text repeated within the call is encoded once
        uniq = list(dict.fromkeys(texts[i] for i in todo))
        vecs = encode(uniq)
        by_text = dict(zip(uniq, vecs, strict=True))
        cache.put_many([cache_key(t, encoder_id) for t in uniq], vecs)
        for i in todo:
            got[i] = by_text[texts[i]]
    return np.stack(got).astype(np.float32, copy=False)


class TokenCache(_Tiered):
    """Bounded in-memory LRU of chunks' stored token vectors (int8 codes), optionally
    backed by the ``tok`` table of a SQLite file (the embedding cache's file can be shared).

    Args:
        max_items: chunks kept in memory (about 50 KB each for a 130-token chunk).
        path: a SQLite file for a persistent tier; ``None`` = memory only.
    """

    _WHAT = "token cache"
    _SELECT = "SELECT n, dim, codes FROM tok WHERE key = ?"

    def __init__(self, max_items: int = 2_000, path: str | Path | None = None) -> None:
        super().__init__(max_items, path)

    def _decode(self, row: tuple) -> np.ndarray:
        return np.frombuffer(row[2], dtype=np.int8, count=row[0] * row[1]).reshape(row[0], row[1])

    def put_many(self, keys: Sequence[str], codes: Sequence[np.ndarray]) -> None:
        """Store one chunk's int8 codes per key."""
        codes = [np.ascontiguousarray(c) for c in codes]
        for c in codes:
            if c.dtype != np.int8 or c.ndim != 2:
                raise ConfigError(f"the token cache stores (tokens, dim) int8 codes, got {c.dtype} {c.shape}")
        self._put(keys, codes, "INSERT OR REPLACE INTO tok (key, n, dim, codes) VALUES (?, ?, ?, ?)",
                  [(k, c.shape[0], c.shape[1], c.tobytes()) for k, c in zip(keys, codes, strict=True)])


def tokens_cached(encoder: Any, texts: Sequence[str], cache: TokenCache | None,
                  embeddings: Callable[[list[str], np.ndarray], None] | None = None) -> list[np.ndarray]:
    """Each chunk text's stored token vectors (int8 codes): from ``cache`` where it holds
    them, the rest encoded in one call and stored. ``embeddings``: given, the texts encoded
    here go through :meth:`~chunksel.retrieval.encoder.Encoder.encode_with_tokens` and it
    receives their embeddings from the same pass (``embeddings(texts, vectors)``)."""
    from chunksel.retrieval.tokens import chunk_codes, pack

    def encode(batch: list[str]) -> list[np.ndarray]:
        if embeddings is None or not batch:
            return chunk_codes(encoder, batch)
        vecs, toks = encoder.encode_with_tokens(batch)
        embeddings(batch, vecs)
        return [pack(t) for t in toks]

    texts = list(texts)
    if cache is None or not texts:
        return encode(texts)
    keys = [cache_key(t, encoder.model_id + "#tokens") for t in texts]
    got = cache.get_many(keys)
    todo = [i for i, v in enumerate(got) if v is None]
    if todo:
        uniq = list(dict.fromkeys(texts[i] for i in todo))
        codes = encode(uniq)
        cache.put_many([cache_key(t, encoder.model_id + "#tokens") for t in uniq], codes)
        by_text = dict(zip(uniq, codes, strict=True))
        for i in todo:
            got[i] = by_text[texts[i]]
    return [g for g in got if g is not None]
