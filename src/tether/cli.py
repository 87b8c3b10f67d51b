"""The ``tether`` command. It only parses arguments and calls the API.

Each sub-command lives in ``tether.commands.<name>`` and exposes ``register(subparsers)``;
modules import heavy dependencies inside their handlers so ``tether --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    import tether.commands as commands

    parser = argparse.ArgumentParser(
        prog="tether", description="A governed harness for tool-using LLM agents."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"tether.commands.{info.name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 0
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
