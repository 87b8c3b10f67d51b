"""Whether a stdio server's launch command can run, and why not, said as what to change.

Before a launch: its executable is on the server's PATH or at its path (``found``, else
``not_found`` names what provides it), and the system would run it (``unrunnable``: the file is
executable, its ``#!`` line has no carriage return, a Windows line ending, and names an
interpreter that exists). When starting it fails all the same, ``cannot_run`` says why from the
error (no ``#!`` line, a ``cwd`` that does not exist) instead of the system's bare words, which
name the script even where its interpreter is what is missing.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "cannot_run",
    "found",
    "missing_interpreter",
    "not_found",
    "script_head",
    "unrunnable",
    "which",
]

_PROVIDED_BY = {
    **dict.fromkeys(("npx", "npm", "node", "nodejs"), "Node.js (it provides node, npm and npx)"),
    **dict.fromkeys(("uvx", "uv"), "uv (it provides uvx: pip install uv, or see docs.astral.sh/uv)"),
    "docker": "Docker",
}
_FIRST = "put its interpreter first in the server's command"


def not_found(command: str) -> str:
    """Why a launch command cannot start: its executable is missing (and what provides it)."""
    provider = _PROVIDED_BY.get(Path(command).name)
    fix = f"install {provider}, or give its full path" if provider else "install it, or give its full path"
    return f"{command!r} was not found on the server's PATH: {fix} in the server's command"


def found(command: str, env: Mapping[str, str], cwd: Path) -> bool:
    """Whether a launch command's executable exists (on the server's PATH, or at its path)."""
    return which(command, env, cwd) is not None


def which(command: str, env: Mapping[str, str], cwd: Path) -> Path | None:
    """The file a launch command's executable is: a path (relative to ``cwd``) or on the PATH."""
    if os.sep in command:
        p = Path(command) if os.path.isabs(command) else cwd / command
        return p if p.is_file() else None
    found = shutil.which(command, path=env.get("PATH", os.environ.get("PATH")))
    return Path(found) if found else None


def script_head(exe: Path) -> bytes | None:
    """A script's first kilobyte, where it opens with a ``#!`` line (``None``: no such line, or the
    file cannot be read)."""
    try:
        with open(exe, "rb") as f:
            head = f.read(1024)
    except OSError:
        return None
    return head if head.startswith(b"#!") else None


def unrunnable(command: str, env: Mapping[str, str], cwd: Path) -> str | None:
    """Why the system would refuse to run ``command``'s file itself (``None``: it would run it,
    or it is not found): not executable, a ``#!`` line ending in a carriage return (the file has
    Windows line endings: the system looks for an interpreter named ``/bin/sh\\r``), or one
    naming an interpreter that does not exist."""
    exe = which(command, env, cwd)
    if exe is None:
        return None
    if not os.access(exe, os.X_OK):
        return f"{command!r} is not executable: chmod +x it, or {_FIRST}"
    if (head := script_head(exe)) is None:
        return None
    line = head[2:].split(b"\n", 1)[0]
    if line.endswith(b"\r"):
        return (
            f"{command!r} has Windows line endings: its #! line ends in a carriage return, so no "
            f"interpreter is found; convert the file (dos2unix), or {_FIRST}"
        )
    words = line.decode("utf-8", errors="replace").split()
    return missing_interpreter(command, words[0] if words else None)


def missing_interpreter(command: str, interpreter: str | None) -> str | None:
    """Why ``command`` cannot run where the interpreter its ``#!`` line names (a path) does not
    exist; ``None`` where it does, or none is named."""
    if interpreter is None or not interpreter.startswith("/") or os.access(interpreter, os.X_OK):
        return None
    return f"{command!r} names {interpreter} on its #! line, which does not exist here: {_FIRST}"


def cannot_run(command: str, err: OSError, env: Mapping[str, str], cwd: str | None) -> str | None:
    """Why starting ``command`` in ``cwd`` failed with ``err``, said as what to change; ``None``
    where the launch as configured is not the cause (no memory, too many open files)."""
    if cwd is not None and err.filename == cwd and not os.path.isdir(cwd):
        return f"the server's cwd {cwd} is not a folder that exists"
    here = Path(cwd or ".")
    if why := unrunnable(command, env, here):
        return why
    if err.errno == errno.ENOEXEC:
        return f"{command!r} cannot be run (it has no #! line naming its interpreter): {_FIRST}"
    if err.errno in (errno.ENOENT, errno.EACCES, errno.ENOTDIR, errno.EISDIR):
        return f"{command!r} cannot be run: {err.strerror}"
    return None
