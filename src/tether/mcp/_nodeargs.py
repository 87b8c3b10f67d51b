"""A ``node`` command line read as node reads it, to show confined what it names on the host:
the script (the first word that is no option nor an option's value, after ``--`` too), and the
files node's own options name (``--env-file .env``, ``-r ./setup.js``, ``--import tsx``), each
found as node would find it from the working folder. Reads files' names only, runs nothing."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Options taking a value, as the next word or after ``=``; the first group names files.
_FILES = frozenset(
    ["-r", "--require", "--import", "--loader", "--experimental-loader", "--env-file", "--env-file-if-exists"]
)
_VALUED = _FILES | frozenset(
    ["-C", "--conditions", "--input-type", "--title", "--inspect-port", "--experimental-config-file"]
)
_CODE = frozenset(["-e", "--eval", "-p", "--print"])  # the code is given: no script, the rest is its


@dataclass
class NodeWords:
    """Where ``argv`` names the script (``None``: none), and where its options name files:
    ``(index, prefix, value)``, the word at ``index`` being ``prefix + value``."""

    script: int | None = None
    files: list[tuple[int, str, str]] = field(default_factory=list)


def read_node(argv: Sequence[str]) -> NodeWords:
    words = NodeWords()
    i = 1
    while i < len(argv):
        arg = argv[i]
        name, eq, inline = arg.partition("=")
        if arg == "--":
            words.script = i + 1 if i + 1 < len(argv) else None
            return words
        if name in _CODE:
            return words
        if eq and name in _VALUED:
            if name in _FILES:
                words.files.append((i, name + "=", inline))
            i += 1
        elif arg in _VALUED:
            if arg in _FILES and i + 1 < len(argv):
                words.files.append((i + 1, "", argv[i + 1]))
            i += 2
        elif arg.startswith("-"):
            i += 1
        else:
            words.script = i
            return words
    return words


def _as_file(path: Path) -> Path | None:
    """The file node loads for ``path``: itself, with ``.js``, or a folder's package main or
    ``index.js``."""
    for candidate in (path, path.with_name(path.name + ".js")):
        if candidate.is_file():
            return candidate
    if path.is_dir():
        try:
            main = json.loads((path / "package.json").read_text(encoding="utf-8")).get("main")
        except (OSError, ValueError, AttributeError):
            main = None
        # A main outside its package (``../../key``) is no answer: npm's packages keep it inside.
        target = (path / main).resolve() if isinstance(main, str) else path.resolve()
        if target != path.resolve() and target.is_relative_to(path.resolve()) and (found := _as_file(target)):
            return found
        if (path / "index.js").is_file():
            return path / "index.js"
    return None


def node_file(word: str, cwd: Path, *, modules: bool = True) -> Path | None:
    """The host file ``word`` names for node run in ``cwd``: a path (absolute, or relative to
    ``cwd``), else (``modules``: an option's module, not the script) a package name found in a
    ``node_modules`` folder at or above ``cwd``."""
    path = Path(word) if Path(word).is_absolute() else cwd / word
    if (found := _as_file(path)) is not None or not modules or word.startswith(("/", "./", "../")):
        return found
    for folder in (cwd, *cwd.parents):
        if (found := _as_file(folder / "node_modules" / word)) is not None:
            return found
    return None
