"""What a stdio server's launch command needs to run, found from the command itself.

A confined server sees only what its launcher needs (``tether.mcp.sandbox``). This module
reads the command the way the launcher would and names that, read-only:

- **python** (``python -m pkg``, ``python script.py``, a venv or uv console script, whose
  interpreter is found through its ``#!`` line): the interpreter's installation, a venv's base
  (``pyvenv.cfg``), the folders its ``.pth`` files list and the server's ``PYTHONPATH``, read
  from files (nothing of the server's runs outside the sandbox), so a pyenv, uv or venv
  interpreter anywhere works; a script named on the command line is shown as that one file,
  never its folder;
- **node** (``node <pkg>/dist/index.js``, a ``#!/usr/bin/env node`` script): the node
  installation, the package the script belongs to (its nearest ``package.json``) and every
  ``node_modules`` folder node's resolution walks up through;
- **npx** (``npx -y pkg``, ``npm exec pkg``, ``npm x pkg``): the package as npx installed it
  in the npm cache (``~/.npm/_npx``), launched with node directly: no registry request, no
  writable npm cache; a package not installed there needs the network, and the plan says so;
- **uvx** (``uvx pkg``, ``uv tool run pkg``): uv resolves the tool's environment from its
  cache, offline and without building anything (``--no-build``), on the host; the server then
  starts from that environment like a console script;
- anything else: the executable file itself.

No folder is ever shown just because a script sits in it, and none that holds (or is) one
of the host's protected paths (its config folder, pins, state, logs, credential files).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SYSTEM_DIRS", "Launch", "inside", "resolve_launch"]

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
_NODE = ("node", "nodejs")


@dataclass
class Launch:
    """The launch as confinement sees it: ``argv`` (rewritten for npx/uvx), what it reads."""

    profile: str
    argv: list[str]
    read_only: list[Path] = field(default_factory=list)
    path_dirs: list[Path] = field(default_factory=list)  # PATH inside: the interpreters' bin folders
    env: dict[str, str] = field(default_factory=dict)
    withheld: list[str] = field(default_factory=list)  # paths not shown, with why
    problem: str | None = None  # the launch cannot work confined as configured: why and what to change


def inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _system(path: Path) -> bool:
    return any(inside(path, Path(s)) for s in SYSTEM_DIRS)


def resolve_launch(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    protected: Iterable[Path] = (),
    network: bool = False,
) -> Launch:
    """The launch profile of ``argv`` (run in ``cwd`` with ``env``)."""
    guard = _Guard([Path(p).resolve() for p in protected])
    argv = list(argv)
    exe = _which(argv[0], env, cwd)
    if exe is None:
        return Launch("unknown", argv, problem=f"{argv[0]!r} was not found (PATH of the server)")
    name = Path(argv[0]).name
    if name == "npx" or (name == "npm" and len(argv) > 1 and argv[1] in ("exec", "x")):
        return _npx(argv, exe, env, cwd, guard, network)
    if name == "uvx" or (name == "uv" and argv[1:3] == ["tool", "run"]):
        return _uvx(argv, exe, env, cwd, guard)
    interpreter = _interpreter_of(exe)
    if interpreter is not None and _PYTHON.match(Path(interpreter).name):
        return _python(argv, exe, interpreter, env, cwd, guard)
    if interpreter is not None and Path(interpreter).name in _NODE:
        return _node(argv, exe, interpreter, cwd, guard)
    launch = Launch("executable", argv)
    guard.show(launch, exe.resolve())
    return launch


# -- helpers ---------------------------------------------------------------------------------


class _Guard:
    """Adds paths to a launch unless they are, or hold, a protected path."""

    def __init__(self, protected: list[Path]) -> None:
        self.protected = protected

    def show(self, launch: Launch, path: Path) -> bool:
        if not path.exists() or _system(path):
            return path.exists()
        for p in self.protected:
            if inside(p, path):
                launch.withheld.append(f"{path} (holds {p}, which servers never see)")
                return False
        launch.read_only.append(path)
        return True


def _which(command: str, env: Mapping[str, str], cwd: Path) -> Path | None:
    if os.sep in command:
        p = Path(command) if os.path.isabs(command) else cwd / command
        return p if p.is_file() else None
    found = shutil.which(command, path=env.get("PATH", os.environ.get("PATH")))
    return Path(found) if found else None


def _interpreter_of(exe: Path) -> str | None:
    """The interpreter an executable runs under: itself (python, node) or its ``#!`` line's."""
    if _PYTHON.match(exe.name) or exe.name in _NODE:
        return str(exe)
    real = exe.resolve()
    if _PYTHON.match(real.name) or real.name in _NODE:
        return str(exe)
    try:
        with open(exe, "rb") as f:
            head = f.read(1024)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    lines = head.decode("utf-8", errors="replace").splitlines()
    words = lines[0][2:].split()
    if not words:
        return None
    if Path(words[0]).name == "env":
        rest = [w for w in words[1:] if not w.startswith("-")]
        if not rest:
            return None
        found = shutil.which(rest[0])
        return found
    # pip's form for a long interpreter path: '''exec' /path/to/python "$0" "$@"
    # and uv's relocatable one: '''exec' "$(dirname -- "$(realpath -- "$0")")"/'python' "$0" …
    if Path(words[0]).name in ("sh", "bash") and len(lines) > 1 and lines[1].startswith("'''exec' "):
        beside = re.search(r"""dirname.*/'?([\w.-]+)'? "\$0\"""", lines[1])
        if beside:
            return str(exe.resolve().parent / beside.group(1))
        absolute = re.match(r"""^'''exec' '?(/[^' ]+)""", lines[1])
        return absolute.group(1) if absolute else None
    return words[0] if words[0].startswith("/") else None


def _installation(binary: Path) -> list[Path]:
    """The installation a binary belongs to (``…/bin/x`` → ``…``), for the link and its target."""
    out = []
    for candidate in (binary, binary.resolve()):
        out.append(candidate.parent.parent if candidate.parent.name == "bin" else candidate.parent)
    return out


def _script_args(argv: Sequence[str], cwd: Path) -> Iterable[tuple[int, Path]]:
    for i, arg in enumerate(argv[1:], start=1):
        if arg.startswith("-"):
            continue
        p = Path(arg) if os.path.isabs(arg) else cwd / arg
        if p.is_file():
            yield i, p.resolve()


# -- python ----------------------------------------------------------------------------------


def _python_paths(interpreter: str, pythonpath: str) -> list[Path]:
    """Where the interpreter imports from, read from its files, never by running it (a ``.pth``
    file of a package in its environment runs code at start-up: that code runs only confined).

    Its installation and a venv's base (``pyvenv.cfg``'s ``home``), the folders its
    ``site-packages`` ``.pth`` files list (editable installs) and the ``PYTHONPATH`` entries."""
    interp = Path(interpreter)
    prefixes = {interp.parent.parent, interp.resolve().parent.parent}
    for prefix in list(prefixes):
        cfg = prefix / "pyvenv.cfg"
        try:
            lines = cfg.read_text(encoding="utf-8").splitlines() if cfg.is_file() else []
        except OSError:
            lines = []
        for line in lines:
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                home = Path(value.strip())
                prefixes |= {home.parent, home.resolve().parent}
    out = [p for p in prefixes if p.is_dir()]
    for prefix in prefixes:
        for site in prefix.glob("lib/python3*/site-packages"):
            for pth in sorted(site.glob("*.pth")):
                try:
                    entries = pth.read_text(encoding="utf-8", errors="replace").splitlines()
                except OSError:
                    continue
                for entry in entries:
                    entry = entry.strip()
                    if entry and not entry.startswith(("#", "import ", "import\t")):
                        out.append(Path(entry) if os.path.isabs(entry) else site / entry)
    out += [Path(p) for p in pythonpath.split(os.pathsep) if p]
    return [p for p in out if p.is_dir()]


def _python(
    argv: list[str], exe: Path, interpreter: str, env: Mapping[str, str], cwd: Path, guard: _Guard
) -> Launch:
    launch = Launch("python", argv)
    interp = Path(interpreter)
    for p in {exe.resolve(), *_installation(interp)}:
        guard.show(launch, p)
    launch.path_dirs.append(interp.parent)
    for entry in _python_paths(interpreter, env.get("PYTHONPATH", "")):
        if entry != Path("/"):
            guard.show(launch, entry.resolve())
    if _PYTHON.match(exe.name) or exe.resolve() == interp.resolve():
        for i, arg in enumerate(argv[1:], start=1):
            if arg in ("-m", "-c"):
                break
            if arg.startswith("-"):
                continue
            script = (Path(arg) if os.path.isabs(arg) else cwd / arg).resolve()
            if script.is_file():
                guard.show(launch, script)  # the file only: its folder may hold anything
                argv[i] = str(script)
            break
    launch.env["PYTHONDONTWRITEBYTECODE"] = "1"
    return launch


# -- node ------------------------------------------------------------------------------------


def _node(argv: list[str], exe: Path, interpreter: str, cwd: Path, guard: _Guard) -> Launch:
    launch = Launch("node", argv)
    node = Path(interpreter)
    for p in _installation(node):
        guard.show(launch, p)
    launch.path_dirs.append(node.parent)
    scripts = [(0, exe.resolve())] if exe.name not in _NODE else list(_script_args(argv, cwd))[:1]
    for i, script in scripts:
        if i:
            argv[i] = str(script)
        _node_package(launch, script, guard)
    return launch


def _node_package(launch: Launch, script: Path, guard: _Guard) -> None:
    """The script's package (its nearest ``package.json``) and every ``node_modules`` above it."""
    package = next((d for d in script.parents if (d / "package.json").is_file()), None)
    if package is None or not guard.show(launch, package):
        guard.show(launch, script)
    for d in script.parents:
        modules = d / "node_modules"
        if modules.is_dir() and not any(inside(modules, p) for p in launch.read_only):
            guard.show(launch, modules)


def _npm_cache(env: Mapping[str, str]) -> Path:
    configured = env.get("npm_config_cache") or env.get("NPM_CONFIG_CACHE")
    if configured:
        return Path(configured).expanduser()
    return Path(env.get("HOME") or Path.home()) / ".npm"


def _npx_spec(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """The package spec and the arguments given to it."""
    i = 2 if Path(argv[0]).name == "npm" else 1
    spec: str | None = None
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            continue
        if arg in ("-p", "--package") and i + 1 < len(argv):
            spec = argv[i + 1]
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        if spec is None:
            spec = arg
            return spec, list(argv[i + 1 :])
        return spec, list(argv[i + 1 :])  # with --package, the command is the bin's name
    return spec, []


def _package_name(spec: str) -> str:
    at = spec.find("@", 1)
    return spec[:at] if at > 0 else spec


def _npx_installed(cache: Path, spec: str) -> Path | None:
    """The npx install folder holding exactly ``spec`` (npx names it by a hash of the specs)."""
    root = cache / "_npx"
    if not root.is_dir():
        return None
    for manifest in sorted(root.glob("*/package.json")):
        try:
            data = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if (data.get("_npx") or {}).get("packages") == [spec]:
            return manifest.parent
    return None


def _bin_of(package: Path, name: str) -> Path | None:
    try:
        data = json.loads((package / "package.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    bins = data.get("bin")
    if isinstance(bins, str):
        return package / bins
    if isinstance(bins, dict) and bins:
        short = name.rsplit("/", 1)[-1]
        chosen = bins.get(short) or (next(iter(bins.values())) if len(bins) == 1 else None)
        return package / chosen if isinstance(chosen, str) else None
    return None


def _npx(
    argv: list[str], exe: Path, env: Mapping[str, str], cwd: Path, guard: _Guard, network: bool
) -> Launch:
    spec, rest = _npx_spec(argv)
    node = shutil.which("node", path=env.get("PATH", os.environ.get("PATH")))
    if spec is None or node is None:
        why = "no package named" if spec is None else "node is not on the PATH"
        return Launch("npx", argv, problem=f"cannot read this npx command ({why})")
    cache = _npm_cache(env)
    installed = _npx_installed(cache, spec)
    name = _package_name(spec)
    entry = _bin_of(installed / "node_modules" / name, name) if installed is not None else None
    if entry is None or not entry.is_file():
        if network:
            # npx may download: it gets a private, writable npm cache of its own.
            launch = Launch(
                "npx", argv, env={"npm_config_cache": "{home}/.npm", "npm_config_update_notifier": "false"}
            )
            for p in _installation(Path(node)) + _installation(exe):
                guard.show(launch, p)
            launch.path_dirs += [Path(node).parent, exe.parent]
            return launch
        return Launch(
            "npx",
            argv,
            problem=(
                f"{spec} is not installed in the npm cache ({cache / '_npx'}) and a confined server has "
                f"no network: run `npx -y {spec} --help` once (it installs the package there), or set "
                "network: any for this server"
            ),
        )
    launch = _node([node, str(entry), *rest], Path(node), node, cwd, guard)
    launch.profile = "npx"
    return launch


# -- uvx -------------------------------------------------------------------------------------


def _uvx(argv: list[str], exe: Path, env: Mapping[str, str], cwd: Path, guard: _Guard) -> Launch:
    """``uvx [--from X] pkg args``: uv finds (offline) the tool's cached environment on the host;
    the server then starts from that environment's own console script."""
    i = 1 if Path(argv[0]).name == "uvx" else 3
    source: str | None = None
    command: str | None = None
    uv_args: list[str] = []
    while i < len(argv):
        arg = argv[i]
        if arg == "--from" and i + 1 < len(argv):
            source = argv[i + 1]
            i += 2
            continue
        if arg in ("--python", "-p", "--with") and i + 1 < len(argv):
            uv_args += [arg, argv[i + 1]]
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        command = arg
        break
    if command is None:
        return Launch("uvx", argv, problem="cannot read this uvx command (no tool named)")
    rest = argv[i + 1 :]
    tool = command.split("@", 1)[0].split("[", 1)[0]
    # printenv, not the environment's python: nothing of the tool's (a .pth file) runs here.
    probe = [str(exe)] if exe.name == "uvx" else [str(exe), "tool", "run"]
    probe += ["--offline", "--no-build", *uv_args, "--from", source or command, "printenv", "PATH"]
    run_env = {k: v for k, v in env.items() if k in ("PATH", "HOME", "UV_CACHE_DIR", "XDG_CACHE_HOME")}
    try:
        done = subprocess.run(
            probe, capture_output=True, text=True, timeout=60, env=run_env, cwd="/", check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return Launch("uvx", argv, problem=f"uv could not resolve {command}: {err}")
    scripts = Path(done.stdout.strip().split(os.pathsep, 1)[0]) if done.stdout.strip() else None
    if done.returncode != 0 or scripts is None or not (scripts.parent / "pyvenv.cfg").is_file():
        detail = (done.stderr or "").strip().splitlines()
        return Launch(
            "uvx",
            argv,
            problem=(
                f"{command} is not in uv's cache ({detail[-1] if detail else 'offline resolution failed'}) "
                f"and a confined server has no network: run `uvx {command} --help` once, or set network: any"
            ),
        )
    script = scripts / tool
    if not script.is_file():
        return Launch("uvx", argv, problem=f"uv's environment for {command} has no command {tool!r}")
    interpreter = _interpreter_of(script) or str(scripts / "python")
    launch = _python([str(script), *rest], script, interpreter, env, cwd, guard)
    guard.show(launch, scripts.parent.resolve())
    launch.profile = "uvx"
    return launch
