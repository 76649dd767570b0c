"""Errors raised for bad input: one clear line naming the problem."""

from __future__ import annotations


class ChunkselError(Exception):
    """Base class for every error chunksel raises on purpose.

    The CLI prints ``str(err)`` as a single ``error: ...`` line and exits with status 2,
    so the message must name the problem and, where possible, the fix.
    """


class DataError(ChunkselError, ValueError):
    """Missing, malformed or inconsistent input data (data root, files, records)."""


class ConfigError(ChunkselError, ValueError):
    """An unknown name or an impossible setting (dataset, selector, K, layout)."""


class ArgumentTypeError(ConfigError, TypeError):
    """An argument of the wrong type (``k="2"``); the message says what it accepts. Still a
    :class:`ConfigError`, so code that catches those catches it too."""


class NotFittedError(ChunkselError, RuntimeError):
    """A selector that requires fitting was used before ``fit``."""


class MissingExtraError(ChunkselError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""


class UnscoredChunksWarning(UserWarning):
    """More candidate chunks were given than the model scores (its K): the rest were not
    scored and cannot be selected."""


def require(module: str, extra: str):
    """Import ``module`` or raise :class:`MissingExtraError` naming ``chunksel[extra]``."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise MissingExtraError(
            f"{module!r} is not installed: pip install 'chunksel[{extra}]'"
        ) from err


class DeadlineExceeded(ChunkselError, TimeoutError):
    """A request's deadline passed before one of its stages (encode, warm-up, score)
    started; the message names the stage. The work of that stage was not done."""

    def __init__(self, message: str, stage: str = "") -> None:
        super().__init__(message)
        self.stage = stage

    def __reduce__(self):  # picklable across worker processes with its stage
        return (type(self), (str(self), self.stage))
