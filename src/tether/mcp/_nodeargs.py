"""A ``node`` command line read as node reads it, to show confined what it names on the host:
the script (the first word that is no option nor an option's value, after ``--`` too), and the
files node's own options name (``--env-file .env``, ``-r ./setup.js``, ``--import tsx``), each
found as node would find it from the working folder. Reads files' names only, runs nothing."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Options taking a value, as the next word or after ``=``; ``_FILES`` name files (a module's
# by how node loads it).
_FILES: dict[str, str | None] = {
    "-r": "require",
    "--require": "require",
    "--import": "import",
    "--loader": "import",
    "--experimental-loader": "import",
    "--env-file": None,
    "--env-file-if-exists": None,
}
_VALUED = _FILES.keys() | frozenset(
    ["-C", "--conditions", "--input-type", "--title", "--inspect-port", "--experimental-config-file"]
)
_CODE = frozenset(["-e", "--eval", "-p", "--print"])  # the code is given: no script, the rest is its


@dataclass
class NodeWords:
    """Where ``argv`` names the script (``None``: none), and where its options name files:
    ``(index, prefix, value, condition)``, the word at ``index`` being ``prefix + value``, loaded
    as ``condition`` says (``require``, ``import``; ``None``: a file, never a module)."""

    script: int | None = None
    files: list[tuple[int, str, str, str | None]] = field(default_factory=list)


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
                words.files.append((i, name + "=", inline, _FILES[name]))
            i += 1
        elif arg in _VALUED:
            if arg in _FILES and i + 1 < len(argv):
                words.files.append((i + 1, "", argv[i + 1], _FILES[arg]))
            i += 2
        elif arg.startswith("-"):
            i += 1
        else:
            words.script = i
            return words
    return words


def manifest(package: Path) -> dict[str, object]:
    """``package``'s ``package.json`` read (empty when none can be)."""
    try:
        data = json.loads((package / "package.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _within(package: Path, given: object) -> Path | None:
    """``package/given`` when it stays inside the package (a ``main`` of ``../../key`` does not:
    npm's packages keep their files inside), else ``None``."""
    if not isinstance(given, str):
        return None
    target = package / given
    inner = target.resolve()
    return target if inner != package.resolve() and inner.is_relative_to(package.resolve()) else None


def _as_file(path: Path) -> Path | None:
    """The file node loads for ``path``: itself, with ``.js``, or a folder's package main or
    ``index.js``."""
    for candidate in (path, path.with_name(path.name + ".js")):
        if candidate.is_file():
            return candidate
    if path.is_dir():
        main = _within(path, manifest(path).get("main"))
        if main is not None and (found := _as_file(main)) is not None:
            return found
        if (path / "index.js").is_file():
            return path / "index.js"
    return None


def _exported(package: Path, sub: str, condition: str) -> tuple[bool, Path | None]:
    """Whether ``package`` has an ``exports`` map, and the file it gives for ``sub`` (``.``,
    ``./config``) under ``condition`` (``require``, ``import``); none when node would find none
    by these rules. Without a map node looks for the file."""
    exports = manifest(package).get("exports")
    if exports is None:
        return False, None
    if not isinstance(exports, dict) or not any(str(k).startswith(".") for k in exports):
        exports = {".": exports}
    target = exports.get(sub)
    while isinstance(target, (dict, list)):
        if isinstance(target, list):
            target = next((t for t in target if isinstance(t, str)), None)
        else:
            target = next((target[c] for c in (condition, "node", "default") if c in target), None)
    found = _within(package, target)
    return True, (found if found is not None and found.is_file() else None)


def _module(folder: Path, word: str, condition: str) -> Path | None:
    """``word`` (``dotenv/config``, ``@scope/pkg``) as a package in ``folder/node_modules``."""
    parts = word.split("/")
    cut = 2 if word.startswith("@") else 1
    package = folder / "node_modules" / "/".join(parts[:cut])
    if not package.is_dir():
        return None
    sub = "/".join([".", *parts[cut:]])
    mapped, exported = _exported(package, sub, condition)
    if mapped:
        return exported
    return _as_file(package / "/".join(parts[cut:])) if parts[cut:] else _as_file(package)


def node_file(word: str, cwd: Path, condition: str | None = None) -> Path | None:
    """The host file ``word`` names for node run in ``cwd``: a path (absolute, or relative to
    ``cwd``), else, for an option's module (``condition``: how it is loaded, ``require`` or
    ``import``), a package found in a ``node_modules`` folder at or above ``cwd``, as its
    ``exports`` map says; ``None`` when node would find none, or not by these rules."""
    path = Path(word) if Path(word).is_absolute() else cwd / word
    if (found := _as_file(path)) is not None or condition is None or word.startswith(("/", ".")):
        return found
    for folder in (cwd, *cwd.parents):
        if (found := _module(folder, word, condition)) is not None:
            return found
    return None
