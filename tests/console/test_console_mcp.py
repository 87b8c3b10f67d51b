"""The console's MCP pages (X2, X5): questions answered through a form built from the flat
schema (validated, nothing stored when invalid), URL-mode domains decoded, and servers reviewed
(hidden characters escaped and flagged, a diff for a changed tool) and pinned by admins only."""

from __future__ import annotations

import re
import sqlite3
from typing import Any

import pytest
from console_world import NotesServer, World, csrf_of
from starlette.testclient import TestClient

from tether.console._elicitations import domain_view, form_fields, parse_form
from tether.mcp._pauses import PauseStore, question_key
from tether.sql._database import blocking
from tether.trace._events import EventKind
from tether.trace._tracer import JsonlSink, Tracer

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "priority": {"type": "string", "enum": ["low", "high"], "description": "How urgent."},
        "minutes": {"type": "integer", "minimum": 1, "maximum": 120},
        "urgent": {"type": "boolean"},
        "contact": {"type": "string", "format": "email"},
    },
    "required": ["priority", "minutes"],
}
ARGS = {"order_id": "order-a1", "note": "call back"}
QUESTION = "Which priority should the note on order-a1 get?\u202e"


def ask(world: World) -> str:
    store = PauseStore(world.root / "state.db")
    pause = blocking(
        store.create,
        run_id=world.run_a,
        server="notes",
        tool="add_note",
        arguments=ARGS,
        message=QUESTION,
        schema=SCHEMA,
    )
    store.close()
    return pause.id


def pause_status(world: World, pause_id: str) -> tuple[str, Any]:
    store = PauseStore(world.root / "state.db")
    try:
        p = blocking(store.get, pause_id)
        return p.status, p.answer
    finally:
        store.close()


@pytest.mark.spec("X5")
def test_a_question_is_answered_through_a_form_from_its_schema_and_validated_before_it_is_stored(
    world: World,
) -> None:
    pause_id = ask(world)
    ana = world.clients["ana"]
    listing = ana.get("/elicitations").text
    assert pause_id in listing and "<code>notes</code>" in listing
    page = ana.get(f"/elicitations/{pause_id}").text
    assert "MCP server <code>notes</code> asks" in page
    assert "\u202e" not in page and "\\u202e</span>" in page  # the server's hidden character, escaped
    assert '<select id="f-1" name="f:priority" required>' in page
    assert 'type="number"' in page and 'min="1"' in page and 'max="120"' in page and 'step="1"' in page
    assert 'type="email"' in page
    csrf = csrf_of(page)

    bad = ana.post(
        f"/elicitations/{pause_id}/answer",
        data={"csrf_token": csrf, "action": "accept", "f:priority": "high", "f:minutes": "ten"},
    )
    assert bad.status_code == 400 and "is not a whole number" in bad.text
    extra = ana.post(
        f"/elicitations/{pause_id}/answer",
        data={"csrf_token": csrf, "action": "accept", "f:priority": "high", "f:minutes": "5", "f:admin": "1"},
    )
    assert extra.status_code == 400 and "fields not in the question: admin" in extra.text
    out_of_range = ana.post(
        f"/elicitations/{pause_id}/answer",
        data={"csrf_token": csrf, "action": "accept", "f:priority": "urgent!", "f:minutes": "500"},
    )
    assert out_of_range.status_code == 400
    assert pause_status(world, pause_id) == ("pending", None)

    # Another tenant's reviewer and a viewer cannot answer; the reviewer of tenant-a can.
    assert world.clients["bob"].get(f"/elicitations/{pause_id}").status_code == 404
    assert pause_id not in world.clients["bob"].get("/elicitations").text
    vic_page = world.clients["vic"].get(f"/elicitations/{pause_id}").text
    vic = world.clients["vic"].post(
        f"/elicitations/{pause_id}/answer",
        data={"csrf_token": csrf_of(vic_page), "action": "accept", "f:priority": "low", "f:minutes": "5"},
    )
    assert vic.status_code == 403 and pause_status(world, pause_id) == ("pending", None)

    ok = ana.post(
        f"/elicitations/{pause_id}/answer",
        data={
            "csrf_token": csrf,
            "action": "accept",
            "f:priority": "high",
            "f:minutes": "15",
            "f:urgent": "true",
        },
    )
    assert ok.status_code == 200 and "Answer stored" in ok.text
    assert pause_status(world, pause_id) == ("answered", {"priority": "high", "minutes": 15, "urgent": True})
    # What the gate hands the server when the paused call runs again, by the question's key.
    store = PauseStore(world.root / "state.db")
    taken = blocking(
        store.take_answer, question_key("notes", "add_note", ARGS, QUESTION, SCHEMA), world.run_a
    )
    store.close()
    assert taken is not None and taken.answer == {"priority": "high", "minutes": 15, "urgent": True}
    assert taken.answered_by == "console:ana"


def test_a_question_can_be_declined_over_the_api_with_the_same_rules(world: World) -> None:
    pause_id = ask(world)
    assert world.sources is not None
    token, _ = world.sources.users.create_token("bob")
    refused = world.clients["anonymous"].post(
        f"/api/elicitations/{pause_id}/answer",
        json={"action": "decline"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert refused.status_code == 404
    token, _ = world.sources.users.create_token("ana")
    invalid = world.clients["anonymous"].post(
        f"/api/elicitations/{pause_id}/answer",
        json={"action": "accept", "content": {"priority": "high", "minutes": "15"}},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert invalid.status_code == 400 and invalid.json()["error"] == "invalid_answer"
    done = world.clients["anonymous"].post(
        f"/api/elicitations/{pause_id}/answer",
        json={"action": "decline"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert done.status_code == 200 and done.json()["action"] == "decline"
    assert pause_status(world, pause_id) == ("answered", None)


def test_form_fields_and_parsing_never_coerce_beyond_what_the_schema_says() -> None:
    fields = {f.name: f for f in form_fields(SCHEMA)}
    assert fields["priority"].options == [("low", "low"), ("high", "high")] and fields["priority"].required
    assert fields["urgent"].input_type == "boolean" and not fields["urgent"].required
    assert parse_form(SCHEMA, {"priority": "low", "minutes": "1.0"})[1] == [
        "minutes: '1.0' is not a whole number"
    ]
    assert parse_form(SCHEMA, {"priority": "low", "minutes": "7", "urgent": "yes"})[1] == [
        "urgent: choose yes or no"
    ]
    content, problems = parse_form(SCHEMA, {"priority": "low", "minutes": "7", "contact": "ops@example.org"})
    assert problems == [] and content == {"priority": "low", "minutes": 7, "contact": "ops@example.org"}
    with pytest.raises(Exception, match="no nesting"):
        form_fields({"type": "object", "properties": {"x": {"type": "object"}}})


@pytest.mark.spec("X5")
def test_url_mode_requests_show_the_registered_domain_raw_and_decoded(world: World) -> None:
    tracer = Tracer("url-run-1", [JsonlSink(world.traces / "url-run-1.jsonl")])
    tracer.emit(EventKind.RUN_STARTED, design="agent", agent="noter", tenant="tenant-a", objective="Sign in")
    tracer.emit(
        EventKind.MCP_ELICITATION,
        server="notes",
        tool="lookup",
        outcome="declined",
        reason="url mode needs an interactive person",
        url="https://xn--pple-43d.com/login?next=1",
    )
    tracer.emit(EventKind.STOP, reason="accepted")
    tracer.close()
    page = world.clients["ana"].get("/elicitations").text
    assert "<code>xn--pple-43d.com</code>" in page and "<code>\u0430pple.com</code>" in page
    assert "internationalised name" in page
    assert "xn--pple-43d.com" not in world.clients["bob"].get("/elicitations").text
    plain = domain_view("https://Example.org:8443/x")
    assert (plain["ascii"], plain["unicode"], plain["internationalised"]) == (
        "example.org",
        "example.org",
        False,
    )
    typed = domain_view("https://\u0430pple.com/")
    assert typed["ascii"] == "xn--pple-43d.com" and typed["registered_ascii"] == "xn--pple-43d.com"


def _pin_rows(world: World) -> dict[str, str]:
    with sqlite3.connect(world.root / "pins.db") as conn:
        return dict(conn.execute("SELECT tool, approved_by FROM pins WHERE server = 'notes'"))


@pytest.mark.spec("X2")
def test_admins_review_servers_with_hidden_characters_escaped_and_pin_exactly_what_they_reviewed(
    world: World, notes_server: NotesServer
) -> None:
    ana, bob, root = world.clients["ana"], world.clients["bob"], world.clients["root"]
    listing = ana.get("/servers").text
    assert (
        "<code>notes</code>" in listing
        and "NOTES_TOKEN" in listing
        and "Review the current tools" not in listing
    )
    assert "s3cr3t-notes-token-value" not in listing and "CONSOLE_TEST_NOTES_TOKEN" not in listing
    token = csrf_of(listing)
    assert ana.post("/servers/notes/review", data={"csrf_token": token}).status_code == 403
    bob_csrf = csrf_of(bob.get("/servers").text)
    assert bob.post("/servers/notes/review", data={"csrf_token": bob_csrf}).status_code == 404
    assert "notes" not in bob.get("/api/servers").text

    root_csrf = csrf_of(root.get("/servers").text)
    page = root.post("/servers/notes/review", data={"csrf_token": root_csrf}).text
    assert "s3cr3t-notes-token-value" not in page and "Bearer" not in page
    for hidden in ("\u200b", "\u202e", "\U000e0049"):
        assert hidden not in page
    assert "\\u200b</span>" in page and "\\u202e</span>" in page and "\\U000e0049</span>" in page
    assert "Hidden characters in this definition: U+200B, U+202E, U+202C, U+E0049" in page
    assert "hidden_unicode" in page and 'class="flag">flagged' in page
    digest = re.search(r'name="digest" value="([0-9a-f]{64})"', page)
    assert digest is not None

    assert ana.post("/servers/notes/pin", data={"csrf_token": csrf_of(listing), "digest": digest.group(1),
                                                 "tool": ["lookup"]}).status_code == 403  # fmt: skip
    assert _pin_rows(world) == {}
    csrf = csrf_of(page)
    stale = root.post("/servers/notes/pin", data={"csrf_token": csrf, "digest": "0" * 64, "tool": ["lookup"]})
    assert stale.status_code == 409 and "listing_changed" in stale.text and _pin_rows(world) == {}
    first = root.post(
        "/servers/notes/pin",
        data={"csrf_token": csrf, "digest": digest.group(1), "tool": ["lookup", "add_note"]},
    )
    assert first.status_code == 200 and "flagged" in first.text
    assert _pin_rows(world) == {"lookup": "console:root"}  # the flagged tool needs an explicit accept
    second = root.post(
        "/servers/notes/pin",
        data={
            "csrf_token": csrf,
            "digest": digest.group(1),
            "tool": ["add_note"],
            "accept_flagged": ["add_note"],
        },
    )
    assert second.status_code == 200 and _pin_rows(world) == {
        "lookup": "console:root",
        "add_note": "console:root",
    }
    users = sqlite3.connect(world.users_db)
    pins = users.execute("SELECT actor, outcome, content_hash FROM audit WHERE action = 'pin'").fetchall()
    users.close()
    assert [p[1] for p in pins] == ["refused:listing_changed", "ok", "ok"] and pins[1][2] == digest.group(1)

    # The server changes a pinned tool: the review shows it changed, with a diff to re-approve.
    notes_server.change_lookup(True)
    try:
        changed_review(root)
    finally:
        notes_server.change_lookup(False)


def changed_review(admin: TestClient) -> None:
    csrf = csrf_of(admin.get("/servers").text)
    review = admin.post("/api/servers/notes/review", headers={"X-CSRF-Token": csrf}).json()
    lookup = next(t for t in review["tools"] if t["tool"] == "lookup")
    assert lookup["status"] == "changed" and lookup["why"] == "changed: description"
    assert '-  "description": "Looks up an order.",' in lookup["diff"]
    assert '+  "description": "Looks up an order and every note on it.",' in lookup["diff"]
    html = admin.post("/servers/notes/review", data={"csrf_token": csrf}).text
    assert '<span class="ddel">-  &#34;description&#34;: &#34;Looks up an order.&#34;,</span>' in html
    assert "re-approve" in html
    again = admin.post(
        "/api/servers/notes/pin",
        json={"digest": review["digest"], "tools": ["lookup"]},
        headers={"X-CSRF-Token": csrf_of(html)},
    )
    assert again.status_code == 200 and again.json()["pinned"] == ["lookup"]
    again_review = admin.post("/api/servers/notes/review", headers={"X-CSRF-Token": csrf}).json()
    assert again_review["tools"][1]["status"] == "pinned"


@pytest.mark.spec("X5")
def test_look_alike_names_in_a_question_are_flagged_and_the_stored_answer_is_shown(world: World) -> None:
    store = PauseStore(world.root / "state.db")
    pause = blocking(store.create,
        run_id=world.run_a, server="notes", tool="add_note", arguments={"cc": "ops@example.org"},
        message="Send the invoice to billing@p\u0430ypal.com?", schema=SCHEMA,
    )  # fmt: skip
    store.close()
    ana = world.clients["ana"]
    assert "look-alike" in ana.get("/elicitations").text
    page = ana.get(f"/elicitations/{pause.id}").text
    assert "<code>xn--pypal-4ve.com</code>" in page and "p\u0430ypal.com" in page and "mixes scripts" in page
    # The legitimate address in the arguments is shown, checked, and not flagged.
    assert "<code>example.org</code>" in page and page.count("Look-alike") == 1
    done = ana.post(
        f"/elicitations/{pause.id}/answer",
        data={"csrf_token": csrf_of(page), "action": "accept", "f:priority": "low", "f:minutes": "7"},
    )
    assert done.status_code == 200
    answered = ana.get(f"/elicitations/{pause.id}").text
    assert 'id="stored-answer"' in answered and "&#34;low&#34;" in answered and "<code>7</code>" in answered


@pytest.mark.spec("X2")
def test_a_review_is_never_started_by_a_get_and_every_review_is_audited(world: World) -> None:
    root = world.clients["root"]
    # What an <img src=".../servers/notes/review"> on another local page would send: no launch.
    for path in ("/servers/notes/review", "/api/servers/notes/review"):
        assert root.get(path).status_code == 405
    # A POST without the CSRF token (a cross-site form) is refused and audited as such.
    assert root.post("/servers/notes/review", data={}).status_code == 403

    def reviews() -> list[tuple[str, str]]:
        with sqlite3.connect(world.users_db) as conn:
            return list(conn.execute("SELECT actor, outcome FROM audit WHERE action = 'review'"))

    assert reviews() == []
    csrf = csrf_of(root.get("/servers").text)
    ok = root.post("/servers/notes/review", data={"csrf_token": csrf})
    assert ok.status_code == 200 and "lookup" in ok.text
    unknown = root.post("/servers/nope/review", data={"csrf_token": csrf})
    assert unknown.status_code == 400
    assert reviews() == [("session:root", "ok"), ("session:root", "refused:ConfigError")]
