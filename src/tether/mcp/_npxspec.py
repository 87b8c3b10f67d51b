"""An ``npx`` / ``npm exec`` command read as npx reads it, and the program it runs found in the
npm cache without running anything: the packages it names (``-p X``, ``--package X``,
``--package=X``, or its first word), the command (a bin of those packages) and its arguments,
and the npm cache (``--cache``, ``npm_config_cache``, ``~/.npm``) whose ``_npx`` folder holds
what npx installed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tether.mcp._nodeargs import manifest
from tether.mcp._wrapped import unwrapped

# npm's options that take a value as the next word (``--registry URL``): that word is not the
# package. ``--cache`` names the cache npx installs into.
_VALUED = frozenset(
    [
        "--registry",
        "--cache",
        "--userconfig",
        "--globalconfig",
        "--prefix",
        "--loglevel",
        "--workspace",
        "-w",
        "--node-options",
        "--script-shell",
        "--scope",
    ]
)
_SHELL = ("-c", "--call")  # npx runs a shell command line: nothing to read


@dataclass
class NpxCommand:
    """What ``npx`` runs: ``command`` (a bin of ``packages``; without ``-p``, the first
    package's own) with ``args``; ``problem`` when the command cannot be read."""

    packages: list[str] = field(default_factory=list)
    command: str | None = None
    args: list[str] = field(default_factory=list)
    cache: str | None = None  # --cache
    problem: str | None = None


def read_npx(argv: Sequence[str]) -> NpxCommand:
    """``argv`` (``npx …``, ``npm exec …``, ``npm x …``) as npx reads it: its options up to the
    first other word (after ``--`` too); that word and every word after it are the command's."""
    read = NpxCommand()
    i = 2 if Path(argv[0]).name == "npm" else 1
    while i < len(argv):
        arg, value = argv[i], argv[i + 1] if i + 1 < len(argv) else None
        name, eq, inline = arg.partition("=")
        if name in _SHELL:
            read.problem = f"{arg} runs a shell command line"
            return read
        if name in ("-p", "--package") or name in _VALUED:
            taken = inline if eq else value
            if taken is None:
                read.problem = f"{arg} names nothing"
                return read
            if name in ("-p", "--package"):
                read.packages.append(taken)
            elif name == "--cache":
                read.cache = taken
            i += 1 if eq else 2
        elif arg.startswith("-"):  # a flag, or ``--``
            i += 1
        else:
            read.command, read.args = arg, list(argv[i + 1 :])
            if not read.packages:
                read.packages = [arg]
                read.command = None  # the package's own bin
            return read
    if not read.packages:
        read.problem = "no package named"
    return read


def npm_cache(env: Mapping[str, str], given: str | None = None) -> Path:
    if configured := given or env.get("npm_config_cache") or env.get("NPM_CONFIG_CACHE"):
        return Path(configured).expanduser()
    return Path(env.get("HOME") or Path.home()) / ".npm"


def package_name(spec: str) -> str:
    at = spec.find("@", 1)
    return spec[:at] if at > 0 else spec


def project_of(cwd: Path) -> Path | None:
    """The project npx runs in (npm's local prefix): the nearest folder at or above ``cwd`` with
    a ``package.json`` or ``node_modules``; its dependencies' bins come before npx's cache."""
    for folder in (cwd, *cwd.parents):
        if (folder / "package.json").is_file() or (folder / "node_modules").is_dir():
            return folder
    return None


def npx_installed(cache: Path, specs: list[str]) -> Path | None:
    """The npx install folder holding exactly ``specs`` (npx names it by a hash of the specs)."""
    root = cache / "_npx"
    if not root.is_dir():
        return None
    for folder in sorted(p.parent for p in root.glob("*/package.json")):
        npx = manifest(folder).get("_npx")
        if isinstance(npx, dict) and npx.get("packages") == specs:
            return folder
    return None


def _bins(package: Path) -> dict[str, str]:
    data = manifest(package)
    bins = data.get("bin")
    if isinstance(bins, str):
        return {package_name(str(data.get("name") or package.name)).rsplit("/", 1)[-1]: bins}
    return {k: v for k, v in bins.items() if isinstance(v, str)} if isinstance(bins, dict) else {}


def bin_of(installed: Path, read: NpxCommand) -> tuple[Path, Path] | None:
    """The package folder and script npx would run from ``installed`` (npx's install folder, or a
    project): the bin named ``read.command`` of one of the packages, or (no ``-p``) the package's
    only bin, else the one named like the package. A bin outside its package is no answer: its
    package.json was not written by npm."""
    for spec in read.packages if read.command is not None else read.packages[:1]:
        package = installed / "node_modules" / package_name(spec)
        bins = _bins(package)
        if read.command is not None:
            chosen = bins.get(read.command)
        else:
            short = package_name(spec).rsplit("/", 1)[-1]
            chosen = bins.get(short) or (next(iter(bins.values())) if len(bins) == 1 else None)
        entry = package / chosen if chosen is not None else None
        if entry is not None and entry.resolve().is_relative_to(package.resolve()) and entry.is_file():
            return package, entry
    return None


NPM_RUN = ("start", "run", "run-script", "rum", "urn")  # npm's commands running a package script


def npm_script(argv: Sequence[str], cwd: Path) -> tuple[list[str], Path] | str:
    """The command ``npm start`` / ``npm run NAME [-- ARGS]`` runs (its package script, when one
    plain command: ``_wrapped.unwrapped``, with the arguments given after its name) and the
    project it runs in; else why it cannot be read."""
    words = [a for a in argv[2:] if a not in ("-s", "--silent", "-q", "--quiet", "--")]
    if any(w.startswith("-") for w in words):
        return "an npm option this host does not read"
    name = "start" if argv[1] == "start" else (words.pop(0) if words else None)
    project = project_of(cwd)
    if name is None or project is None or not (project / "package.json").is_file():
        return "no package script named" if name is None else f"no package.json at or above {cwd}"
    scripts = manifest(project).get("scripts")
    scripts = scripts if isinstance(scripts, dict) else {}
    line = scripts.get(name, "node server.js" if name == "start" else None)
    if not isinstance(line, str):
        return f"{project / 'package.json'} has no script {name!r}"
    if f"pre{name}" in scripts or f"post{name}" in scripts:
        return f"its {name!r} script has pre/post scripts: write the command to run as the server's"
    command = unwrapped(["sh", "-c", line])
    if command is None:
        return f"its {name!r} script ({line}) is more than one plain command: write that as the server's"
    return [*command, *words], project
