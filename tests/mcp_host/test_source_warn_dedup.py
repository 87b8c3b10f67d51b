"""``McpServerSource.warn``: the one place a server's trouble that the host works around is both
logged for the person (named by its server) and traced."""

from __future__ import annotations

import logging

import pytest

from tether.mcp._source import McpServerSource
from tether.trace._events import EventKind


def test_a_server_warning_is_logged_under_its_name_and_traced_with_its_data(
    caplog: pytest.LogCaptureFixture,
) -> None:
    source = McpServerSource("web", url="http://127.0.0.1:9/mcp")
    with caplog.at_level(logging.WARNING, logger="tether.mcp"):
        source.warn(EventKind.MCP_SANDBOX, "network refused: not allowed", action="network_refused", why="x")
    assert [r.getMessage() for r in caplog.records if r.name == "tether.mcp"] == [
        "[web] network refused: not allowed"
    ]
    # No trace open yet: kept for the run's trace, as every event of the source is.
    assert source._pending_events == [
        (EventKind.MCP_SANDBOX, {"server": "web", "action": "network_refused", "why": "x"})
    ]
