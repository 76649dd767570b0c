"""The command line's LLM backend options, defined once for every command that takes an LLM.

:func:`add_llm_arguments` adds ``--llm-concurrency``, ``--llm-timeout``, ``--llm-retries``,
``--llm-extra JSON`` and ``--llm-token-field`` to a parser; :func:`backend_options` reads them back as
:class:`~chunksel.llm.openai_http.OpenAIBackend` arguments; :func:`backend_from_args` builds
the backend a command's target names (``local`` or an ``http(s)://`` base URL). The
options set an HTTP server's client; with ``local`` they are refused with a one-line
error rather than ignored.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from chunksel.errors import ConfigError

#: the attribute names :func:`add_llm_arguments` sets, and the flag each comes from
FLAGS = {"llm_concurrency": "--llm-concurrency", "llm_timeout": "--llm-timeout", "llm_retries": "--llm-retries",
         "llm_extra": "--llm-extra", "llm_token_field": "--llm-token-field"}


def add_llm_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the HTTP backend's options to ``parser`` (see the module docstring)."""
    g = parser.add_argument_group("LLM server options (with an http(s):// LLM)")
    g.add_argument("--llm-concurrency", type=int, default=None, metavar="N",
                   help="requests in flight at once; questions are sent concurrently up to it (default 4)")
    g.add_argument("--llm-timeout", type=float, default=None, metavar="S",
                   help="seconds per request before it is retried (default 60)")
    g.add_argument("--llm-retries", type=int, default=None, metavar="N",
                   help="retries of a failed request before the question falls back to retrieval order (default 5)")
    g.add_argument("--llm-extra", default=None, metavar="JSON",
                   help='more JSON fields for every request, e.g. \'{"chat_template_kwargs": '
                        '{"enable_thinking": false}}\' or \'{"seed": 0}\'')
    g.add_argument("--llm-token-field", default=None, choices=["max_tokens", "max_completion_tokens"],
                   help="the request field of the token budget (max_completion_tokens for "
                        "OpenAI's reasoning models; default max_tokens)")


def backend_options(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`~chunksel.llm.openai_http.OpenAIBackend` arguments the flags set.

    Raises:
        ConfigError: a non-positive concurrency or timeout, or ``--llm-extra`` that is not
            a JSON object.
    """
    out: dict[str, Any] = {}
    conc = getattr(args, "llm_concurrency", None)
    if conc is not None:
        if conc < 1:
            raise ConfigError(f"--llm-concurrency must be >= 1, got {conc}")
        out["max_concurrency"] = conc
    timeout = getattr(args, "llm_timeout", None)
    if timeout is not None:
        if not timeout > 0:
            raise ConfigError(f"--llm-timeout must be > 0 seconds, got {timeout}")
        out["timeout"] = timeout
    retries = getattr(args, "llm_retries", None)
    if retries is not None:
        if retries < 0:
            raise ConfigError(f"--llm-retries must be >= 0, got {retries}")
        out["max_retries"] = retries
    raw = getattr(args, "llm_extra", None)
    if raw is not None:
        try:
            extra = json.loads(raw)
        except ValueError as err:
            raise ConfigError(f"--llm-extra is not valid JSON ({err}): {raw[:80]!r}") from None
        if not isinstance(extra, dict):
            raise ConfigError(f"--llm-extra must be a JSON object, got {type(extra).__name__}: {raw[:80]!r}")
        out["extra_body"] = extra
    field = getattr(args, "llm_token_field", None)
    if field is not None:
        out["max_tokens_field"] = field
    return out


def _check_target(target: str, flag: str) -> str:
    if target == "local":
        return "local"
    if isinstance(target, str) and target.startswith(("http://", "https://")):
        return "openai"
    raise ConfigError(f"{flag} must be 'local' or an http(s):// base URL, got {target!r}")


def backend_settings(args: argparse.Namespace, target: str, model: str | None, *,
                     flag: str = "--llm", model_flag: str = "--llm-model") -> dict[str, Any]:
    """The backend's name and constructor arguments for ``target`` and the flags.

    Returns:
        ``{"backend": "local", "model": path}`` or ``{"backend": "openai", "base_url",
        "model", "options": {...}}``.

    Raises:
        ConfigError: an unknown target, a URL without ``model``, or server options with
            ``local``.
    """
    kind = _check_target(target, flag)
    opts = backend_options(args)
    if kind == "local":
        given = [FLAGS[k] for k in FLAGS if getattr(args, k, None) is not None]
        if given:
            raise ConfigError(f"{', '.join(given)} set(s) an HTTP server's client; {flag} is 'local'")
        return {"backend": "local", "model": model}
    if not model:
        raise ConfigError(f"{flag} URL needs {model_flag} NAME (the server's model name)")
    return {"backend": "openai", "base_url": target, "model": model, "options": opts}


def backend_from_args(args: argparse.Namespace, target: str, model: str | None, *,
                      flag: str = "--llm", model_flag: str = "--llm-model", **local: Any) -> Any:
    """The :class:`~chunksel.llm.backends.LLMBackend` a command's flags name.

    Args:
        args: the parsed command line (with :func:`add_llm_arguments`' options).
        target: ``"local"`` or an OpenAI-compatible base URL.
        model: local: a model folder or ``.gguf`` (``None``: SmolLM2); URL: the
            server's model name.
        flag: the target's flag, for errors (``--llm``, ``--judge``).
        model_flag: the model's flag, for errors.
        **local: more :class:`~chunksel.llm.local.LocalBackend` arguments (batch size).
    """
    from chunksel.llm.backends import get_backend

    s = backend_settings(args, target, model, flag=flag, model_flag=model_flag)
    if s["backend"] == "local":
        return get_backend("local", model_path=model, **local)
    return get_backend("openai", base_url=s["base_url"], model=s["model"], **s["options"])


__all__ = ["FLAGS", "add_llm_arguments", "backend_from_args", "backend_options", "backend_settings"]
