"""The penetration test's minor findings, each as an attack that fails next to the legitimate use
that still works: Host allowlist, sign-in throttling per address, bodies without a length,
the audit log's client address and CLI decisions, password changes, disabled people, long
arguments."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from console_world import PASSWORD, World, csrf_of, login
from starlette.testclient import TestClient

from tether.console._app import MAX_BODY


def _app(world: World) -> Any:
    return world.clients["ana"].app


def _attempt(client: TestClient, name: str, password: str) -> Any:
    page = client.get("/login").text
    token = page.split('name="csrf_login" value="', 1)[1].split('"', 1)[0]
    return client.post(
        "/login", data={"username": name, "password": password, "csrf_login": token, "next": "/"}
    )


def test_a_request_naming_another_host_is_refused_dns_rebinding(world: World) -> None:
    ana = world.clients["ana"]
    # A rebinding page at evil.example resolves to 127.0.0.1: its requests carry Host: evil.example
    # and a matching Origin, so the Origin check alone would let them through.
    hostile = ana.get("/api/approvals", headers={"host": "evil.example:8700"})
    assert hostile.status_code == 421
    forged = ana.post(
        f"/api/approvals/{world.proposal_a}/deny",
        json={"reason": "x"},
        headers={"host": "evil.example", "origin": "http://evil.example"},
    )
    assert forged.status_code == 421
    assert ana.get("/api/approvals").status_code == 200  # the console's own name still works


def test_sign_in_is_throttled_per_address_and_never_locks_the_person_out_elsewhere(world: World) -> None:
    app = _app(world)
    attacker = TestClient(app, base_url="http://testserver", client=("10.0.0.66", 4000))
    for _ in range(5):
        assert _attempt(attacker, "ana", "wrong password").status_code == 401
    assert _attempt(attacker, "ana", PASSWORD).status_code == 429  # locked for that address
    # Ana at her own address signs in at once.
    ana = TestClient(app, base_url="http://testserver", client=("10.0.0.5", 4000))
    assert _attempt(ana, "ana", PASSWORD).status_code == 200

    # Unknown names are throttled too: 20 failures from one address, whatever the names.
    sprayer = TestClient(app, base_url="http://testserver", client=("10.0.0.77", 4000))
    for i in range(20):
        assert _attempt(sprayer, f"nobody{i}", "guess").status_code == 401
    assert _attempt(sprayer, "bob", PASSWORD).status_code == 429
    assert (
        _attempt(
            TestClient(app, base_url="http://testserver", client=("10.0.0.6", 1)), "bob", PASSWORD
        ).status_code
        == 200
    )
    with sqlite3.connect(world.users_db) as conn:
        rows = conn.execute("SELECT client FROM audit WHERE outcome = 'refused:throttled'").fetchall()
    assert {r[0] for r in rows} == {"10.0.0.66", "10.0.0.77"}


def _chunks(size: int) -> Iterator[bytes]:
    sent = 0
    while sent < size:
        piece = min(64 * 1024, size - sent)
        sent += piece
        yield b" " * piece


def test_a_body_without_a_length_is_limited_too(world: World) -> None:
    ana = world.clients["ana"]
    big = ana.post(
        "/api/approvals/x/deny", content=_chunks(MAX_BODY + 1), headers={"content-type": "application/json"}
    )
    assert big.status_code == 413
    # A small body sent the same way (chunked, no Content-Length) is read and used as usual.
    body = json.dumps({"reason": "not wanted"}).encode()
    small = ana.post(
        f"/api/approvals/{world.proposal_a}/deny",
        content=iter([body[:5], body[5:]]),
        headers={"content-type": "application/json", "x-csrf-token": csrf_of(ana.get("/approvals").text)},
    )
    assert small.status_code == 200 and small.json()["status"] == "denied"


def test_the_audit_log_records_the_client_address_and_decisions_taken_on_the_command_line(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.cli import main

    ana = world.clients["ana"]
    csrf = csrf_of(ana.get("/approvals").text)
    assert (
        ana.post(
            f"/api/approvals/{world.proposal_a}/deny", json={"reason": "no"}, headers={"x-csrf-token": csrf}
        ).status_code
        == 200
    )
    monkeypatch.setenv("TETHER_OUT", str(world.users_db.parent))  # the console's user store is there
    assert world.users_db.name == "console.db"
    code = main(
        [
            "approvals",
            "--db",
            str(world.db),
            "invalidate",
            world.proposal_b,
            "--reviewer",
            "olga",
            "--reason",
            "stale",
        ]
    )
    assert code == 0
    with sqlite3.connect(world.users_db) as conn:
        rows = conn.execute(
            "SELECT actor, action, target, outcome, client FROM audit WHERE action IN ('deny', 'invalidate')"
        ).fetchall()
    assert ("session:ana", "deny", world.proposal_a, "denied", "testclient") in rows
    assert ("cli:olga", "invalidate", world.proposal_b, "invalidated", "cli") in rows
    root = world.clients["root"]
    audit_page = root.get("/audit").text
    assert "testclient" in audit_page and "cli:olga" in audit_page


def test_a_password_change_revokes_tokens_and_a_disabled_person_is_refused_everywhere(world: World) -> None:
    users = world.sources.users if world.sources else None
    assert users is not None
    secret, _ = users.create_token("ana", label="ci")
    app = _app(world)
    api = TestClient(app, base_url="http://testserver", headers={"authorization": f"Bearer {secret}"})
    assert api.get("/api/me").status_code == 200
    users.set_password("ana", "another good passphrase")
    assert api.get("/api/me").status_code == 401  # the old password's tokens end with it
    assert world.clients["ana"].get("/api/me").status_code == 401  # and its sessions
    fresh, _ = users.create_token("ana", label="new")
    api2 = TestClient(app, base_url="http://testserver", headers={"authorization": f"Bearer {fresh}"})
    assert api2.get("/api/me").status_code == 200  # a token made after the change works

    vic = world.clients["vic"]
    assert vic.get("/api/me").status_code == 200
    users.set_disabled("vic", True)
    assert vic.get("/api/me").status_code == 401
    assert _attempt(TestClient(app, base_url="http://testserver"), "vic", PASSWORD).status_code == 401
    users.set_disabled("vic", False)
    assert login(TestClient(app, base_url="http://testserver"), "vic").get("/api/me").status_code == 200


def test_a_huge_argument_is_shown_cut_with_its_length(world: World) -> None:
    from tether.policy._intake import Proposal
    from tether.sql._database import blocking

    assert world.sources is not None and world.sources.approvals is not None
    note = "word " * 40_000  # 200 000 characters
    stored = blocking(
        world.sources.approvals.submit,
        Proposal.of("add_note", {"order_id": "order-a1", "note": note}, "tenant-a", effect="write"),
        proposed_by="desk:ops",
    )
    page = world.clients["ana"].get(f"/approvals/{stored.id}")
    assert page.status_code == 200 and len(page.text) < 60_000
    assert "cut: showing 4000 of 200000 characters" in page.text
    assert stored.content_hash in page.text  # what is approved is still the whole stored value
    short = world.clients["ana"].get(f"/approvals/{world.proposal_a}").text
    assert "cut: showing" not in short


def test_a_made_up_token_costs_no_hash_and_a_real_one_still_works(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flood of made-up bearer tokens must not cost a password hash each (it would take the
    CPU from every other request); a real token, and a wrong secret under a real id, are still
    verified."""
    from tether.console import _users

    assert world.sources is not None
    users = world.sources.users
    secret, info = users.create_token("ana", label="ci")
    hashed: list[str] = []
    verify = _users.verify_secret

    def counting(candidate: str, stored: str) -> bool:
        hashed.append(candidate)
        return verify(candidate, stored)

    monkeypatch.setattr(_users, "verify_secret", counting)
    anon = world.clients["anonymous"]
    made_up = [f"{_users.TOKEN_PREFIX}{i:012x}_{'A' * 43}" for i in range(20)]
    for token in made_up:
        assert anon.get("/api/approvals", headers={"Authorization": f"Bearer {token}"}).status_code == 401
    assert hashed == []
    wrong = f"{_users.TOKEN_PREFIX}{info.id}_{'B' * 43}"
    assert anon.get("/api/approvals", headers={"Authorization": f"Bearer {wrong}"}).status_code == 401
    assert hashed == [wrong]
    assert anon.get("/api/approvals", headers={"Authorization": f"Bearer {secret}"}).status_code == 200


def test_an_allowed_host_given_with_its_port_is_allowed_and_a_non_host_is_refused_at_start() -> None:
    from starlette.responses import PlainTextResponse as Text

    from tether.console._app import LOOPBACK_HOSTS, Guard
    from tether.errors import ConfigError

    guard = Guard(Text("ok"), [*LOOPBACK_HOSTS, "Console.Example:443", "[::2]:8700"])
    client = TestClient(guard, base_url="http://console.example")
    assert client.get("/", headers={"host": "console.example"}).text == "ok"
    assert client.get("/", headers={"host": "console.example:8443"}).text == "ok"
    assert client.get("/", headers={"host": "[::2]"}).text == "ok"
    assert client.get("/", headers={"host": "127.0.0.1:8700"}).text == "ok"
    assert client.get("/", headers={"host": "evil.example"}).status_code == 421
    for bad in ("https://console.example/", "console.example:443@evil", ""):
        with pytest.raises(ConfigError, match="not a host name"):
            Guard(Text("ok"), [bad])
