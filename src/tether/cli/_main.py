"""The ``tether`` command: each sub-command is ``tether.cli._commands.<name>``, with a
``register(subparsers)``; heavy imports wait for the handlers, so ``tether --help`` stays fast."""

from __future__ import annotations

import argparse
import gc
import importlib
import pkgutil
import sys
from collections.abc import Sequence
from typing import Any, NoReturn, TextIO, cast

__all__ = ["main"]


class UsageError(Exception):
    """A command line the parser refuses (a mistyped flag, a missing argument)."""

    reason = "usage"

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(message)
        self.prog = prog


class Parser(argparse.ArgumentParser):
    """Usage errors exit 1, never argparse's 2 (which means "denied")."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(self.format_usage())
        raise UsageError(self.prog, message)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tether")
    except PackageNotFoundError:  # pragma: no cover - a source tree on PYTHONPATH
        return "unknown"


class _Version(argparse.Action):
    """``--version``, looked up only when asked for (importlib.metadata costs tens of ms)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kw: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show the version")

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kw: object) -> None:
        sys.stdout.write(f"tether {_version()}\n")
        parser.exit()


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of ``only`` (the command being run: one module imported)."""
    import tether.cli._commands as commands

    parser = Parser(prog="tether", description="A governed harness for tool-using LLM agents.")
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    names = sorted(m.name for m in pkgutil.iter_modules(commands.__path__) if not m.name.startswith("_"))
    for name in [only] if only in names else names:
        module = importlib.import_module(f"tether.cli._commands.{name}")
        module.register(sub)
    return parser


def parse(parser: argparse.ArgumentParser, words: list[str]) -> argparse.Namespace | int:
    """``words`` parsed, or the exit code of a usage error (1), said on stderr (and as JSON)."""
    try:
        return parser.parse_args(words)
    except UsageError as err:
        from tether.clisupport.output import USAGE, fail

        return fail(err.prog, err, as_json="--json" in words, code=USAGE)


def _internal_error(args: argparse.Namespace, err: Exception) -> int:
    """A failure no command turned into its own message: one that is no bug (``_no_bug``) says
    so; a bug is one line (the traceback with ``TETHER_DEBUG=1``), exit 7. Under ``--json`` the
    envelope comes last."""
    import os
    import traceback

    from tether.clisupport.output import EXIT_CODES, fail

    as_json = bool(getattr(args, "json", False))
    if (known := _no_bug(err)) is not None:
        error, code, why = known
        return fail(f"tether {args.command}", why, as_json=as_json, code=code, error=error)
    debug = bool(os.environ.get("TETHER_DEBUG"))
    if debug:
        traceback.print_exc()
    # Your own code (a tool module that fails on import) or tether's: the traceback says which.
    message = f"unexpected error: {type(err).__name__}: {err}"
    if not debug:
        message += " (TETHER_DEBUG=1 prints the traceback; report it if it is not in your code)"
    code = EXIT_CODES["internal_error"]
    return fail(f"tether {args.command}", message, as_json=as_json, code=code, error="internal_error")


def _no_bug(err: Exception) -> tuple[str, int, str] | None:
    """``(error, exit code, message)`` for a failure that is no bug though no command caught it:
    an optional package not installed, a store another process held, a database lost."""
    from tether.clisupport.output import EXIT_CODES, USAGE, missing_extra
    from tether.sql._database import busy
    from tether.sql._postgres import StoreRefused, StoreUnavailable

    if (needs := missing_extra(err)) is not None:
        return "missing_extra", USAGE, needs
    if isinstance(err, StoreRefused):  # the URL's role or server, not a bug: nothing was written
        return err.reason, USAGE, str(err)
    if busy(err):  # another process (a worker, of any release) held a store's file
        why = (
            f"a store is busy: {getattr(err, 'orig', None) or err}; another process (a worker or a"
            " command, of this release or another) held its write lock. The transaction that waited"
            " wrote nothing: run the command again once that process is done or stopped"
        )
        return "store_busy", EXIT_CODES["dependency_unavailable"], why
    if isinstance(err, StoreUnavailable):  # the database went away mid-command
        why = (
            f"the database was lost mid-command: {err}. A write whose commit outcome is unknown may"
            " or may not have been made: look (tether runs show, tether approvals list) before"
            " running the command again"
        )
        return "store_unavailable", EXIT_CODES["dependency_unavailable"], why
    return None


class _ReaderGone:
    """``sys.stdout`` of a ``tether`` process whose reader may leave (``tether … | head``): a write
    to a closed pipe sends the rest to ``/dev/null`` instead of raising ``BrokenPipeError``, so
    the command finishes (a run closes its trace and checkpoint) and exits with its own code."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return int(self._stream.write(text))
        except BrokenPipeError:
            self._gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._gone()

    def _gone(self) -> None:
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self._stream.fileno())  # what is still buffered goes there too
        os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None and not isinstance(sys.stdout, _ReaderGone):  # a process of its own
        sys.stdout = cast(TextIO, _ReaderGone(sys.stdout))
    words = list(sys.argv[1:] if argv is None else argv)
    # Only the parser of a command named first is built; anything else (--help, a typo) builds all.
    parser = build_parser(words[0] if words and not words[0].startswith("-") else None)
    args = parse(parser, words)
    if isinstance(args, int):
        return args
    if not getattr(args, "handler", None):
        parser.print_help()
        return 0
    quick = argv is None and getattr(args, "quick_exit", False)
    if quick:
        # A client command imports a few hundred modules and exits: a rarer cyclic collection
        # saves ~8% of a tether submit's CPU (bench/submit.py); memory stays bounded.
        gc.set_threshold(10_000, 50, 50)
    try:
        code: int = args.handler(args)
    except Exception as err:  # the last word on a path no command handled: a bug
        return _internal_error(args, err)
    if quick:
        # The process ends next: the collections at exit need not walk what is left (about 0.1 s
        # of a tether submit's 0.5). Never in process (argv given), where it would keep them.
        gc.freeze()
    return code


if __name__ == "__main__":
    sys.exit(main())
