"""``chunksel fetch-models``: obtain the default generator (SmolLM2 GGUF) and cache it."""

from __future__ import annotations

import argparse

from chunksel.cli.common import add_common
from chunksel.settings import Settings

COMMANDS = ("fetch-models",)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fetch-models", help="obtain the default generator (SmolLM2 GGUF) and cache it")
    add_common(p)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from chunksel.llm.models import fetch_models

    for name, path in fetch_models().items():
        print(f"{name}: {path}")
    return 0
