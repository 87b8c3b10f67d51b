"""``tether demo NAME``: runnable examples of the reference scenarios.

``DEMOS`` maps a name to ``module:function``; the function takes the remaining arguments
and returns an exit code. Modules are imported only when their demo runs.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

DEMOS: dict[str, str] = {
    "claims": "tether_examples.scenarios.claims.demo:main",
    "contract": "tether_examples.scenarios.contract.demo:main",
    "leads": "tether_examples.scenarios.leads.demo:main",
    "maintenance": "tether.commands.run:demo_main",  # "QUESTION" [--model NAME --base-url URL …]
    "mcp": "tether_examples.scenarios.maintenance.mcp_demo:main",
}


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="run a scenario demo", description="Run one scenario demo.")
    p.add_argument("name", choices=sorted(DEMOS), help="which demo")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the demo (e.g. --json)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    module, _, function = DEMOS[args.name].partition(":")
    code: int = getattr(importlib.import_module(module), function)(list(args.args))
    return code
