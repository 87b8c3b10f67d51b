"""The console over real stores (T4-T6, X3-X5 roles, P3): who sees and decides what, CSRF, the
content hash, resuming, audit, and nothing secret on any page. Each attack is tried and fails,
and the legitimate action is shown to work in the same test."""

from __future__ import annotations

import re
import sqlite3

import pytest
from console_world import PASSWORD, World, csrf_of, login

from tether.console._users import UserStore
from tether.sql._database import blocking


def status_of(world: World, proposal_id: str) -> str:
    assert world.sources is not None and world.sources.approvals is not None
    return str(blocking(world.sources.approvals.get, proposal_id).status)


def audit_rows(world: World) -> list[tuple[str, str, str, str, str]]:
    with sqlite3.connect(world.users_db) as conn:
        return list(
            conn.execute("SELECT actor, action, target, content_hash, outcome FROM audit ORDER BY seq")
        )


@pytest.mark.spec("T4", "T5")
def test_a_reviewer_sees_only_their_tenants_queue_and_another_tenants_proposal_is_not_found(
    world: World,
) -> None:
    ana, bob = world.clients["ana"], world.clients["bob"]
    queue = ana.get("/approvals").text
    assert world.proposal_a in queue and world.proposal_b not in queue and "tenant-b" not in queue
    assert (
        world.proposal_b in bob.get("/approvals").text and world.proposal_a not in bob.get("/approvals").text
    )

    # By URL: the same answer as an id that does not exist (existence is not confirmed).
    foreign = ana.get(f"/approvals/{world.proposal_b}")
    unknown = ana.get("/approvals/prop_00000000000000000000000000000000")
    assert foreign.status_code == unknown.status_code == 404
    assert "beta customer note" not in foreign.text and "order-b1" not in foreign.text
    # By API, reading and deciding.
    assert ana.get(f"/api/approvals/{world.proposal_b}").json()["error"] == "not_found"
    csrf = ana.get("/api/me").json()["csrf_token"]
    refused = ana.post(
        f"/api/approvals/{world.proposal_b}/approve",
        json={"content_hash": "sha256:" + "0" * 64},
        headers={"X-CSRF-Token": csrf},
    )
    assert refused.status_code == 404 and status_of(world, world.proposal_b) == "pending"
    assert all(r["tenant"] == "tenant-a" for r in ana.get("/api/approvals?status=all").json()["proposals"])
    # The legitimate reviewer of tenant-b can.
    page = bob.get(f"/approvals/{world.proposal_b}").text
    h = re.search(r'id="content-hash">([^<]+)<', page)
    assert h is not None
    done = bob.post(
        f"/approvals/{world.proposal_b}/approve",
        data={"csrf_token": csrf_of(page), "content_hash": h.group(1)},
    )
    assert done.status_code == 200 and status_of(world, world.proposal_b) == "approved"


@pytest.mark.spec("T5")
def test_approving_in_the_console_lets_the_paused_run_resume_to_accepted_once(world: World) -> None:
    ana = world.clients["ana"]
    page = ana.get(f"/approvals/{world.proposal_a}").text
    # What the reviewer sees: exactly what will run, where each argument came from, the rule,
    # the objective and the turn, and the content hash.
    assert "order-a1" in page and "call back tomorrow" in page
    assert "the user&#39;s request" in page  # provenance of the arguments
    assert 'href="/rules#rule-effect"' in page
    assert "Note on order-a1" in page and "this proposal" in page
    h = re.search(r'id="content-hash">([^<]+)<', page)
    assert h is not None and h.group(1).startswith("sha256:")
    assert world.outbox() == []
    done = ana.post(
        f"/approvals/{world.proposal_a}/approve",
        data={"csrf_token": csrf_of(page), "content_hash": h.group(1), "reason": "customer asked"},
    )
    assert done.status_code == 200 and "Approved" in done.text
    result = world.resume(world.run_a)
    assert str(result.stop_reason) == "accepted"
    assert [row[1:] for row in world.outbox()] == [("order-a1", "call back tomorrow\u200b please")]
    assert ("session:ana", "approve", world.proposal_a, h.group(1), "approved") in audit_rows(world)
    granted = [e for e in result.events if str(e.kind) == "approval_granted"]
    assert granted and granted[0].data["reviewer"] == "reviewer:ana"


@pytest.mark.spec("T5")
def test_a_denial_needs_a_reason_and_ends_the_run_approval_denied(world: World) -> None:
    ana = world.clients["ana"]
    page = ana.get(f"/approvals/{world.proposal_a}").text
    blank = ana.post(
        f"/approvals/{world.proposal_a}/deny", data={"csrf_token": csrf_of(page), "reason": "  "}
    )
    assert blank.status_code == 409 and status_of(world, world.proposal_a) == "pending"
    denied = ana.post(
        f"/approvals/{world.proposal_a}/deny", data={"csrf_token": csrf_of(page), "reason": "wrong customer"}
    )
    assert denied.status_code == 200 and status_of(world, world.proposal_a) == "denied"
    result = world.resume(world.run_a)
    assert str(result.stop_reason) == "approval_denied" and world.outbox() == []
    again = ana.post(f"/approvals/{world.proposal_a}/invalidate", data={"csrf_token": csrf_of(page)})
    assert again.status_code == 409  # a denied proposal stays denied


def test_a_post_without_the_csrf_token_or_from_another_origin_changes_nothing(world: World) -> None:
    ana = world.clients["ana"]
    page = ana.get(f"/approvals/{world.proposal_a}").text
    h = re.search(r'id="content-hash">([^<]+)<', page)
    assert h is not None
    missing = ana.post(f"/approvals/{world.proposal_a}/approve", data={"content_hash": h.group(1)})
    wrong = ana.post(
        f"/approvals/{world.proposal_a}/approve", data={"content_hash": h.group(1), "csrf_token": "x" * 43}
    )
    cross = ana.post(
        f"/approvals/{world.proposal_a}/approve",
        data={"content_hash": h.group(1), "csrf_token": csrf_of(page)},
        headers={"Origin": "http://evil.example"},
    )
    api = ana.post(f"/api/approvals/{world.proposal_a}/approve", json={"content_hash": h.group(1)})
    assert [r.status_code for r in (missing, wrong, cross, api)] == [403, 403, 403, 403]
    assert status_of(world, world.proposal_a) == "pending"
    assert sum(1 for row in audit_rows(world) if row[4] == "refused:csrf") == 4
    ok = ana.post(
        f"/approvals/{world.proposal_a}/approve",
        data={"content_hash": h.group(1), "csrf_token": csrf_of(page)},
    )
    assert ok.status_code == 200 and status_of(world, world.proposal_a) == "approved"


@pytest.mark.spec("T5")
def test_approval_names_the_reviewed_content_hash_and_a_different_one_is_refused(world: World) -> None:
    ana = world.clients["ana"]
    csrf = csrf_of(ana.get(f"/approvals/{world.proposal_a}").text)
    for bad in ("", "sha256:" + "f" * 64):
        r = ana.post(f"/approvals/{world.proposal_a}/approve", data={"csrf_token": csrf, "content_hash": bad})
        assert r.status_code == 409
    assert status_of(world, world.proposal_a) == "pending"
    assert {row[4] for row in audit_rows(world) if row[1] == "approve"} == {
        "refused:content_hash_required", "refused:content_changed",
    }  # fmt: skip


def test_a_viewer_reads_but_cannot_decide_and_an_admin_of_every_tenant_can(world: World) -> None:
    vic, root = world.clients["vic"], world.clients["root"]
    page = vic.get(f"/approvals/{world.proposal_a}").text
    assert "order-a1" in page and 'id="approve"' not in page
    r = vic.post(f"/approvals/{world.proposal_a}/deny", data={"csrf_token": csrf_of(page), "reason": "no"})
    assert r.status_code == 403 and status_of(world, world.proposal_a) == "pending"
    assert vic.get(f"/approvals/{world.proposal_b}").status_code == 404
    both = root.get("/api/approvals").json()["proposals"]
    assert {p["id"] for p in both} == {world.proposal_a, world.proposal_b}


def test_api_tokens_are_hashed_at_rest_and_a_bad_token_is_refused_even_with_a_session(world: World) -> None:
    assert world.sources is not None
    secret, info = world.sources.users.create_token("ana", label="ci")
    raw = world.users_db.read_bytes() + world.users_db.with_name("console.db-wal").read_bytes()
    assert secret.encode() not in raw and PASSWORD.encode() not in raw
    from tether.console._users import TOKEN_PREFIX

    random_part = secret.removeprefix(f"{TOKEN_PREFIX}{info.id}_")  # may itself contain "_"
    assert len(random_part) == 43 and random_part.encode() not in raw
    anon = world.clients["anonymous"]
    assert anon.get("/api/approvals").status_code == 401
    good = anon.get("/api/approvals", headers={"Authorization": f"Bearer {secret}"})
    assert good.status_code == 200 and [p["id"] for p in good.json()["proposals"]] == [world.proposal_a]
    # A bearer token needs no CSRF token (a browser never adds that header by itself).
    h = good.json()["proposals"][0]["content_hash"]
    decided = anon.post(
        f"/api/approvals/{world.proposal_a}/approve",
        json={"content_hash": h},
        headers={"Authorization": f"Bearer {secret}"},
    )
    assert decided.status_code == 200 and decided.json()["status"] == "approved"
    forged = secret[:-4] + "AAAA"
    ana = world.clients["ana"]
    assert ana.get("/api/approvals", headers={"Authorization": f"Bearer {forged}"}).status_code == 401
    assert world.sources.users.revoke_token(info.id)
    assert anon.get("/api/approvals", headers={"Authorization": f"Bearer {secret}"}).status_code == 401


def test_sign_in_needs_its_form_token_and_the_right_password_and_sets_a_strict_cookie(world: World) -> None:
    from starlette.testclient import TestClient

    anon = world.clients["anonymous"]
    assert anon.get("/approvals").url.path == "/login"
    forged = anon.post("/login", data={"username": "ana", "password": PASSWORD})
    assert forged.status_code == 403 and not any(name.startswith("tether_session") for name in anon.cookies)
    client = TestClient(anon.app, base_url="http://testserver", follow_redirects=False)
    token = re.search(r'name="csrf_login" value="([^"]+)"', client.get("/login").text)
    assert token is not None
    wrong = client.post("/login", data={"username": "ana", "password": "nope", "csrf_login": token.group(1)})
    assert wrong.status_code == 401
    token = re.search(r'name="csrf_login" value="([^"]+)"', wrong.text)  # a new form, a new token
    assert token is not None
    right = client.post(
        "/login", data={"username": "ana", "password": PASSWORD, "csrf_login": token.group(1)}
    )
    cookie = right.headers["set-cookie"]
    assert right.status_code == 303 and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert (
        right.headers["x-frame-options"] == "DENY"
        and "frame-ancestors 'none'" in right.headers["content-security-policy"]
    )
    # Signing out ends the session on the server, not only in the browser.
    page = client.get("/approvals").text
    client.post("/logout", data={"csrf_token": csrf_of(page)})
    stolen = TestClient(anon.app, base_url="http://testserver", follow_redirects=False)
    stolen.cookies.set(*cookie.split(";")[0].split("=", 1))
    assert stolen.get("/approvals").status_code == 303


@pytest.mark.spec("T6", "P3")
def test_hidden_characters_in_arguments_are_shown_escaped_and_kept_verbatim(world: World) -> None:
    page = world.clients["ana"].get(f"/approvals/{world.proposal_a}").text
    assert "\u200b" not in page
    assert '<span class="hidden-char" title="hidden character U+200B ZERO WIDTH SPACE">\\u200b</span>' in page
    assert "hidden characters: U+200B" in page
    assert world.sources is not None and world.sources.approvals is not None
    stored = blocking(world.sources.approvals.get, world.proposal_a).arguments
    assert "call back tomorrow\u200b please" in stored  # preserved as data, not "cleaned"


def test_run_pages_are_scoped_by_tenant_and_show_the_timeline_with_rule_and_proposal_links(
    world: World,
) -> None:
    ana = world.clients["ana"]
    listing = ana.get("/runs").text
    assert world.run_a in listing and world.run_b not in listing
    assert ana.get(f"/runs/{world.run_b}").status_code == 404
    assert ana.get(f"/api/runs/{world.run_b}").status_code == 404
    assert ana.get("/runs/..%2Fconsole").status_code == 404
    page = ana.get(f"/runs/{world.run_a}").text
    assert f'href="/approvals/{world.proposal_a}"' in page and "Resume this run" in page
    data = ana.get(f"/api/runs/{world.run_a}").json()
    kinds = [i["kind"] for i in data["timeline"]]
    assert kinds[0] == "run_started" and "approval_requested" in kinds and kinds[-1] == "stop"
    assert data["totals"]["model_calls"] == 1 and data["totals"]["prompt_tokens"] > 0
    filtered = ana.get("/api/runs?stop_reason=accepted").json()
    assert filtered["count"] == 0
    assert world.clients["root"].get("/api/runs?tenant=tenant-b").json()["runs"][0]["run_id"] == world.run_b


@pytest.mark.spec("T4")
def test_a_denied_decision_on_the_run_page_links_to_its_rule(world: World) -> None:
    import anyio
    from _notes_app import TENANT_A, build

    async def go() -> str:
        host, agent = build(world.db)
        run = await host.run(agent, "Note on order-b1: from the wrong tenant", context=TENANT_A)
        await host.aclose()
        assert str(run.stop_reason) == "policy_denied"
        return run.run_id

    run_id = anyio.run(go)
    page = world.clients["ana"].get(f"/runs/{run_id}").text
    assert 'href="/rules#rule-tenant_scope">rule tenant_scope</a>' in page
    assert "denied add_note: cross_tenant (rule tenant_scope)" in page
    assert 'id="rule-tenant_scope"' in world.clients["ana"].get("/rules").text
    assert world.clients["bob"].get(f"/runs/{run_id}").status_code == 404


def test_the_console_resume_action_continues_a_decided_run_for_its_tenants_reviewer_only(
    world: World,
) -> None:
    ana, vic = world.clients["ana"], world.clients["vic"]
    page = ana.get(f"/approvals/{world.proposal_a}").text
    h = re.search(r'id="content-hash">([^<]+)<', page)
    assert h is not None
    ana.post(
        f"/approvals/{world.proposal_a}/approve",
        data={"csrf_token": csrf_of(page), "content_hash": h.group(1)},
    )
    run_page = vic.get(f"/runs/{world.run_a}").text
    assert "Resume this run" not in run_page
    assert vic.post(f"/runs/{world.run_a}/resume", data={"csrf_token": csrf_of(run_page)}).status_code == 403
    assert ana.post(f"/runs/{world.run_b}/resume", data={"csrf_token": csrf_of(page)}).status_code == 404
    assert world.outbox() == []
    done = ana.post(f"/runs/{world.run_a}/resume", data={"csrf_token": csrf_of(page)})
    assert done.status_code == 200 and "accepted" in done.text
    assert len(world.outbox()) == 1
    assert ("session:ana", "resume", world.run_a, "", "accepted") in audit_rows(world)


def test_a_new_password_ends_sessions_and_a_user_store_never_keeps_it_in_plaintext(tmp_path: object) -> None:
    from pathlib import Path

    store = UserStore(Path(str(tmp_path)) / "u.db")
    store.add_user("kim", "first password 1")
    raw = store.create_session("kim")
    assert store.principal_for_session(raw) is not None
    store.set_password("kim", "second password 2")
    assert store.principal_for_session(raw) is None
    assert store.authenticate("kim", "second password 2") == "kim"
    with pytest.raises(Exception, match="wrong user name or password"):
        store.authenticate("kim", "first password 1")
    with pytest.raises(Exception, match="at least"):
        store.add_user("lee", "short")
    store.audit("x", "y")
    raw = sqlite3.connect(store.path)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        raw.execute("DELETE FROM audit")
    raw.close()
    store.close()


def test_login_page_and_fresh_sign_in_work_for_a_new_user(world: World) -> None:
    from starlette.testclient import TestClient

    assert world.sources is not None
    world.sources.users.add_user("newbie", "a fine password")
    world.sources.users.grant("newbie", "tenant-b", "viewer")
    client = login(
        TestClient(world.clients["anonymous"].app, base_url="http://testserver"), "newbie", "a fine password"
    )
    assert world.proposal_b in client.get("/approvals").text


def test_sign_in_never_redirects_off_site_and_repeated_failures_are_throttled(world: World) -> None:
    from starlette.testclient import TestClient

    client = TestClient(world.clients["anonymous"].app, base_url="http://testserver", follow_redirects=False)

    def attempt(password: str, target: str = "/runs") -> object:
        token = re.search(r'name="csrf_login" value="([^"]+)"', client.get("/login").text)
        assert token is not None
        data = {"username": "bob", "password": password, "csrf_login": token.group(1), "next": target}
        return client.post("/login", data=data)

    for target in (
        "//evil.example/x",
        "/\\evil.example",
        "https://evil.example/",
        "/runs\r\nSet-Cookie: x=1",
    ):
        r = attempt(PASSWORD, target)
        assert r.status_code == 303 and r.headers["location"] == "/"  # type: ignore[attr-defined]
    assert attempt(PASSWORD).headers["location"] == "/runs"  # type: ignore[attr-defined]
    for _ in range(5):
        assert attempt("wrong password").status_code == 401  # type: ignore[attr-defined]
    locked = attempt(PASSWORD)
    assert locked.status_code == 429 and "tether_session" not in locked.headers.get("set-cookie", "")  # type: ignore[attr-defined]
    assert ("session:bob", "login", "", "", "refused:throttled") in audit_rows(world)


@pytest.mark.spec("T5")
def test_a_proposal_edited_behind_the_stores_back_is_flagged_never_approvable_and_can_be_denied(
    world: World,
) -> None:
    ana = world.clients["ana"]
    csrf = csrf_of(ana.get(f"/approvals/{world.proposal_a}").text)
    with sqlite3.connect(world.db) as conn:
        conn.execute("DROP TRIGGER proposals_immutable")
        conn.execute(
            "UPDATE proposals SET arguments = ? WHERE id = ?",
            ('{"note":"wire the money","order_id":"order-a1"}', world.proposal_a),
        )
        stored_hash = conn.execute(
            "SELECT content_hash FROM proposals WHERE id = ?", (world.proposal_a,)
        ).fetchone()[0]
    page = ana.get(f"/approvals/{world.proposal_a}")
    # Shown as what it is: changed after it was proposed, with no Approve button.
    assert page.status_code == 200 and "changed after it was proposed" in page.text
    assert 'id="approve"' not in page.text and 'id="deny"' in page.text and 'id="invalidate"' in page.text
    queue = ana.get("/api/approvals").json()["proposals"]
    assert any(f["kind"] == "tampered" for r in queue if r["id"] == world.proposal_a for f in r["flags"])
    r = ana.post(
        f"/approvals/{world.proposal_a}/approve", data={"csrf_token": csrf, "content_hash": stored_hash}
    )
    assert r.status_code == 409 and "tampered" in r.text

    def status() -> str:
        with sqlite3.connect(world.db) as conn:
            row = conn.execute("SELECT status FROM proposals WHERE id = ?", (world.proposal_a,)).fetchone()
        return str(row[0])

    assert status() == "pending"
    denied = ana.post(
        f"/approvals/{world.proposal_a}/deny", data={"csrf_token": csrf, "reason": "edited behind our back"}
    )
    assert denied.status_code == 200 and status() == "denied"
    assert any(
        r[:3] == ("session:ana", "deny", world.proposal_a) and r[4] == "denied" for r in audit_rows(world)
    )
    # An intact proposal is still approved as before.
    bob = world.clients["bob"]
    page_b = bob.get(f"/approvals/{world.proposal_b}").text
    ok = bob.post(
        f"/approvals/{world.proposal_b}/approve",
        data={
            "csrf_token": csrf_of(page_b),
            "content_hash": re.search(r'id="content-hash">([^<]+)<', page_b).group(1),
        },  # type: ignore[union-attr]
    )
    assert ok.status_code == 200 and "Approved" in ok.text


@pytest.mark.spec("T5")
def test_the_queue_row_shows_targets_and_risk_flags_and_the_page_both_forms_of_a_look_alike(
    world: World,
) -> None:
    import anyio
    from _notes_app import TENANT_A, build

    async def go() -> str:
        host, agent = build(world.db)
        run = await host.run(
            agent, "Note on order-a1: refund to billing@p\u0430ypal.com today", context=TENANT_A
        )
        assert host.approvals is not None
        [p] = await host.approvals.store.list_proposals(run_id=run.run_id)
        await host.aclose()
        return p.id

    pid = anyio.run(go)
    ana = world.clients["ana"]
    rows = {r["id"]: r for r in ana.get("/api/approvals").json()["proposals"]}
    kinds = {f["kind"] for f in rows[pid]["flags"]}
    assert "lookalike" in kinds and {"name": "order_id", "value": "order-a1"} in rows[pid]["targets"]
    assert "hidden" in {f["kind"] for f in rows[world.proposal_a]["flags"]}  # the \u200b in its note
    assert "lookalike" not in {f["kind"] for f in rows[world.proposal_a]["flags"]}
    assert rows[pid]["turn_number"] == 1
    queue = ana.get("/approvals").text
    assert "look-alike name" in queue and "turn 1" in queue
    page = ana.get(f"/approvals/{pid}").text
    assert "<code>xn--pypal-4ve.com</code>" in page and "p\u0430ypal.com" in page and "mixes scripts" in page
    assert "turn 1, call" in page and "(turn 1)" in page
    assert (
        "needs a person&#39;s approval before it runs" in page
        and "Rule effect: approval_required" not in page
    )
    assert 'id="invalidate-help"' in page


def test_turns_are_numbered_the_same_in_the_queue_the_proposal_and_the_timeline(world: World) -> None:
    ana = world.clients["ana"]
    row = next(r for r in ana.get("/api/approvals").json()["proposals"] if r["id"] == world.proposal_a)
    view = ana.get(f"/api/approvals/{world.proposal_a}").json()
    run = ana.get(f"/api/runs/{world.run_a}").json()
    asked = next(i for i in run["timeline"] if i["kind"] == "approval_requested")
    assert row["turn_number"] == view["turn_number"] == view["turn"]["position"] == asked["turn"] == 1
    assert run["timeline"][0]["turn"] == 0  # the run's start comes before any model turn
    assert "turn 1" in ana.get(f"/runs/{world.run_a}").text
