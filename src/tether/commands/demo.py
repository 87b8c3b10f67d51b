"""``tether demo NAME [ARGS...]``: run a reference scenario's demonstration.

Scenarios register here as ``name: "module:function"``; the function takes the remaining
arguments and returns the exit code.
"""

from __future__ import annotations

import argparse
from typing import Any

DEMOS: dict[str, str] = {
    "leads": "tether.scenarios.leads.demo:main",
}


def register(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="run a scenario demonstration (" + ", ".join(sorted(DEMOS)) + ")",
        description="Run a scenario demonstration; arguments after the name go to the scenario "
        "(e.g. `tether demo leads --json`).",
    )
    p.add_argument("name", choices=sorted(DEMOS))
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the scenario")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import importlib

    module_name, _, function = DEMOS[args.name].partition(":")
    main = getattr(importlib.import_module(module_name), function)
    code: int = main(list(args.args))
    return code
