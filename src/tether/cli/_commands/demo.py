"""``tether demo NAME``: the installed scenarios' own ``demos`` (``tether.clisupport.scenarios``),
and one named after each scenario with a ``run`` part (``tether run --scenario NAME``)."""

from __future__ import annotations

import argparse
from typing import Any

from tether.clisupport.output import fail


def register(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="run a scenario demo",
        description="Run one demo of the installed scenarios (the reference ones: pip install -e examples).",
    )
    p.add_argument(
        "name", help="which demo (with the reference scenarios: claims, contract, leads, maintenance, mcp)"
    )
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the demo (e.g. --json)")
    p.set_defaults(handler=run)


def demos() -> tuple[dict[str, str], set[str]]:
    """The installed demos: name → ``"module:function"``, and the scenarios runnable by name."""
    from tether.clisupport.scenarios import installed

    plugins = installed()
    own = {demo: spec for plugin in plugins.values() for demo, spec in plugin.demos.items()}
    return own, {name for name, plugin in plugins.items() if plugin.run}


def run(args: argparse.Namespace) -> int:
    from tether.clisupport.scenarios import INSTALL_HINT, resolve

    own, runnable = demos()
    argv = list(args.args)
    if args.name in own:
        try:
            code: int = resolve(own[args.name])(argv)
        except SystemExit as stop:  # argparse's 2 in the demo's own parser: a usage error, exit 1
            if stop.code != 2:
                raise
            why = "the demo refused its arguments (its usage is above)"
            return fail(f"tether demo {args.name}", why, as_json="--json" in argv, error="usage")
        return code
    if args.name in runnable:
        from tether.cli._commands.run import demo_main

        return demo_main(argv, scenario=args.name)
    names = sorted({*own, *runnable})
    message = f"unknown demo {args.name!r}; installed: {', '.join(names)}" if names else INSTALL_HINT
    return fail("tether demo", message, as_json="--json" in argv)
