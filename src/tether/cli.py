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
from typing import NoReturn

__all__ = ["main"]


class UsageError(Exception):
    """A command line the parser refuses (a mistyped flag, a missing argument)."""

    reason = "usage"

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(message)
        self.prog = prog


class _Parser(argparse.ArgumentParser):
    """Usage errors are exit 1 (nothing ran), as for every other usage or configuration error,
    never argparse's 2 — which tether's exit codes reserve for "denied"."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(self.format_usage())
        raise UsageError(self.prog, message)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tether")
    except PackageNotFoundError:  # pragma: no cover - a source tree on PYTHONPATH
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    import tether.commands as commands

    parser = _Parser(prog="tether", description="A governed harness for tool-using LLM agents.")
    parser.add_argument("--version", action="version", version=f"tether {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"tether.commands.{info.name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(words)
    except UsageError as err:
        from tether.clisupport.output import USAGE, fail

        return fail(err.prog, err, as_json="--json" in words, code=USAGE)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 0
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
