"""``chunksel label``: LLM labels for every candidate, 'semantic' (the judge's prompt,
labels/judge.py) or 'utility' (the utility selector as teacher, labels/utility.py)."""

from __future__ import annotations

import argparse
from dataclasses import replace

from chunksel.cli.common import INDEX_HELP, INDEXES, add_common, add_ray_options
from chunksel.llm.cli_options import add_llm_arguments
from chunksel.settings import Settings, use

COMMANDS = ("label",)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("label", help="LLM labels for every candidate: 'semantic' (the judge's prompt) or "
                                     "'utility' (the utility selector as teacher)")
    add_common(p)
    p.add_argument("--source", default="semantic", choices=["semantic", "utility"],
                   help="semantic (judge, default) or utility (teacher selections, labels/utility.py)")
    p.add_argument("--dataset", required=True)
    p.add_argument("--judge", required=True, metavar="local|URL",
                   help="local (transformers, SmolLM2 unless --model) or an OpenAI-compatible base URL")
    p.add_argument("--model", default=None, help="local: a model folder or .gguf; URL: the server's model name")
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--index", choices=INDEXES, default="flat", help=INDEX_HELP)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=8, help="pairs per backend call (default 8)")
    add_llm_arguments(p)
    add_ray_options(p)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from chunksel.llm.cli_options import backend_from_args, backend_settings

    progress = not settings.quiet
    spec = backend_settings(args, args.judge, args.model, flag="--judge", model_flag="--model")
    backend = backend_from_args(args, args.judge, args.model, flag="--judge", model_flag="--model",
                                batch_size=args.batch_size)
    from chunksel.build import build_instances
    from chunksel.labels.judge import label_instances, write_sidecar

    with use(replace(settings, label=None)):  # the labels are being made: no spec to apply yet
        built = build_instances(args.dataset, k=args.k, index=args.index, limit=args.limit, seed=args.seed,
                                progress=progress)
    ray_kwargs = {"model_path": args.model} if args.judge == "local" else {
        "base_url": args.judge, "model": args.model, **spec["options"]}
    if args.source == "utility":
        from chunksel.labels import utility

        if args.ray or args.ray_address:  # questions in shards over Ray workers (chunksel.bulk)
            from chunksel.bulk.label_jobs import utility_instances

            ures, urep = utility_instances(built.instances, spec["backend"], ray_kwargs, workers=args.workers,
                                           address=args.ray_address, progress=progress)
            print(f"{args.dataset}: Ray job {urep.folder.name}: {urep.computed} shard(s) run, "
                  f"{urep.already_done} already done")
        else:
            ures = utility.label_instances(built.instances, backend, progress=progress)
        upath = utility.write_sidecar(built.path, ures)
        print(f"{args.dataset}: {ures.summary()}")
        print(f"labels: {upath} (use --label utility)")
        return 0
    if args.ray or args.ray_address:  # chunksel.bulk: Ray workers fill the same response cache
        from chunksel.bulk.label_jobs import judge_instances

        res, rep = judge_instances(built.instances, spec["backend"], ray_kwargs, workers=args.workers, address=args.ray_address,
                                   batch_size=args.batch_size, progress=progress)
        print(f"{args.dataset}: Ray job {rep.folder.name}: {rep.computed} shard(s) judged, "
              f"{rep.already_done} already done")
    else:
        res = label_instances(built.instances, backend, batch_size=args.batch_size, progress=progress)
    path = write_sidecar(built.path, res)
    st = res.stats
    rate = f", {res.pairs_per_second:.2f} pairs/s" if st["misses"] else ""
    print(f"{args.dataset}: {len(res.rows)} pairs judged by {res.judge} ({st['misses']} new, {st['hits']} cached"
          f"{rate}); positive {sum(r.label for r in res.rows)}, unparsed {len(res.failures)}")
    print(f"labels: {path} (use --label semantic)")
    return 0
