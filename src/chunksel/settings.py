"""Process settings: where data and cache live, which labels apply, how many threads.

One frozen :class:`Settings` is built once by the command line (from its options, then the
environment); the command runs inside :func:`use` and passes the fields down as
parameters. Library functions given no value fall back to :func:`current`: the settings in
use, else those of the environment (:meth:`Settings.from_env`). This module and
``chunksel.cli`` are the only places that read ``CHUNKSEL_*`` environment variables.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
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

    def to_args(self) -> list[str]:
        """The command-line options that give a child ``chunksel`` process these settings
        (data root, cache, label; threads and quiet are each command's own)."""
        out: list[str] = []
        for flag, value in (("--data-root", self.data_root), ("--cache", self.cache_dir), ("--label", self.label)):
            if value:
                out += [flag, str(value)]
        return out


_active: list[Settings] = []


def current() -> Settings:
    """The settings in use (the innermost :func:`use`), else the environment's."""
    return _active[-1] if _active else Settings.from_env()


@contextmanager
def use(settings: Settings) -> Iterator[Settings]:
    """Run the block with ``settings`` as :func:`current` (the command line runs each
    command inside one); the previous settings come back afterwards."""
    _active.append(settings)
    try:
        yield settings
    finally:
        _active.pop()


__all__ = ["CACHE_ENV", "DATA_ENV", "LABEL_ENV", "Settings", "current", "use"]
