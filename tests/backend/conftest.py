"""Fixtures for the model-backend tests: the anyio backend and a scripted server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pytest

from tether_testing.fake_server import FakeChatServer, Reply, scripted


@pytest.fixture(autouse=True)
def _no_ca_bundle(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Trust an empty folder of certificates (``SSL_CERT_DIR``, which httpx2 honours) instead of
    the system bundle: these servers speak plain HTTP on 127.0.0.1, so no certificate is ever
    checked, and loading the bundle cost each backend's client tens of milliseconds (several
    hundred clients here)."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path_factory.getbasetemp() / "no-certificates"))
    (tmp_path_factory.getbasetemp() / "no-certificates").mkdir(exist_ok=True)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def serve() -> Iterator[Callable[[Sequence[Reply]], FakeChatServer]]:
    """Start a scripted chat-completions server on 127.0.0.1; stopped after the test."""
    servers: list[FakeChatServer] = []

    def start(replies: Sequence[Reply]) -> FakeChatServer:
        server = FakeChatServer(scripted(replies)).__enter__()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.__exit__(None, None, None)
