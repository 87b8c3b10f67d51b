"""What a first-time reviewer saw in headless Chromium on a deployment's console, fixed: a call
that paused for a question listed twice under "It had seen", a browser error on every page (no
icon: /favicon.ico answered 404), a long hash pushing the history table past its card."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from tether.console._approvals import _turn
from tether.core.messages import AssistantMessage, ToolMessage
from tether.core.types import Observation, ToolCall


def _observed(call_id: str, tool: str, source: str, *, error: bool = False) -> Observation:
    return Observation(call_id, tool, source, datetime.now(UTC), "…", is_error=error)


def test_a_call_observed_again_after_its_question_is_listed_once_as_seen() -> None:
    ask = ToolCall("c2", "h__ask_colour", "{}")
    note = ToolCall("c3", "add_note", '{"text": "red"}')
    state = SimpleNamespace(
        trajectory=[
            AssistantMessage(tool_calls=(ToolCall("c1", "read_order", '{"order_id": "742"}'),)),
            ToolMessage("c1", "order 742"),
            AssistantMessage(tool_calls=(ask,)),
            ToolMessage("c2", "colour: red"),
            AssistantMessage(tool_calls=(note,)),
        ],
        observations=[
            _observed("c1", "read_order", "local"),
            _observed("c2", "h__ask_colour", "h", error=True),  # paused: a question to a person
            _observed("c2", "h__ask_colour", "h"),  # the same call, answered and run again
        ],
    )
    turn = _turn(state, "c3")
    assert turn is not None and turn["position"] == 3
    assert [(o["tool"], o["call_id"]) for o in turn["observations_before"]] == [
        ("read_order", "c1"),
        ("h__ask_colour", "c2"),
    ]
    # What the first turn had seen: nothing, and not the later calls.
    first = _turn(state, "c1")
    assert first is not None and first["observations_before"] == []


def test_every_page_declares_an_icon_its_policy_allows(world: Any) -> None:
    pages = [("anonymous", "/login")] + [
        ("ana", path) for path in ("/approvals", f"/approvals/{world.proposal_a}", "/runs")
    ]
    for who, path in pages:
        page = world.clients[who].get(path)
        assert page.status_code == 200, path
        assert who == "anonymous" or "/login" not in str(page.url), path  # ana's page, not sign-in
        icon = re.search(r'<link rel="icon" href="([^"]+)">', page.text)
        assert icon is not None, path  # else the browser asks /favicon.ico and logs its 404
        csp = page.headers["content-security-policy"]
        img = next(d for d in csp.split(";") if d.strip().startswith("img-src")).split()[1:]
        assert icon.group(1).split(":")[0] + ":" in img, (icon.group(1), img)
