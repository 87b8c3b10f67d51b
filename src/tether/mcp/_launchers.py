"""What a stdio server's launch command needs to run, found from the command itself.

Recognised: python (an interpreter, a venv or uv console script by its ``#!``; its installation,
venv base, ``.pth`` folders and ``PYTHONPATH``, read from files, never by running it), node (the
installation, the script's package and the ``node_modules`` above it, the files node's options
name: ``_nodeargs``), npx (the bin it names of the project's dependency or the package as npx
installed it, run by node: ``_npxspec``), uvx (uv's cached environment, resolved offline);
anything else: the executable itself. Each is shown under ``/opt/mcp`` by role, never at its host
path, with what names host paths rewritten; never a folder holding one of the host's protected
paths.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tether.mcp._nodeargs import node_file, read_node
from tether.mcp._npxspec import (
    NPM_RUN,
    bin_of,
    npm_cache,
    npm_script,
    npx_installed,
    package_name,
    project_of,
    read_npx,
)
from tether.mcp._runnable import (
    found,
    missing_interpreter,
    not_found,
    script_head,
    unrunnable,
    which,
)
from tether.mcp._wrapped import module_in_cwd, script_command, server_file, unwrapped, uv_run

__all__ = [
    "NEVER_SEEN",
    "SYSTEM_DIRS",
    "Launch",
    "found",
    "inside",
    "not_found",
    "planted_link",
    "resolve_launch",
]

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
_NODE = ("node", "nodejs")


NEVER_SEEN = (
    "which servers never see: keep the MCP config, pins, state and credential files outside the "
    "folders a server is given"
)
MOUNT_ROOT = "/opt/mcp"  # where a launcher's files are shown inside, under names of their role


@dataclass
class Launch:
    """The launch as confinement sees it: ``argv`` inside (``host_argv`` outside), the host paths
    shown (``read_only``) by the bwrap ``ops``, and generated files' contents (``data``)."""

    profile: str
    argv: list[str]
    host_argv: list[str] | None = None
    read_only: list[Path] = field(default_factory=list)
    ops: list[tuple[str, ...]] = field(default_factory=list)
    data: list[bytes] = field(default_factory=list)
    overlays: list[Path] = field(default_factory=list)  # host folders shown with a private write layer
    path_dirs: list[str] = field(default_factory=list)  # PATH inside: the interpreters' bin folders
    env: dict[str, str] = field(default_factory=dict)
    withheld: list[str] = field(default_factory=list)  # paths not shown, with why
    problem: str | None = None  # the launch cannot work confined as configured: why and what to change
    _shown: dict[Path, str] = field(default_factory=dict)
    _names: set[str] = field(default_factory=set)
    _protected: list[Path] = field(default_factory=list)
    _writable: list[Path] = field(default_factory=list)  # folders the server writes (its next start reads)

    def untrusted(self, file: Path) -> bool:
        """Whether ``file`` lies in a folder the server writes: what it names is never shown."""
        real = file.resolve()
        if any(inside(real, w) for w in self._writable):
            self.withheld.append(f"what {file} names (it lies in a folder the server writes)")
            return True
        return False

    def follow(self, path: Path) -> Path | None:
        """``path`` resolved, or ``None`` (withheld, named) when a link on the way to it lies in a
        folder the server writes: it may have made it, to be shown a host path at its next start."""
        if (link := planted_link(path, self._writable)) is not None:
            self.withheld.append(
                f"{path} (through {link}, a link in a folder the server writes: it may have made it)"
            )
            return None
        return path.resolve()

    def translate(self, host: Path) -> str | None:
        """Where a host path shows inside (a system path at its own), or ``None``."""
        if _system(host):
            return str(host)
        for shown, at in sorted(self._shown.items(), key=lambda kv: -len(kv[0].parts)):
            if inside(host, shown):
                rest = host.relative_to(shown)
                return at if rest == Path(".") else f"{at}/{rest.as_posix()}"
        return None

    def show(self, host: Path, role: str, *, at: str | None = None, private: bool = False) -> str | None:
        """Show ``host`` read-only under ``MOUNT_ROOT`` (at its role's name, or ``at``); ``None``
        when missing or holding a protected path. ``private``: writable through a private layer."""
        if not host.exists():
            return None
        if (already := self.translate(host)) is not None and at is None:
            return already
        for p in self._protected:
            if inside(p, host):
                self.withheld.append(f"{host} (holds {p}, {NEVER_SEEN})")
                return None
        if at is None:
            name, n = role, 1
            while name in self._names:
                n += 1
                name = f"{role}-{n}"
            self._names.add(name)
            at = f"{MOUNT_ROOT}/{name}"
        self._shown[host] = at
        self.read_only.append(host)
        if private:
            self.ops.append(("--bind", f"{{overlay:{len(self.overlays)}}}", at))
            self.overlays.append(host)
        else:
            self.ops.append(("--ro-bind", str(host), at))
        return at

    def generate(self, at: str, content: bytes) -> None:
        """A file inside with ``content`` (over whatever is there)."""
        self.ops.append(("--ro-bind-data", f"{{data-fd:{len(self.data)}}}", at))
        self.data.append(content)


def inside(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or below it (by their parts)."""
    n = len(folder.parts)
    return n > 0 and path.parts[:n] == folder.parts


def planted_link(path: Path, writable: Sequence[Path]) -> Path | None:
    """The first link on the way to ``path`` (as written) that lies in a folder of ``writable``."""
    at = Path(os.path.abspath(path))
    for n in range(2, len(at.parts) + 1):
        step = Path(*at.parts[:n])
        if step.is_symlink() and any(inside(step.parent.resolve(), w) for w in writable):
            return step
    return None


_SYSTEM_PARTS = tuple(Path(s).parts for s in SYSTEM_DIRS)


def _system(path: Path) -> bool:
    return any(path.parts[: len(parts)] == parts for parts in _SYSTEM_PARTS)


def resolve_launch(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    protected: Iterable[Path] = (),
    network: bool = False,
    writable: Iterable[Path] = (),
    depth: int = 0,
) -> Launch:
    """The launch profile of ``argv`` (run in ``cwd`` with ``env``); a file it reads in a folder
    of ``writable`` (a venv's ``pyvenv.cfg``, ``.pth`` files, a wrapper script) names nothing it
    shows. ``depth``: wrappers followed so far."""
    guarded = [Path(p).resolve() for p in protected]
    wrote = [Path(w).resolve() for w in writable]
    argv = unwrapped(argv) or list(argv)  # a shell running one plain command: that command
    if depth < 2 and (in_venv := uv_run(argv, cwd)) is not None:  # a uv project's venv: its command
        return resolve_launch(
            in_venv[0],
            env=env,
            cwd=in_venv[1],
            protected=guarded,
            network=network,
            writable=wrote,
            depth=depth + 1,
        )
    exe = which(argv[0], env, cwd)
    if exe is None:
        return Launch("unknown", argv, problem=not_found(argv[0]))
    name = Path(argv[0]).name
    if name == "npx" or (name == "npm" and len(argv) > 1 and argv[1] in ("exec", "x")):
        return _npx(argv, exe, env, cwd, (guarded, wrote), network)
    if name == "npm" and len(argv) > 1 and argv[1] in NPM_RUN and depth < 2:
        return _npm_run(argv, env, cwd, (guarded, wrote), (network, depth))
    if name == "uvx" or (name == "uv" and argv[1:3] == ["tool", "run"]):
        return _uvx(argv, exe, env, cwd, guarded)
    interpreter = _interpreter_of(exe)
    if (why := missing_interpreter(argv[0], interpreter)) is not None:
        return Launch("unknown", argv, problem=why)
    runs = depth < 2 and unrunnable(argv[0], env, cwd) is None  # as the system would run it
    if runs and not any(inside(exe.resolve(), w) for w in wrote) and (inner := script_command(exe, argv)):
        # A wrapper of one command, outside what the server writes: confined as that command.
        return resolve_launch(
            inner, env=env, cwd=cwd, protected=guarded, network=network, writable=wrote, depth=depth + 1
        )
    if interpreter is not None and _PYTHON.match(Path(interpreter).name):
        python = Launch("python", argv, _protected=guarded, _writable=wrote)
        return _python(python, exe, interpreter, env, cwd)
    if interpreter is not None and Path(interpreter).name in _NODE:
        return _node(Launch("node", argv, _protected=guarded, _writable=wrote), exe, interpreter, cwd)
    if (why := unrunnable(argv[0], env, cwd)) is not None:  # run as it is: the system must run it
        return Launch("executable", argv, problem=why)
    launch = Launch("executable", argv, _protected=guarded)
    if (shown := launch.show(exe.resolve(), f"bin/{exe.name}")) is not None:
        launch.argv[0] = shown
    return launch


def _interpreter_of(exe: Path) -> str | None:
    """The interpreter an executable runs under: itself (python, node) or its ``#!`` line's."""
    if _PYTHON.match(exe.name) or exe.name in _NODE:
        return str(exe)
    real = exe.resolve()
    if _PYTHON.match(real.name) or real.name in _NODE:
        return str(exe)
    if (head := script_head(exe)) is None:
        return None
    lines = head.decode("utf-8", errors="replace").splitlines()
    if not (words := lines[0][2:].split()):
        return None
    if Path(words[0]).name == "env":
        if not (rest := [w for w in words[1:] if not w.startswith("-")]):
            return None
        return shutil.which(rest[0])
    # pip's ('''exec' /path/to/python "$0") and uv's relocatable ("$(dirname …)"/'python') forms.
    if Path(words[0]).name in ("sh", "bash") and len(lines) > 1 and lines[1].startswith("'''exec' "):
        if beside := re.search(r"""dirname.*/'?([\w.-]+)'? "\$0\"""", lines[1]):
            return str(exe.resolve().parent / beside.group(1))
        absolute = re.match(r"""^'''exec' '?(/[^' ]+)""", lines[1])
        return absolute.group(1) if absolute else None
    return words[0] if words[0].startswith("/") else None


# Python environments are read from files, never run: a ``.pth`` file's code runs only confined.


def _venv_config(prefix: Path) -> dict[str, str]:
    cfg = prefix / "pyvenv.cfg"
    try:
        lines = cfg.read_text(encoding="utf-8").splitlines() if cfg.is_file() else []
    except OSError:
        return {}
    return {k.strip(): v.strip() for k, sep, v in (line.partition("=") for line in lines) if sep}


def _show_python(launch: Launch, interp: Path, named_by: Path) -> str:
    """Show the interpreter's installation (and its venv, rewired to it); the path to run.
    Named by a file (``named_by``'s ``#!``) or a link in a folder the server writes, it is
    shown only when it is a Python installation's (``_installation``)."""
    venv = interp.parent.parent if (interp.parent.parent / "pyvenv.cfg").is_file() else None
    config = _venv_config(venv) if venv is not None else {}
    if venv is not None and "home" in config and launch.untrusted(venv / "pyvenv.cfg"):
        del config["home"]
    real = interp.resolve()
    if not _installation(real, launch):
        if named_by.resolve() != real and launch.untrusted(named_by):
            return str(interp)  # its #! line, which the server may have written: withheld
        if launch.follow(interp) is None:  # a link the server may have made: withheld
            return str(interp)
    base = Path(config["home"]).resolve().parent if "home" in config else real.parent.parent
    base_at = launch.show(base, "python") or str(base)
    if not _system(base):
        launch.env["LD_LIBRARY_PATH"] = f"{base_at}/lib"  # a shared libpython's RUNPATH is a host path
    if venv is None:
        launch.path_dirs.append(f"{base_at}/bin")
        return launch.translate(real) or str(real)
    # Some packages write into their own folder on first use: it gets a private write layer.
    venv_at = launch.show(venv, "env", private=True)
    if venv_at is None:
        return str(interp)
    # The venv's bin/python links to its base by a host path: inside, bin is new, linked anew.
    launch.ops.append(("--tmpfs", f"{venv_at}/bin"))
    base_exe = launch.translate(real)
    if base_exe is None or inside(real, venv):  # a copied interpreter (venv --copies): the file itself
        base_exe = f"{MOUNT_ROOT}/python-bin/{real.name}"
        launch.ops.append(("--ro-bind", str(real), base_exe))
    for link in dict.fromkeys(("python", "python3", interp.name)):
        launch.ops.append(("--symlink", base_exe, f"{venv_at}/bin/{link}"))
    kept = {k: v for k, v in config.items() if k not in ("home", "executable", "command")}
    lines = [f"home = {base_at}/bin", *(f"{k} = {v}" for k, v in kept.items())]
    launch.generate(f"{venv_at}/pyvenv.cfg", ("\n".join(lines) + "\n").encode("utf-8"))
    launch.path_dirs.append(f"{venv_at}/bin")
    return f"{venv_at}/bin/{interp.name}"


def _installation(real: Path, launch: Launch) -> bool:
    """Whether ``real`` is a Python installation's interpreter (``X/bin/python…`` beside its
    standard library ``X/lib/python3.N/os.py``) outside the folders the server writes."""
    base = real.parent.parent
    return (
        real.is_file()
        and real.parent.name == "bin"
        and _PYTHON.match(real.name) is not None
        and any(base.glob("lib/python3*/os.py"))
        and not any(inside(base, w) or inside(w, base) for w in launch._writable)
    )


def _show_import_path(launch: Launch, env: Mapping[str, str]) -> None:
    """Show the folders ``.pth`` files and ``PYTHONPATH`` list, both rewritten to name them inside."""
    for prefix in list(launch.read_only):
        for site in sorted(prefix.glob("lib/python3*/site-packages")):
            for pth in sorted(site.glob("*.pth")):
                if launch.untrusted(pth):
                    continue
                try:
                    lines = pth.read_text(encoding="utf-8", errors="replace").splitlines()
                except OSError:
                    continue
                changed, out = False, []
                for line in lines:
                    entry = line.strip()
                    if entry and os.path.isabs(entry) and not entry.startswith(("#", "import")):
                        real = launch.follow(Path(entry))
                        at = launch.show(real, "path") if real is not None else None
                        changed = changed or at != entry
                        line = at or ""
                    out.append(line)
                pth_at = launch.translate(pth)
                if changed and pth_at is not None:
                    launch.generate(pth_at, ("\n".join(out) + "\n").encode("utf-8"))
    given = [launch.follow(Path(p)) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    entries = [p for p in given if p is not None]
    shown = [at for p in entries if p != Path("/") and (at := launch.show(p, "path")) is not None]
    if env.get("PYTHONPATH"):
        launch.env["PYTHONPATH"] = os.pathsep.join(shown)


def _python(launch: Launch, exe: Path, interpreter: str, env: Mapping[str, str], cwd: Path) -> Launch:
    argv = launch.argv
    launch.host_argv = list(argv)
    interp = Path(interpreter)
    python_at = _show_python(launch, interp, exe)
    _show_import_path(launch, env)
    launch.env["PYTHONDONTWRITEBYTECODE"] = "1"
    if _PYTHON.match(exe.name) or exe.resolve() == interp.resolve():
        argv[0] = python_at
        if (module := module_in_cwd(argv, cwd)) is not None:  # what -m imports from its folder
            _show_module(launch, module)
        for i, arg in enumerate(argv[1:], start=1):
            if arg in ("-m", "-c"):
                break
            if arg.startswith("-"):
                continue
            script = (Path(arg) if os.path.isabs(arg) else cwd / arg).resolve()
            if script.is_file():  # the file only: its folder may hold anything
                argv[i] = launch.show(script, f"bin/{script.name}") or arg
            break
        return launch
    # A console script, run by the interpreter inside: back in its venv's bin, or shown as one file.
    script = exe.resolve()
    at = launch.translate(script)
    if at is not None and any(op[0] == "--tmpfs" and at.startswith(op[1] + "/") for op in launch.ops):
        at = launch.show(script, "bin", at=at)
    elif at is None:
        at = launch.show(script, f"bin/{script.name}")
    launch.argv = [python_at, at or str(script), *(_show_server_file(launch, a, cwd) for a in argv[1:])]
    return launch


def _show_server_file(launch: Launch, arg: str, cwd: Path) -> str:
    """``arg`` as the console script sees it inside: a server file it names (``mcp run
    server.py``) shown read-only, alone, as ``python server.py``'s is; a link to it in a folder
    the server writes is never followed."""
    if (named := server_file(arg, cwd)) is None or (real := launch.follow(named[0])) is None:
        return arg
    at = launch.show(real, f"bin/{real.name}")
    return arg if at is None else at + named[1]


def _show_module(launch: Launch, module: Path) -> None:
    """Show ``module`` (a package or a ``.py`` file) read-only by its own name in a folder of its
    own, which heads the import path inside (as the working folder heads it outside)."""
    folder = f"{MOUNT_ROOT}/module"
    while folder in launch._names:
        folder += "-"
    launch._names.add(folder)
    real = launch.follow(module)  # a link the server may have planted there is never followed
    if real is not None and launch.show(real, "module", at=f"{folder}/{module.name}") is not None:
        given = launch.env.get("PYTHONPATH")
        launch.env["PYTHONPATH"] = os.pathsep.join([folder, *([given] if given else [])])


def _node(launch: Launch, exe: Path, interpreter: str, cwd: Path) -> Launch:
    argv = launch.argv
    launch.host_argv = list(argv)
    node = Path(interpreter).resolve()
    if launch.translate(node) is None:
        launch.show(node.parent.parent if node.parent.name == "bin" else node.parent, "node")
    node_at = launch.translate(node) or str(node)
    launch.path_dirs.append(str(Path(node_at).parent))
    if exe.name not in _NODE:  # a script whose #! names node
        launch.argv = [node_at, _node_package(launch, exe), *argv[1:]]
        return launch
    launch.argv = [node_at, *argv[1:]]
    words = read_node(argv)
    if words.script is not None and (script := node_file(argv[words.script], cwd)):
        launch.argv[words.script] = _node_package(launch, script)
    for i, prefix, value, condition in words.files:  # --env-file .env, -r dotenv/config: as inside
        if (named := node_file(value, cwd, condition)) is not None:
            launch.argv[i] = prefix + _node_package(launch, named)
    return launch


def _node_package(launch: Launch, given: Path) -> str:
    """Show the script's package and every ``node_modules`` above it, their layout kept (node
    resolves by walking up); where the script is inside. A link on the way to either that lies
    in a folder the server writes is withheld (``Launch.follow``)."""
    if (script := launch.follow(given)) is None:
        return str(given)
    package = next((d for d in script.parents if (d / "package.json").is_file()), None)
    modules = [d / "node_modules" for d in script.parents if (d / "node_modules").is_dir()]
    items = [package or script, *(m for m in modules if launch.follow(m) is not None)]
    top = Path(os.path.commonpath([str(p) for p in items]))
    if top.is_file():  # a lone script keeps its name (node reads .mjs/.cjs from it)
        top = top.parent
    if top == Path(top.anchor):
        top = (package or script).parent
        items = [p for p in items if inside(p, top)]
    root = f"{MOUNT_ROOT}/app/node_modules" if top.name == "node_modules" else f"{MOUNT_ROOT}/app"
    for item in sorted(items, key=lambda p: len(p.parts)):
        if launch.translate(item) is None:
            rest = item.relative_to(top).as_posix()
            launch.show(item, "app", at=root if rest == "." else f"{root}/{rest}")
    return launch.translate(script) or str(script)


def _npx(
    argv: list[str],
    exe: Path,
    env: Mapping[str, str],
    cwd: Path,
    paths: tuple[list[Path], list[Path]],  # protected, written by the server
    network: bool,
) -> Launch:
    guarded, wrote = paths
    read = read_npx(argv)
    node = shutil.which("node", path=env.get("PATH", os.environ.get("PATH")))
    if read.problem is not None or node is None:
        why = read.problem if read.problem is not None else "node is not on the PATH"
        return Launch("npx", argv, problem=f"cannot read this npx command ({why})")
    cache = npm_cache(env, read.cache)
    # As npx: the project's own dependency first (unversioned), then what npx installed.
    local = project_of(cwd) if all(package_name(p) == p for p in read.packages) else None
    installed = npx_installed(cache, read.packages)
    found = bin_of(local, read) if local is not None else None
    found = found or (bin_of(installed, read) if installed is not None else None)
    spec = " ".join(read.packages)
    if found is None and installed is not None and read.command is not None:
        why = f"{read.command} is no command of {spec}"
        return Launch("npx", argv, problem=f"cannot read this npx command ({why})")
    fetch = " ".join([*(f"-p {p}" for p in read.packages), read.command]) if read.command else spec
    if found is None:  # not installed, or not as npm installs it
        if network:
            # npx may download: it gets a private, writable npm cache of its own.
            launch = Launch(
                "npx",
                argv,
                env={"npm_config_cache": "{home}/.npm", "npm_config_update_notifier": "false"},
                _protected=guarded,
            )
            for binary in (Path(node).resolve(), exe.resolve()):
                folder = binary.parent.parent if binary.parent.name == "bin" else binary.parent
                launch.show(folder, "node")
            for binary in (Path(node), exe):
                launch.path_dirs.append(launch.translate(binary.parent.resolve()) or str(binary.parent))
            return launch
        return Launch(
            "npx",
            argv,
            problem=(
                f"{spec} is not installed in the npm cache ({cache / '_npx'}) and a confined server has "
                f"no network: run `npx -y {fetch} --help </dev/null` once (it installs the package there; "
                "a server that ignores --help stops at the end of its input), or set network: any for "
                "this server"
            ),
        )
    launch = Launch("npx", [node, str(found[1]), *read.args], _protected=guarded, _writable=wrote)
    return _node(launch, Path(node), node, cwd)


def _npm_run(
    argv: list[str],
    env: Mapping[str, str],
    cwd: Path,
    paths: tuple[list[Path], list[Path]],  # protected, written by the server
    how: tuple[bool, int],  # network, depth
) -> Launch:
    """``npm start`` / ``npm run NAME``: confined as the command its package script runs, in the
    project, with the ``node_modules/.bin`` folders npm puts on its PATH."""
    read = npm_script(argv, cwd)
    if isinstance(read, str):
        return Launch("npm", argv, problem=f"cannot read this npm command ({read})")
    command, project = read
    if any(inside(project.resolve(), w) for w in paths[1]):
        why = f"{project / 'package.json'} lies in a folder the server writes: it may have written its script"
        return Launch("npm", argv, problem=f"cannot read this npm command ({why})")
    bins = [str(d / "node_modules" / ".bin") for d in (project, *project.parents)]
    path = os.pathsep.join([*(b for b in bins if Path(b).is_dir()), env.get("PATH", os.defpath)])
    return resolve_launch(
        command,
        env={**env, "PATH": path},
        cwd=project,
        protected=paths[0],
        network=how[0],
        writable=paths[1],
        depth=how[1] + 1,
    )


def _uvx(argv: list[str], exe: Path, env: Mapping[str, str], cwd: Path, guarded: list[Path]) -> Launch:
    """``uvx [--from X] pkg args``: uv finds the tool's cached environment offline, on the host;
    the server starts from its console script."""
    i = 1 if Path(argv[0]).name == "uvx" else 3
    source: str | None = None
    command: str | None = None
    uv_args: list[str] = []
    while i < len(argv):
        arg = argv[i]
        if arg == "--from" and i + 1 < len(argv):
            source = argv[i + 1]
            i += 2
        elif arg in ("--python", "-p", "--with") and i + 1 < len(argv):
            uv_args += [arg, argv[i + 1]]
            i += 2
        elif arg.startswith("-"):
            i += 1
        else:
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
    return _python(Launch("uvx", [str(script), *rest], _protected=guarded), script, interpreter, env, cwd)
