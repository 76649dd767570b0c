"""Process settings: where data and cache live, which labels apply, how many threads.

One frozen :class:`Settings` is built once by the command line (from its options, then the
environment) and its fields are passed down as plain parameters. This module and
``chunksel.cli`` are the only places that read ``CHUNKSEL_*`` environment variables; library
code that is given no value falls back to :meth:`Settings.from_env`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

#: environment variables a :class:`Settings` is read from (``from_env``)
DATA_ENV = "CHUNKSEL_DATA"
CACHE_ENV = "CHUNKSEL_CACHE"
LABEL_ENV = "CHUNKSEL_LABEL"


@dataclass(frozen=True)
class Settings:
    """What a run is configured with, beside each command's own options.

    Attributes:
        data_root: read-only input root (the benchmark data); None: not configured.
        cache_dir: root of every generated artifact; None: ``~/.cache/chunksel``.
        label: label spec replacing each dataset's default (``"semantic"``,
            ``"containment|gold"``, ...); None: each dataset's own.
        threads: CPU threads for torch/BLAS/FAISS; None: no limit.
        quiet: no progress bars.
    """

    data_root: str | None = None
    cache_dir: str | None = None
    label: str | None = None
    threads: int | None = None
    quiet: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings the environment gives (``CHUNKSEL_DATA``, ``CHUNKSEL_CACHE``,
        ``CHUNKSEL_LABEL``); empty values count as unset."""
        env = os.environ if environ is None else environ
        return cls(data_root=env.get(DATA_ENV) or None, cache_dir=env.get(CACHE_ENV) or None,
                   label=env.get(LABEL_ENV) or None)


def env_data_root() -> str | None:
    """``$CHUNKSEL_DATA`` (None when unset or empty)."""
    return Settings.from_env().data_root


def env_cache_dir() -> str | None:
    """``$CHUNKSEL_CACHE`` (None when unset or empty)."""
    return Settings.from_env().cache_dir


def env_label() -> str | None:
    """``$CHUNKSEL_LABEL`` (None when unset or empty)."""
    return Settings.from_env().label


__all__ = ["CACHE_ENV", "DATA_ENV", "LABEL_ENV", "Settings", "env_cache_dir", "env_data_root", "env_label"]
