"""Confine a stdio server with bubblewrap (``bwrap``), on Linux: it sees what its launch needs (X4).

Read-only: the system folders, a few ``/etc`` files, what its launcher needs
(``tether.mcp._launchers``, shown under ``/opt/mcp`` through neutral views, never at host paths),
its ``file://`` roots and ``sandbox_read``. Read-write: roots only with ``roots_writable``,
``sandbox_write``, a private home and ``/tmp``, and its own environment through a private
overlay. Never the config folder, pins, state, logs or credential files. Its own ``/proc``,
``/dev`` and namespaces; network ``none`` (own loopback), an allowlist served by the host's proxy
(``tether.mcp._netproxy``), or ``any``. ``sandbox: auto`` confines when ``bwrap`` works and warns
otherwise; ``required`` refuses to start unconfined; ``none`` opts out.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from tether.mcp import _layers
from tether.mcp._launchers import (
    MOUNT_ROOT,
    NEVER_SEEN,
    SYSTEM_DIRS,
    Launch,
    inside,
    planted_link,
    resolve_launch,
)
from tether.mcp._layers import LAYERS, layered, overlay_status, run_in_layers
from tether.mcp._netallow import PROXY_PORT
from tether.mcp._roots import root_path

__all__ = [
    "ARGS_FD",
    "NET_FD",
    "Confinement",
    "Network",
    "SandboxMode",
    "SandboxPlan",
    "bwrap_status",
    "failure_hint",
    "overlay_status",
    "plan_confinement",
    "write_hint",
]

SandboxMode = Literal["auto", "required", "none"]
Network = Literal["none", "any"] | tuple[str, ...]  # a tuple: the host:port allowlist
ARGS_FD = "{args-fd}"  # where the launch puts the descriptor its bwrap options are read from
NET_FD = "{net-fd}"  # where it puts the descriptor the proxy socket comes back on (an allowlist)
HOME = "/home/mcp-server"  # the private home inside (a tmpfs)

_ETC = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/localtime",
    "/etc/nsswitch.conf",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/mime.types",
)
_ETC_NETWORK = ("/etc/resolv.conf", "/etc/hosts", "/etc/gai.conf")
# What a server inherits inside, besides its configured env and credentials.
_INSIDE_ENV = ("LANG", "LC_ALL", "PYTHONPATH")


@functools.cache
def bwrap_status(executable: str | None = None) -> tuple[str | None, str]:
    """(path of a working ``bwrap``, why not), probed once per process with a confined server's
    namespaces (so "found but unusable" shows)."""
    path = shutil.which(executable or "bwrap")
    if path is None:
        return None, f"{executable or 'bwrap'} is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    probe = [path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all", "--", "true"]
    if run_in_layers(probe):  # as a confined launch runs it: both probes in one process start
        return path, ""
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return None, f"{path} could not run: {type(err).__name__}: {err}"
    if done.returncode != 0:
        detail = (done.stderr or "").strip().splitlines()
        return None, f"{path} does not work here: {detail[-1] if detail else f'exit {done.returncode}'}"
    return path, ""


@dataclass(frozen=True)
class Confinement:
    """What a confined server may touch (shown in the review and traced)."""

    profile: str
    read_only: tuple[str, ...]
    read_write: tuple[str, ...]
    network: Network
    withheld: tuple[str, ...] = ()


@dataclass(frozen=True)
class SandboxPlan:
    """How a stdio server is launched; confined, ``options`` go to bwrap on ``ARGS_FD``."""

    mode: SandboxMode
    argv: list[str]
    env: dict[str, str] | None = None
    options: tuple[str, ...] = ()
    confinement: Confinement | None = None
    data: tuple[bytes, ...] = ()  # files generated for inside: ``{data-fd:N}`` in ``options``
    warning: str | None = None  # set when the server runs unconfined although it was not opted out
    refused: str | None = None  # set when ``required`` cannot be met: the server must not start
    proxy: tuple[str, ...] = ()  # the allowlist the host's proxy serves (the launch sends NET_FD)
    problem: str | None = None  # set when the launch cannot work confined as configured
    unshown: tuple[str, ...] = ()  # host paths its command names that it is not shown

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {"sandbox": self.mode, "confined": self.confinement is not None}
        if self.confinement is not None:
            out["launcher"] = self.confinement.profile
            out["read_only"] = list(self.confinement.read_only)
            out["read_write"] = list(self.confinement.read_write)
            net = self.confinement.network
            out["network"] = net if isinstance(net, str) else "allowlist"
            if not isinstance(net, str):
                out["network_allow"] = list(net)
            if self.confinement.withheld:
                out["withheld"] = list(self.confinement.withheld)
            if self.unshown:
                out["not_shown"] = list(self.unshown)
        notes = {"warning": self.warning, "refused": self.refused, "problem": self.problem}
        return out | {f"sandbox_{k}": v for k, v in notes.items() if v}


def plan_confinement(
    mode: SandboxMode,
    argv: Sequence[str],
    *,
    roots: Iterable[str],
    cwd: str | None,
    network: Network = "none",
    roots_writable: bool = False,
    read: Iterable[str] = (),
    write: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    protected: Iterable[str | Path] = (),
    bwrap: str | None = None,
) -> SandboxPlan:
    """The launch of one stdio server under ``mode``."""
    argv = argv_given = list(argv)
    found = _bwrap_for(mode, argv, bwrap)
    if isinstance(found, SandboxPlan):
        return found
    env = dict(env or {})
    base = (Path(cwd) if cwd else Path.cwd()).resolve()
    guarded = [Path(p).resolve() for p in protected]
    written, writes, reads, writable = _declared(roots, write, read, roots_writable)
    online = network != "none"
    launch = resolve_launch(argv, env=env, cwd=base, protected=guarded, network=online, writable=writable)
    if launch.problem:
        return SandboxPlan(mode, argv, problem=launch.problem)
    withheld = list(launch.withheld)

    def allowed(given: Path) -> bool:
        p = given.resolve()
        if (planted := _planted(given, writable)) is not None:
            withheld.append(planted)
            return False
        for q in guarded:
            if inside(q, p):
                withheld.append(f"{p} (holds {q}, {NEVER_SEEN})")
                return False
        return p.exists()

    declared_roots = [p.resolve() for p in written if allowed(p)]
    rw = [p.resolve() for p in writes if allowed(p)]
    # Declared paths show at their own path; the launcher's files under MOUNT_ROOT (launch.ops).
    ro = [p.resolve() for p in reads if allowed(p)]
    (rw if roots_writable else ro).extend(declared_roots)
    written += [*writes, *reads]
    opts = _system_opts(network)
    for op in launch.ops:
        opts += list(op)
    rw_out = _outermost(rw)
    shown_ro: list[str] = []
    for p in _outermost(ro):
        if any(inside(p, r) for r in rw_out):
            continue
        opts += ["--ro-bind", str(p), str(p)]
        shown_ro.append(str(p))
    for p in rw_out:
        opts += ["--bind", str(p), str(p)]
    visible = [*rw_out, *map(Path, shown_ro)]
    for alias, target in _aliases(written, visible):
        opts += ["--symlink", str(target), str(alias)]
    if base.is_dir() and any(inside(base, v) for v in visible if v.is_dir()):
        workdir = str(base)
    else:
        workdir = str(declared_roots[0]) if declared_roots and declared_roots[0].is_dir() else HOME
    opts += ["--chdir", workdir, "--"]
    opts = _bounded(opts, found)
    inside_env = _inside_env(env, launch, network)
    shown = (*(str(p) for p in launch.read_only), *shown_ro)
    confinement = Confinement(launch.profile, shown, tuple(str(p) for p in rw_out), network, tuple(withheld))
    argv = [found, "--args", ARGS_FD, *launch.argv]
    proxy = network if isinstance(network, tuple) else ()
    net = f"{PROXY_PORT}:{NET_FD}" if proxy else None
    argv, opts = _private_layers(argv, opts, launch.overlays, (*shown_ro, *map(str, rw_out)), net)
    unshown = _unshown(argv_given[1:], launch, visible)
    return SandboxPlan(
        mode, argv, inside_env, tuple(opts), confinement, tuple(launch.data), proxy=proxy, unshown=unshown
    )


def _declared(
    roots: Iterable[str], write: Iterable[str], read: Iterable[str], roots_writable: bool
) -> tuple[list[Path], list[Path], list[Path], list[Path]]:
    """The declared paths as written (roots, sandbox_write, sandbox_read), and the real folders
    the server writes."""
    written = [root_path(r) for r in roots if (u := urlsplit(r)).scheme == "file" and u.path]
    writes, reads = [Path(w).expanduser() for w in write], [Path(r).expanduser() for r in read]
    writable = [p.resolve() for p in (*writes, *(written if roots_writable else ()))]
    return written, writes, reads, writable


def _planted(path: Path, writable: Sequence[Path]) -> str | None:
    """Why ``path`` (as declared) is withheld when a link on the way to it lies in a folder the
    server may write: the server may have made it, to be shown a host path of its choosing at its
    next start (None: no such link)."""
    if (step := planted_link(path, writable)) is not None:
        return f"{path} (through {step}, a link in a folder the server writes: it may have made it)"
    return None


def _system_opts(network: Network) -> list[str]:
    """Every confined server's namespaces, read-only system folders, fresh /proc, /dev, /tmp, home
    (an allowlist shares the network namespace the launch made: loopback and the proxy only)."""
    opts = ["--die-with-parent", "--new-session", "--unshare-all"]
    if network != "none":
        opts.append("--share-net")
    for sysdir in SYSTEM_DIRS:
        p = Path(sysdir)
        if p.is_symlink():
            opts += ["--symlink", os.readlink(p), sysdir]
        elif p.is_dir():
            opts += ["--ro-bind", sysdir, sysdir]
    for etc in (*_ETC, *(_ETC_NETWORK if network == "any" else ())):
        opts += ["--ro-bind-try", etc, etc]
    return [*opts, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", HOME]


def _bounded(opts: list[str], bwrap: str) -> list[str]:
    """The options with every tmpfs the server gets (its /tmp, its home, a launcher's) at most
    ``tether.mcp._layers.SCRATCH_BYTES``, as its write layers are (``--size``, bubblewrap 0.7+;
    an older one leaves them unbounded)."""
    if not _sizes_tmpfs(bwrap):
        return opts
    out: list[str] = []
    for opt in opts:
        if opt == "--tmpfs" and out[-2:-1] != ["--size"]:
            out += ["--size", str(_layers.SCRATCH_BYTES)]
        out.append(opt)
    return out


@functools.cache
def _sizes_tmpfs(bwrap: str) -> bool:
    """Whether this bubblewrap takes ``--size`` (probed once per process)."""
    try:
        done = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--size" in done.stdout + done.stderr


def _bwrap_for(mode: SandboxMode, argv: list[str], bwrap: str | None) -> str | SandboxPlan:
    """The bubblewrap to confine with, or the plan without it (refused or warned by ``mode``)."""
    if mode == "none":
        return SandboxPlan(mode, argv)
    if not sys.platform.startswith("linux"):
        why = "confinement needs Linux with bubblewrap"
    else:
        path, why = bwrap_status(bwrap)
        if path is not None:
            return path
    if mode == "required":
        return SandboxPlan(mode, argv, refused=f"sandbox required but unavailable: {why}")
    return SandboxPlan(mode, argv, warning=f"running UNCONFINED (reads anything the user can): {why}")


def _inside_env(env: Mapping[str, str], launch: Launch, network: Network) -> dict[str, str]:
    """The server's environment inside (with network, the host's certificate settings too)."""
    inside_env = {k: env[k] for k in _INSIDE_ENV if k in env}
    inside_env.update({k: v for k, v in env.items() if k not in _HOST_ENV})
    inside_env.update({k: v.replace("{home}", HOME) for k, v in launch.env.items()})
    path_dirs = list(dict.fromkeys(launch.path_dirs))
    inside_env["PATH"] = os.pathsep.join([*path_dirs, "/usr/local/bin", "/usr/bin", "/bin"])
    inside_env["HOME"] = HOME
    inside_env["TMPDIR"] = "/tmp"
    if network != "none":
        shown = ("/etc/ssl/", "/usr/")
        inside_env.update({k: os.environ[k] for k in _TLS_ENV if os.environ.get(k, "").startswith(shown)})
    if isinstance(network, tuple):  # its only way out: the host's proxy in its own namespace
        for k in _NOT_PROXY:
            inside_env.pop(k, None)
        inside_env.update(dict.fromkeys(_PROXY_ENV, f"http://127.0.0.1:{PROXY_PORT}"))
        inside_env["NODE_USE_ENV_PROXY"] = "1"  # Node 24+ honours the variables only when told to
    return inside_env


_PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")  # set to the host's proxy
_NOT_PROXY = ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy")  # removed: nothing bypasses it
_TLS_ENV = ("SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")


def _stage_sources(opts: list[str], shown_at_home: Iterable[str]) -> tuple[list[str], list[Path]]:
    """The options with each launcher bind of a host path read from a neutral view instead
    (``{stage:j}``, a file as ``{stage:j}/NAME``), and the folders staged, in order."""
    declared = set(shown_at_home)
    staged: list[Path] = []
    out = list(opts)
    for k in range(len(out) - 2):
        if out[k] != "--ro-bind" or out[k + 1] in declared or out[k + 1] == out[k + 2]:
            continue
        host = Path(out[k + 1])
        if any(inside(host, Path(s)) for s in SYSTEM_DIRS) or not host.exists():
            continue
        folder, name = (host, None) if host.is_dir() else (host.parent, host.name)
        if folder not in staged:
            staged.append(folder)
        j = staged.index(folder)
        out[k + 1] = f"{{stage:{j}}}" + (f"/{name}" if name else "")
    return out, staged


def _private_layers(
    argv: list[str],
    opts: list[str],
    lowers: Sequence[Path],
    declared: Iterable[str] = (),
    net: str | None = None,
) -> tuple[list[str], list[str]]:
    """The launch with private write layers over ``lowers`` (``{overlay:N}``) and neutral views
    (``_stage_sources``), laid by ``tether.mcp._layers`` (without overlays: read-only host binds).
    With ``net`` (an allowlist) the launch always runs there: it makes the network namespace."""
    usable = overlay_status() is None
    staged: list[Path] = []
    if usable:
        opts, staged = _stage_sources(opts, declared)
    out = []
    for i, opt in enumerate(opts):
        if opt.startswith("{overlay:"):
            n = int(opt[len("{overlay:") : -1])
            out.append(f"{LAYERS}/m{n}" if usable else str(lowers[n]))
            if not usable and i > 0 and out[-2] == "--bind":
                out[-2] = "--ro-bind"
        elif opt.startswith("{stage:"):
            j, _, rest = opt[len("{stage:") :].partition("}")
            out.append(f"{LAYERS}/s{j}{rest}")
        else:
            out.append(opt)
    if net is not None:
        return layered(argv, lowers if usable else (), staged, net), out
    if not usable or not (lowers or staged):
        return argv, out
    return layered(argv, lowers, staged), out


# The host's own variables a server is started with unconfined; inside, these are the sandbox's.
_HOST_ENV = ("PATH", "HOME", "TMPDIR", "VIRTUAL_ENV", "SYSTEMROOT", "LANG", "LC_ALL", "PYTHONPATH")


_CAUSES = (
    (
        re.compile(r"read-only file system|\berofs\b|permission denied|\beacces\b", re.I),
        "it tried to write outside its private home and /tmp: list that folder in sandbox_write",
    ),
    (
        re.compile(
            r"\benotfound\b|\beai_again\b|name resolution|network is unreachable|name or service not known"
            r"|\beconnrefused\b|getaddrinfo|connection refused|\b403\W{0,3}forbidden|tunnel connection failed"
            r"|proxyerror|network allowlist",
            re.I,
        ),
        "{network}",
    ),
    (
        re.compile(r"no such file|\benoent\b|cannot find module|modulenotfounderror|not found", re.I),
        "it could not find a file it needs: list its folder in sandbox_read",
    ),
)


# The last words of a server that failed by an error of its own program, which no confinement
# causes (Python's and Node's): an attribute or a name its code expects and its dependencies lack.
_OWN_ERROR = re.compile(
    r"(?:AttributeError|TypeError|NameError|SyntaxError|IndentationError|ReferenceError"
    r"|ImportError: cannot import name)\b.*"
)


_NETWORK_ADVICE = (
    "it has no network here: list the host:port it needs in network (network: any gives it the host's)",
    "its network goes through an HTTP proxy (HTTP_PROXY / HTTPS_PROXY; a client that ignores them has "
    "none) that lets only the listed destinations through: list the host:port it needs in network",
)


def failure_hint(plan: SandboxPlan | None, stderr_tail: Sequence[str] = ()) -> str | None:
    """What to change when a confined server failed to start, from what it said last."""
    if plan is None or plan.confinement is None:
        return None
    change = "list what it needs in sandbox_read / sandbox_write, or the host:port it needs in network"
    found = False
    for line in reversed(stderr_tail):  # its last words first: the error, then the traceback
        for pattern, advice in _CAUSES:
            if pattern.search(line):
                change, found = advice.format(network=_NETWORK_ADVICE[bool(plan.proxy)]), True
                break
        if found:
            break
    if plan.unshown:  # its arguments name a host path it cannot see (an allowed folder, a repository)
        change = (
            f"its command names {plan.unshown[0]}, which it is not shown: list it in sandbox_read "
            "(sandbox_write if the server writes there) or in roots"
        )
    if plan.confinement.withheld:  # likelier than any setting: a folder it needs holds the host's files
        change = f"it was not shown {plan.confinement.withheld[0]}"
    elif not found and not plan.unshown and (own := _own_error(stderr_tail)) is not None:
        return (
            f"it failed by an error of its own program ({own}), which no sandbox causes: check the "
            "server's version against what it was installed with (its dependencies' versions)"
        )
    return (
        f"the server ran confined ({plan.confinement.profile} launcher, sandbox: {plan.mode}); the sandbox "
        f"may be the cause: {change} (sandbox: none runs it unconfined, to check)"
    )


def _own_error(stderr_tail: Sequence[str]) -> str | None:
    """The server's last words when they are an error of its own program (``_OWN_ERROR``)."""
    last = next((line.strip() for line in reversed(stderr_tail) if line.strip()), "")
    found = _OWN_ERROR.match(last)
    return found.group(0)[:200] if found else None


def _unshown(args: Sequence[str], launch: Launch, visible: Sequence[Path]) -> tuple[str, ...]:
    """The host paths among a command's arguments (``/path`` or ``--flag=/path``) that the sandbox
    does not show: neither the launcher's files, a system folder nor a declared path. A path
    that exists, or one whose folder exists (a file the server makes there: a database, a log,
    which inside lands in its private /tmp or home, lost when it exits)."""
    out: list[str] = []
    for arg in args:
        text = arg.partition("=")[2] if arg.startswith("-") else arg
        if not text.startswith(("/", "~")):
            continue
        path = Path(os.path.abspath(Path(text).expanduser()))
        real = path.resolve()
        if not (path.exists() or (len(path.parts) > 2 and path.parent.is_dir())):
            continue  # missing, and its folder too (or a name at the root: an endpoint's ``/mcp``)
        if launch.translate(real) is not None or any(inside(real, v) for v in visible):
            continue  # shown: a system or launcher path (translate), or a declared one
        if str(path) not in out:
            out.append(str(path))
    return tuple(out)


def _aliases(written: Iterable[Path], visible: Sequence[Path]) -> list[tuple[Path, Path]]:
    """Declared paths written through a symlink (``/data/link`` for ``/srv/real``), each with the
    shown path it resolves to: the server is told the path as written (in its arguments, as a
    root), so it shows there too, as a link to the shown path (bwrap makes the folders above it)."""
    out: list[tuple[Path, Path]] = []
    for alias in sorted({Path(os.path.abspath(p)) for p in written}, key=lambda p: len(p.parts)):
        target = alias.resolve()
        if (
            target == alias
            or not any(inside(target, v) for v in visible)  # not shown (missing, or withheld)
            or any(inside(alias, v) for v in visible)  # the link itself is shown with its folder
            or any(inside(alias, a) or inside(a, alias) for a, _ in out)
            or any(inside(alias, Path(s)) for s in (*SYSTEM_DIRS, "/proc", "/dev", "/tmp/.X11-unix"))
        ):
            continue
        out.append((alias, target))
    return out


_READ_ONLY = re.compile(r"read-only file system|\berofs\b", re.I)
_DENIED = re.compile(r"permission denied|\beacces\b", re.I)  # with a path: a file's, not an API's
_QUOTED_PATH = re.compile(r"""['"](/[^'"\n]{1,300})['"]""")


def write_hint(plan: SandboxPlan | None, error_text: str) -> str | None:
    """For the person, when a confined server's tool error says a write was refused (a read-only
    file system; permission denied on a path it quotes): where it may write, and what to change."""
    if plan is None or plan.confinement is None:
        return None
    found = _READ_ONLY.search(error_text) or _DENIED.search(error_text)
    if found is None:
        return None
    quoted = _QUOTED_PATH.search(error_text[found.start() :]) or _QUOTED_PATH.search(error_text)
    if quoted is None and not _READ_ONLY.search(error_text):
        return None
    path = quoted.group(1) if quoted else None
    where = f" ({path})" if path else ""
    if path is not None and inside(Path(path), Path(MOUNT_ROOT)):
        return (
            f"a call failed writing into the server's own installation{where}, which a confined server "
            "sees read-only: set the data path its README documents (often an env variable) to a folder "
            "listed in sandbox_write"
        )
    return (
        f"a call failed on a write the sandbox does not allow{where}: a confined server writes only to "
        "sandbox_write folders (and its roots with roots_writable): list the folder there"
    )


def _outermost(paths: Iterable[Path]) -> list[Path]:
    """Unique paths, without those inside another one of the list."""
    unique = sorted(set(paths), key=lambda p: len(p.parts))
    out: list[Path] = []
    for p in unique:
        if not any(inside(p, q) for q in out):
            out.append(p)
    return out
