"""``chunksel export``: a trained prototype or anchored selector as one self-contained ONNX graph."""

from __future__ import annotations

import argparse

from chunksel.cli.common import add_common
from chunksel.errors import ChunkselError
from chunksel.settings import Settings

COMMANDS = ("export",)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="export a trained prototype or anchored selector as a self-contained ONNX graph")
    add_common(p)
    p.add_argument("--model", required=True, help="a saved prototype or anchored selector directory")
    p.add_argument("--out", required=True, help="the .onnx file to write")
    p.add_argument("--quantize", default="fp32", choices=["fp32", "int8"],
                   help="fp32, or int8 (int8 weights, per-row dynamic int8 activations)")


def run(args: argparse.Namespace, settings: Settings) -> int:
    from chunksel.export import GRAPHS, export_selector, graph_kind, open_graph
    from chunksel.selectors import load_selector

    sel = load_selector(args.model)
    kind = graph_kind(sel)  # the graph the selector's class declares
    if kind is None:
        raise ChunkselError(
            f"{args.model} holds a {getattr(sel, 'name', '?')!r} selector; export needs a "
            f"{' or '.join(GRAPHS)} selector"
        )
    path = export_selector(sel, args.out, quantize=args.quantize)
    runner = open_graph(kind, path)  # reads it back: a broken export fails here, not on the device
    ins = ", ".join(f"{i.name} {i.shape}" for i in runner.session.get_inputs())
    outs = ", ".join(f"{o.name} {o.shape}" for o in runner.session.get_outputs())
    print(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB, {args.quantize}); inputs: {ins}; outputs: {outs}")
    return 0
