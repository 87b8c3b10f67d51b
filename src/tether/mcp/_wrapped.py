"""What a confined launch runs when its command names it indirectly.

* A shell given one plain command (``sh -c "exec python -m pkg.server --flag"``, as MCP client
  configs write a launch that needs a shell's ``exec``) runs that command: confinement is planned
  for it, as if it were the launch command (``unwrapped``). A script using anything a shell
  would read beyond words and quotes (variables, ``;``, ``&&``, pipes, redirections, globs,
  ``~``, assignments) is left as it is: only a shell could say what it runs.
* A shell script of one plain command (a wrapper ``#!/bin/sh`` then ``exec python server.py
  "$@"``) runs that command with the script's arguments (``script_command``).
* ``mcp run server.py``, ``fastmcp run server.py:app`` (a console script given a server file,
  as the SDKs' runners are): the ``.py`` file each argument names (before a ``:object``) is what
  the launch names there, and is shown read-only, alone, as ``python server.py``'s is
  (``server_file``).
* ``uv --directory PROJECT run server.py`` (the MCP quickstart's launch) runs the project's
  ``.venv`` interpreter on the script, or the venv's console script (``uv run mcp-server``): it is
  confined as that command, once ``uv sync`` has made the venv (``uv_run``). A run with an
  environment uv builds for it (``--with``, ``--isolated``, ``--script``, ``--no-project``, another
  ``--python``) is left as it is: only uv could say what it runs.
* ``python -m pkg.mod`` imports ``pkg`` from its working folder first (Python puts it at the
  head of ``sys.path``): that package (or ``pkg.py``) is what the launch names there, and is
  shown read-only, never the folder around it (``module_in_cwd``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from pathlib import Path

__all__ = ["module_in_cwd", "script_command", "server_file", "unwrapped", "uv_run"]

_SHELLS = ("sh", "bash", "dash", "zsh", "ksh")
# Anything beyond words and quotes: a variable, a command list, a pipe, a redirection, a glob,
# a subshell, a comment, a home folder, an escape or a line break.
_SHELL_SYNTAX = re.compile(r"[$`;&|<>(){}\[\]*?!#~\\\n\r]")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def unwrapped(argv: Sequence[str]) -> list[str] | None:
    """The command ``sh -c SCRIPT`` runs when ``SCRIPT`` is one plain command (``exec`` or not);
    ``None`` for any other launch."""
    if len(argv) < 3 or Path(argv[0]).name not in _SHELLS or argv[1] != "-c":
        return None
    script = argv[2]
    if _SHELL_SYNTAX.search(script):
        return None
    try:
        words = shlex.split(script, posix=True)
    except ValueError:
        return None
    if words[:1] == ["exec"]:
        words = words[1:]
    if not words or words[0].startswith("-") or _ASSIGNMENT.match(words[0]):
        return None
    return words


def script_command(script: Path, argv: Sequence[str]) -> list[str] | None:
    """The command a ``#!`` shell script of one plain command line runs (its last word may be
    ``"$@"``: the script's own arguments, ``argv[1:]``); ``None`` for any other file."""
    try:
        with script.open("rb") as f:
            head = f.read(_MAX_SCRIPT + 1)
    except OSError:
        return None
    if len(head) > _MAX_SCRIPT or not head.startswith(b"#!") or b"\r" in head:  # (a shell reads \r)
        return None
    lines = head.decode("utf-8", errors="replace").splitlines()
    shell = lines[0][2:].split()
    if not shell or Path(shell[-1] if Path(shell[0]).name == "env" else shell[0]).name not in _SHELLS:
        return None
    body = [line.strip() for line in lines[1:] if line.strip() and not line.strip().startswith("#")]
    if len(body) != 1:
        return None
    line, passed = body[0], False
    if line.endswith(' "$@"'):
        line, passed = line[: -len(' "$@"')], True
    words = unwrapped(["sh", "-c", line])
    return None if words is None else [*words, *(argv[1:] if passed else [])]


_MAX_SCRIPT = 4096


def server_file(arg: str, cwd: Path) -> tuple[Path, str] | None:
    """The ``.py`` file a runner's argument names (``server.py``, ``app/server.py:mcp``; relative
    to ``cwd``) and what follows it (``:mcp``); ``None`` for an option or any other argument."""
    if arg.startswith("-"):
        return None
    path, sep, obj = arg.rpartition(":")
    if not (sep and path.endswith(".py") and _MODULE.match(obj)):
        path, obj = arg, ""
    if not path.endswith(".py"):
        return None
    file = Path(path) if Path(path).is_absolute() else cwd / path
    return (file, f":{obj}" if obj else "") if file.is_file() else None


def module_in_cwd(argv: Sequence[str], cwd: Path) -> Path | None:
    """The package (or module file) in ``cwd`` that ``python [options] -m NAME`` imports first;
    ``None`` when the launch is no ``-m`` run, isolates the path (``-I``, ``-P``) or ``cwd``
    holds no such package."""
    i, name = 1, None
    while i < len(argv) - 1 and name is None:
        arg = argv[i]
        if arg == "-m":
            name = argv[i + 1]
        elif not arg.startswith("-") or arg in ("-c", "--"):
            return None
        elif not arg.startswith("--") and ("I" in arg or "P" in arg):
            return None  # -I / -P: the working folder is not on the import path
        i += 2 if arg in ("-X", "-W") else 1
    if name is None:
        return None
    if not _MODULE.match(name):
        return None
    top = name.split(".")[0]
    for candidate in (cwd / top, cwd / f"{top}.py"):
        if candidate.is_dir() or candidate.is_file():
            return candidate
    return None


# uv's options that take a value (``--opt VALUE``), and those that make it build an environment.
_UV_VALUED = frozenset(
    [
        "--directory",
        "--project",
        "--env-file",
        "--extra",
        "--group",
        "--package",
        "--cache-dir",
        "--config-file",
        "--index",
        "--index-url",
        "--default-index",
        "--extra-index-url",
        "--color",
        "--python-preference",
        "--only-group",
    ]
)
_UV_BUILDS = frozenset(
    [
        "--with",
        "--with-requirements",
        "--with-editable",
        "--isolated",
        "--script",
        "--no-project",
        "--python",
        "-p",
        "--gui-script",
    ]
)


def uv_run(argv: Sequence[str], cwd: Path) -> tuple[list[str], Path] | None:
    """What ``uv [--directory D] run [options] CMD args`` runs in its project's ``.venv`` (the
    script by that venv's interpreter, or the venv's ``bin/CMD``) and the folder it runs in;
    ``None`` for any other launch, one uv builds an environment for, or a project with no venv."""
    if Path(argv[0]).name != "uv" or "run" not in argv[1:]:
        return None
    i, work, project, ran = 1, cwd, cwd, False
    while i < len(argv) and not (ran and not argv[i].startswith("-")):
        option, eq, value = argv[i].partition("=")
        if argv[i] == "run" and not ran:
            ran, i = True, i + 1
            continue
        if option in _UV_BUILDS or not option.startswith("-"):
            return None
        if not eq and option in _UV_VALUED:
            value = argv[i + 1] if i + 1 < len(argv) else ""
            i += 1
        if option in ("--directory", "--project"):
            project = Path(value) if Path(value).is_absolute() else work / value
            work = project if option == "--directory" else work
        i += 1
    if i >= len(argv):
        return None
    root = next((d for d in (project, *project.parents) if (d / "pyproject.toml").is_file()), None)
    if root is None or not (root / ".venv" / "pyvenv.cfg").is_file():
        return None
    command, rest, bin_ = argv[i], list(argv[i + 1 :]), root / ".venv" / "bin"
    if command.endswith(".py"):
        return [str(bin_ / "python"), command, *rest], work
    return ([str(bin_ / command), *rest], work) if (bin_ / command).is_file() else None
