"""Fixtures for the model-backend tests: the anyio backend and a scripted server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pytest

from tether_testing.fake_server import FakeChatServer, Reply, scripted


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
