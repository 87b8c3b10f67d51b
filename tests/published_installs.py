"""The published MCP servers the tests launch (npm's, PyPI's), installed once per test session
however many xdist workers share them (``build_once``), and begun in the background once the
session's first test starts (``prefetch``): an install waits on the package registry far more
than it computes (PyPI's three servers: about 40 s, 4 s of it CPU), so the tests run meanwhile
instead of a worker sitting idle in the first test that needs them."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import threading
import time
import venv
from collections.abc import Callable, Collection
from pathlib import Path

import pytest

SCOPE = "@modelcontextprotocol"
NPM_PACKAGES = ("server-filesystem", "server-memory", "server-sequential-thinking")
PYPI_PACKAGES = ("mcp-server-time", "mcp-server-git", "mcp-server-fetch")
# What the builders run, taken when this module is imported: a test that patches these (or the
# environment) while an install runs in the background changes nothing of it.
_POPEN, _ENV, _EXECUTABLE = subprocess.Popen, dict(os.environ), sys.executable


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's base temporary folder, the same for every xdist worker."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the workers' folders are pytest-N/popen-gwK: pytest-N is the session's
    return root


def build_once(root: Path, name: str) -> str:
    """``BUILDERS[name](folder)`` run once per test session: the first caller to take the lock
    (a worker's test, or a ``prefetch`` thread) builds ``root/shared-<name>`` and records the
    outcome; every other caller waits for it. Returns why it could not be built ("" once built)."""
    folder, outcome = root / f"shared-{name}", root / f"shared-{name}.outcome"
    with (root / f"shared-{name}.lock").open("a") as lock:
        deadline = time.monotonic() + 1800  # generous: the builders' own timeouts are 600 s
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"another worker held the {name} install for over 30 minutes"
                    ) from None
                time.sleep(0.5)
        try:
            if not outcome.exists():
                folder.mkdir(exist_ok=True)
                outcome.write_text(BUILDERS[name](folder) or "", encoding="utf-8")
            return outcome.read_text(encoding="utf-8")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def once(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """The folder ``build_once`` built, or a skip saying why it could not be."""
    try:
        why = build_once(shared_root(tmp_path_factory), name)
    except TimeoutError as err:
        pytest.fail(str(err))
    if why:
        pytest.skip(why)
    return shared_root(tmp_path_factory) / f"shared-{name}"


def prefetch(tmp_path_factory: pytest.TempPathFactory, fixtures: Collection[str]) -> list[threading.Thread]:
    """Each install a collected test's fixtures name (``FIXTURES``) begun in a thread of its own;
    join them before the session ends (a worker that leaves mid-install lets go of its lock with
    the folder half built)."""
    root = shared_root(tmp_path_factory)
    threads = [
        threading.Thread(target=build_once, args=(root, name), name=f"install-{name}", daemon=True)
        for fixture, name in FIXTURES.items()
        if fixture in fixtures
    ]
    for thread in threads:
        thread.start()
    return threads


def _run(command: list[str], timeout: float) -> tuple[int, str]:
    """``command``'s exit status and its output (stderr, else stdout); -1 once past ``timeout``."""
    pipe = subprocess.PIPE
    proc = _POPEN(command, stdin=subprocess.DEVNULL, stdout=pipe, stderr=pipe, text=True, env=_ENV)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return -1, ""
    return proc.returncode, err or out


def _npm_install(packages: list[str]) -> Callable[[Path], str | None]:
    """``npm install`` of ``packages`` into the folder (each its ``dist/index.js``)."""

    def build(folder: Path) -> str | None:
        npm = shutil.which("npm", path=_ENV.get("PATH"))
        if npm is None or shutil.which("node", path=_ENV.get("PATH")) is None:
            return "npm/node are not installed"
        command = [npm, "install", "--prefix", str(folder), "--no-audit", "--no-fund", "--silent", *packages]
        code, said = _run(command, 600)
        if code == -1:
            return "npm install timed out (no registry?)"
        modules = folder / "node_modules"
        # A package may be pinned (``@scope/name@1.2.3``): its folder is its name alone.
        names = [p[: p.index("@", 1)] if "@" in p[1:] else p for p in packages]
        if code != 0 or not all((modules / n / "dist" / "index.js").exists() for n in names):
            return f"npm could not install {packages}: {said[-300:]}"
        return None

    return build


def _pip_install(folder: Path) -> str | None:
    # No pip of its own (ensurepip: seconds of CPU, nearly a minute under load): this process's
    # pip installs into it (``--python``), the servers and their dependencies from the index.
    venv.EnvBuilder(with_pip=False, symlinks=True).create(folder / "venv")
    python = folder / "venv" / "bin" / "python"
    pip = [_EXECUTABLE, "-m", "pip", "--python", str(python), "install", "-q", "--disable-pip-version-check"]
    code, said = _run([*pip, *PYPI_PACKAGES], 600)
    if code == -1:
        return "pip install timed out (no registry?)"
    if code != 0:
        return f"pip could not install {PYPI_PACKAGES}: {said[-300:]}"
    return None


def _ended(code: int, said: str) -> bool:
    return code == 0


def _launcher_cached(
    command: list[str], what: str, ok: Callable[[int, str], bool] = _ended
) -> Callable[[Path], str | None]:
    """A user's first ``npx -y`` / ``uvx`` run: it fetches the package into the launcher's own
    cache (the folder it is given is an argument at most: npx's filesystem server serves it);
    ``ok(exit status, stderr)`` says whether it did."""

    def build(folder: Path) -> str | None:
        found = shutil.which(command[0], path=_ENV.get("PATH"))
        if found is None:
            return f"{command[0]} is not installed"
        code, said = _run([found, *(str(folder) if a == "{folder}" else a for a in command[1:])], 300)
        if code == -1:
            return f"{command[0]} timed out fetching {what} (no registry?)"
        return None if ok(code, said) else f"{command[0]} could not fetch {what}: {said[-300:]}"

    return build


EVERYTHING = f"{SCOPE}/server-everything"
BUILDERS: dict[str, Callable[[Path], str | None]] = {
    "npm": _npm_install([f"{SCOPE}/{p}" for p in NPM_PACKAGES]),
    "npm-everything": _npm_install([EVERYTHING]),
    # An MCP Apps server (wild round 17), pinned to the release its test was written against.
    "npm-monitor": _npm_install([f"{SCOPE}/server-system-monitor@2.0.3"]),
    # A 2025 release (wild round 18): its Streamable HTTP mode answers a session it does not know
    # with a 400 (the TypeScript SDK examples' "No valid session ID provided"), not the spec's 404.
    "npm-everything-2025": _npm_install([f"{EVERYTHING}@2025.5.12"]),
    "pypi": _pip_install,
    "npx-filesystem": _launcher_cached(
        ["npx", "-y", f"{SCOPE}/server-filesystem", "{folder}"], f"{SCOPE}/server-filesystem"
    ),
    # The reference server says "Starting" on stderr, then ends at the end of its input.
    "npx-everything": _launcher_cached(
        ["npx", "-y", EVERYTHING], EVERYTHING, lambda code, said: code == 0 or "Starting" in said
    ),
    # The memory server says it is "running on stdio", then ends at the end of its input.
    "npx-memory": _launcher_cached(
        ["npx", "-y", f"{SCOPE}/server-memory"],
        f"{SCOPE}/server-memory",
        lambda code, said: code == 0 or "running on stdio" in said,
    ),
    "uvx-time": _launcher_cached(["uvx", "mcp-server-time", "--help"], "mcp-server-time"),
    "uvx-fetch": _launcher_cached(["uvx", "mcp-server-fetch", "--help"], "mcp-server-fetch"),
}
# The fixtures that need each (tests/mcp_host/: conftest.py, test_reference_server.py,
# test_sandbox_launchers.py, test_wild_round17.py, test_wild_round18.py and test_wild_round31.py).
FIXTURES = {
    "npm_servers": "npm",
    "everything": "npm-everything",
    "monitor": "npm-monitor",
    "everything_2025": "npm-everything-2025",
    "pypi_servers": "pypi",
    "npx_cached": "npx-filesystem",
    "npx_installed": "npx-everything",
    "npx_memory": "npx-memory",
    "uvx_cached": "uvx-time",
    "uvx_tool": "uvx-time",
    "uvx_fetch": "uvx-fetch",
}
