"""``python -m bench NAME [options]``: enqueue, drain, pickup, poll, submit, scale, cost, claim, console, reap, compare, history, fleet, workflows, bloat."""

from __future__ import annotations

import argparse
import importlib
import sys

from bench.common import CODE, ROOT, common_arguments

NAMES = (
    "enqueue",
    "drain",
    "pickup",
    "poll",
    "submit",
    "scale",
    "cost",
    "claim",
    "console",
    "reap",
    "compare",
    "history",
    "fleet",
    "workflows",
    "bloat",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    commands = parser.add_subparsers(dest="name", required=True, metavar="NAME")
    modules = {}
    for name in NAMES:
        module = importlib.import_module(f"bench.{name}")
        modules[name] = module
        sub = commands.add_parser(
            name,
            help=(module.__doc__ or "").splitlines()[0],
            description=module.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        common_arguments(sub)
        module.add_arguments(sub)
    args = parser.parse_args(argv)
    CODE["root"] = args.code.resolve() if args.code else ROOT
    report = modules[args.name].run(args)
    report.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
