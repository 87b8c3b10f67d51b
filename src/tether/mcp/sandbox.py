"""Confine a stdio server to its declared roots with bubblewrap (``bwrap``), on Linux.

Roots say what a server should look at; the sandbox is what holds it to that (X4). A
confined server sees:

- read-only: the system's program folders (``/usr``, ``/lib*``, ``/bin``, ``/sbin``), a few
  files of ``/etc`` a program needs to start (not ``/etc/passwd`` or ``/etc/shadow``), the
  interpreter it runs under and its libraries, the folders of the script files named on
  its command line, and any path the config lists in ``sandbox_read``;
- read-write: its ``file://`` roots and the paths listed in ``sandbox_write``, nothing else;
- a fresh, empty ``/tmp``, its own ``/proc`` and a minimal ``/dev``;
- no network unless the config allows it; new user, PID, IPC and UTS namespaces; it dies
  with the host.

``sandbox: auto`` (the default) confines whenever ``bwrap`` works here and otherwise starts
the server unconfined with a visible warning; ``required`` refuses to start an unconfined
server; ``none`` opts out.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = ["Confinement", "SandboxMode", "SandboxPlan", "bwrap_status", "plan_confinement"]

SandboxMode = Literal["auto", "required", "none"]

_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
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


@functools.cache
def bwrap_status(executable: str | None = None) -> tuple[str | None, str]:
    """(path of a working ``bwrap``, why not) — it is tried once per process, with the same
    namespaces a confined server gets, so "found but unusable" (no user namespaces) shows."""
    path = shutil.which(executable or "bwrap")
    if path is None:
        return None, f"{executable or 'bwrap'} is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    probe = [path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all", "--", "true"]
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

    read_only: tuple[str, ...]
    read_write: tuple[str, ...]
    network: bool


@dataclass(frozen=True)
class SandboxPlan:
    """How a stdio server is launched: ``argv`` (wrapped in bwrap when confined)."""

    mode: SandboxMode
    argv: list[str]
    confinement: Confinement | None = None
    warning: str | None = None  # set when the server runs unconfined although it was not opted out
    refused: str | None = None  # set when ``required`` cannot be met: the server must not start
    notes: list[str] = field(default_factory=list)

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {"sandbox": self.mode, "confined": self.confinement is not None}
        if self.confinement is not None:
            out["read_write"] = list(self.confinement.read_write)
            out["network"] = self.confinement.network
        if self.warning:
            out["sandbox_warning"] = self.warning
        if self.refused:
            out["sandbox_refused"] = self.refused
        return out


def _root_paths(roots: Iterable[str]) -> list[Path]:
    from urllib.parse import unquote, urlsplit

    out = []
    for uri in roots:
        parts = urlsplit(uri)
        if parts.scheme == "file" and parts.path:
            out.append(Path(unquote(parts.path)))
    return out


def _interpreter_paths(executable: str) -> list[Path]:
    """The installation an executable belongs to (``…/bin/x`` → ``…``), through symlinks; for
    this very Python interpreter, also every folder on its import path."""
    found = shutil.which(executable)
    if found is None:
        return []
    paths = []
    for candidate in (Path(found), Path(found).resolve()):
        if candidate.parent.name == "bin":
            paths.append(candidate.parent.parent)
        else:
            paths.append(candidate.parent)
    if Path(found).resolve() == Path(sys.executable).resolve() or Path(found) == Path(sys.executable):
        paths += [Path(sys.prefix), Path(sys.base_prefix)]
        here = Path.cwd()
        paths += [Path(p) for p in sys.path if p and Path(p).is_dir() and Path(p).resolve() != here]
    return paths


def plan_confinement(
    mode: SandboxMode,
    argv: Sequence[str],
    *,
    roots: Iterable[str],
    cwd: str | None,
    network: bool = False,
    read: Iterable[str] = (),
    write: Iterable[str] = (),
    env: dict[str, str] | None = None,
    bwrap: str | None = None,
) -> SandboxPlan:
    """The launch of one stdio server under ``mode``."""
    argv = list(argv)
    if mode == "none":
        return SandboxPlan(mode, argv)
    if not sys.platform.startswith("linux"):
        why = "confinement needs Linux with bubblewrap"
    else:
        path, why = bwrap_status(bwrap)
        if path is not None:
            return _confine(
                mode, path, argv, roots=roots, cwd=cwd, network=network, read=read, write=write, env=env
            )
    if mode == "required":
        return SandboxPlan(mode, argv, refused=f"sandbox required but unavailable: {why}")
    return SandboxPlan(mode, argv, warning=f"running UNCONFINED (reads anything the user can): {why}")


def _confine(
    mode: SandboxMode,
    bwrap: str,
    argv: list[str],
    *,
    roots: Iterable[str],
    cwd: str | None,
    network: bool,
    read: Iterable[str],
    write: Iterable[str],
    env: dict[str, str] | None,
) -> SandboxPlan:
    base = Path(cwd) if cwd else Path.cwd()
    rw = [p.resolve() for p in _root_paths(roots) if p.exists()]
    rw += [Path(p).expanduser().resolve() for p in write if Path(p).expanduser().exists()]
    ro: list[Path] = []
    ro += _interpreter_paths(argv[0])
    for i, arg in enumerate(argv[1:], start=1):
        if arg.startswith("-"):
            continue
        p = Path(arg) if os.path.isabs(arg) else base / arg
        if p.is_file():
            ro.append(p.resolve().parent)
            argv[i] = str(p.resolve())  # the server may start in another folder (below)
    for entry in (env or {}).get("PYTHONPATH", "").split(os.pathsep):
        if entry and Path(entry).is_dir():
            ro.append(Path(entry).resolve())
    ro += [Path(p).expanduser().resolve() for p in read]
    cmd = [bwrap, "--die-with-parent", "--new-session", "--unshare-all"]
    if network:
        cmd.append("--share-net")
    for sysdir in _SYSTEM:
        p = Path(sysdir)
        if p.is_symlink():
            cmd += ["--symlink", os.readlink(p), sysdir]
        elif p.is_dir():
            cmd += ["--ro-bind", sysdir, sysdir]
    for etc in (*_ETC, *(_ETC_NETWORK if network else ())):
        cmd += ["--ro-bind-try", etc, etc]
    cmd += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    shown_ro: list[str] = []
    for p in _outermost(ro):
        if any(_inside(p, r) for r in rw) or any(_inside(p, Path(s)) for s in _SYSTEM):
            continue
        cmd += ["--ro-bind-try", str(p), str(p)]
        shown_ro.append(str(p))
    for p in _outermost(rw):
        cmd += ["--bind", str(p), str(p)]
    workdir = base.resolve()
    if not any(_inside(workdir, r) for r in [*rw, *map(Path, shown_ro)]):
        # The config's folder holds pins, state and credential files: never shown to the server.
        workdir = rw[0] if rw else Path("/tmp")
    cmd += ["--chdir", str(workdir), "--", *argv]
    confinement = Confinement(tuple(shown_ro), tuple(str(p) for p in _outermost(rw)), network)
    return SandboxPlan(mode, cmd, confinement)


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _outermost(paths: Iterable[Path]) -> list[Path]:
    """Unique paths, without those inside another one of the list."""
    unique = sorted(set(paths), key=lambda p: len(p.parts))
    out: list[Path] = []
    for p in unique:
        if not any(_inside(p, q) for q in out):
            out.append(p)
    return out
