"""The console in a real browser: headless Chromium (Debian's, launched by path, no browser
download) driven by Playwright against ``tether serve`` on 127.0.0.1.

A reviewer signs in, sees only their tenant's queue, approves one proposal (its run resumes to
``accepted``) and denies another (``approval_denied``); cross-tenant attempts by URL and API and
a cross-site form post without the CSRF token are refused; an MCP tool description with hidden
characters is shown escaped. Screenshots of every page go to ``tether-output/console-screens``
(or ``$TETHER_SCREENS``).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
from _notes_app import TENANT_A, build
from console_world import PASSWORD, NotesServer, World, paused_runs, write_mcp_config

from tether.console._users import UserStore
from tether.mcp._pauses import PauseStore
from tether.sql._database import blocking

pytestmark = pytest.mark.slow


def _off_loop(fn: Any, /, *args: Any, **kw: Any) -> Any:
    """``blocking`` on a thread of its own: Playwright's sync API keeps an event loop running on
    the test's thread."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(blocking, fn, *args, **kw).result()


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    pytest.skip("chromium is not installed (apt-get install -y chromium)", allow_module_level=True)
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright (the Python package) is not installed"
)

ROOT = Path(__file__).resolve().parents[2]
SCREENS = Path(os.environ.get("TETHER_SCREENS") or ROOT / "tether-output" / "console-screens")
HERE = Path(__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli(*args: str, stdin: str = "", env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, notes_server: NotesServer
) -> Iterator[tuple[World, str]]:
    """Two tenants' paused runs, users made with ``tether users``, and ``tether serve`` running:
    one for this module (each test decides proposals of its own, and reads nothing the other
    leaves in a way that changes what it checks)."""
    tmp_path = tmp_path_factory.mktemp("served")
    world = World(
        root=tmp_path,
        db=tmp_path / "approvals.db",
        users_db=tmp_path / "console.db",
        traces=tmp_path / "traces",
        config=write_mcp_config(tmp_path, notes_server.url),
    )
    paused_runs(world)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(HERE), os.environ.get("PYTHONPATH", "")]),
        "CONSOLE_TEST_NOTES_TOKEN": "s3cr3t-notes-token-value",
        "TETHER_OUT": str(tmp_path),
    }
    made = cli("users", "add", "ana", "--tenant", "tenant-a", "--role", "reviewer", "--password-stdin",
               stdin=PASSWORD + "\n", env=env)  # fmt: skip
    assert made.returncode == 0, made.stderr
    users = UserStore(world.users_db)
    for name, tenant, role in (("bob", "tenant-b", "reviewer"), ("root", "*", "admin")):
        users.add_user(name, PASSWORD)
        users.grant(name, tenant, role)
    users.close()
    port = free_port()
    log = tmp_path / "serve.log"  # a file, not a pipe nobody reads: never blocks the server
    out = log.open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "tether.cli", "serve", "--port", str(port), "--db", str(world.db),
         "--users", str(world.users_db), "--traces", str(world.traces), "--config", str(world.config)],
        env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:  # readiness: the port accepts connections
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                pytest.fail(f"tether serve did not start: {log.read_text()}")
            time.sleep(0.1)
    try:
        yield world, base
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        out.close()


@pytest.fixture
def evil_site() -> Iterator[tuple[str, dict[str, str]]]:
    """Another origin on 127.0.0.1 whose page posts a form to the console (no CSRF token)."""
    page: dict[str, str] = {"html": ""}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = page["html"].encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/", page
    finally:
        httpd.shutdown()
        httpd.server_close()


def resume(world: World, run_id: str) -> str:
    """``host.resume`` in the test process, on a thread of its own (Playwright's sync API owns
    this thread's event loop)."""

    async def go() -> str:
        host, agent = build(world.db)
        try:
            return str((await host.resume(agent, run_id)).stop_reason)
        finally:
            await host.aclose()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(anyio.run, go).result(timeout=120)


def second_run(world: World) -> tuple[str, str]:
    async def go() -> tuple[str, str]:
        host, agent = build(world.db)
        run = await host.run(agent, "Note on order-a1: offer a discount", context=TENANT_A)
        assert host.approvals is not None
        [p] = await host.approvals.store.list_proposals(run_id=run.run_id)
        await host.aclose()
        return run.run_id, p.id

    return anyio.run(go)


def status(world: World, proposal_id: str) -> str:
    from tether.policy._sqlite_store import SqliteApprovalStore

    store = SqliteApprovalStore(world.db)
    try:
        found = _off_loop(store.get_proposal, proposal_id)
        assert found is not None
        return str(found.status)
    finally:
        store.close()


def sign_in(page: Any, base: str, name: str) -> None:
    page.goto(f"{base}/approvals")
    page.fill("input[name=username]", name)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    try:
        page.wait_for_url(f"{base}/approvals", timeout=15000)
    except Exception:
        SCREENS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENS / "debug-login.png"))
        print(page.url, page.content()[:3000])
        raise


@pytest.mark.spec("T4", "T5", "X2")
def test_a_reviewer_decides_in_the_browser_and_the_runs_resume_and_every_attack_is_refused(
    served: tuple[World, str], evil_site: tuple[str, dict[str, str]]
) -> None:
    world, base = served
    run_deny, proposal_deny = second_run(world)
    SCREENS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        context = browser.new_context(viewport={"width": 1200, "height": 900})
        page = context.new_page()

        page.goto(f"{base}/approvals")  # not signed in: the sign-in page
        page.screenshot(path=str(SCREENS / "00-sign-in.png"), full_page=True)
        sign_in(page, base, "ana")
        queue = page.inner_text("#queue")
        assert world.proposal_a[:17] in queue and proposal_deny[:17] in queue
        assert world.proposal_b[:17] not in queue and "tenant-b" not in queue
        page.screenshot(path=str(SCREENS / "01-queue.png"), full_page=True)

        # The approval page: what will run, where it came from, the hash; approve it.
        page.goto(f"{base}/approvals/{world.proposal_a}")
        assert page.inner_text("#content-hash").startswith("sha256:")
        assert page.inner_text("#arguments .hidden-char") == "\\u200b"  # shown, escaped, flagged
        assert "the user's request" in page.inner_text("#arguments")
        page.screenshot(path=str(SCREENS / "02-approval.png"), full_page=True)
        page.fill("form[action$='/approve'] input[name=reason]", "customer asked for it")
        page.click("#approve")
        page.wait_for_selector(".notice")
        assert "Approved" in page.inner_text(".notice")
        assert status(world, world.proposal_a) == "approved"
        assert resume(world, world.run_a) == "accepted"

        # Cross-site form post (another origin, no CSRF token): refused, nothing decided.
        evil_url, evil = evil_site
        evil["html"] = (
            f'<form id="f" method="post" action="{base}/approvals/{proposal_deny}/approve">'
            '<input name="content_hash" value="x"></form>'
            '<script>document.getElementById("f").submit()</script>'
        )
        attack = context.new_page()
        attack.goto(evil_url)
        attack.wait_for_url(f"{base}/**")
        assert "Refused" in attack.content() or "Sign in" in attack.content()
        attack.close()
        # Same origin but without the token: refused too.
        forged = page.request.post(f"{base}/approvals/{proposal_deny}/approve", form={"content_hash": "x"})
        assert forged.status == 403 and status(world, proposal_deny) == "pending"

        # Deny the other one, with a reason; its run ends approval_denied.
        page.goto(f"{base}/approvals/{proposal_deny}")
        page.fill("#deny-reason", "no discounts this month")
        page.click("#deny")
        page.wait_for_selector(".notice")
        assert status(world, proposal_deny) == "denied"
        assert resume(world, run_deny) == "approval_denied"

        # Another tenant's proposal: by URL, and by API (reading and deciding).
        seen = page.goto(f"{base}/approvals/{world.proposal_b}")
        assert seen is not None and seen.status == 404 and "beta customer note" not in page.content()
        page.screenshot(path=str(SCREENS / "03-cross-tenant-refused.png"))
        assert page.request.get(f"{base}/api/approvals/{world.proposal_b}").status == 404
        csrf = page.request.get(f"{base}/api/me").json()["csrf_token"]
        decided = page.request.post(
            f"{base}/api/approvals/{world.proposal_b}/approve",
            data={"content_hash": "sha256:" + "0" * 64},
            headers={"X-CSRF-Token": csrf},
        )
        assert decided.status == 404 and status(world, world.proposal_b) == "pending"

        # Runs and questions.
        page.goto(f"{base}/runs/{world.run_a}")
        assert "accepted" in page.inner_text("h1")
        assert page.locator("#timeline a.proposal").count() >= 2  # requested, then granted
        page.screenshot(path=str(SCREENS / "04-run.png"), full_page=True)
        store = PauseStore(world.root / "state.db")
        pause = _off_loop(store.create,
            run_id=world.run_a, server="notes", tool="add_note", arguments={"order_id": "order-a1"},
            message="How many minutes until the call back?",
            schema={"type": "object", "properties": {"minutes": {"type": "integer", "minimum": 1}},
                    "required": ["minutes"]},
        )  # fmt: skip
        store.close()
        page.goto(f"{base}/elicitations/{pause.id}")
        page.fill("input[name='f:minutes']", "20")
        page.screenshot(path=str(SCREENS / "05-question.png"), full_page=True)
        page.click("#accept")
        page.wait_for_selector(".notice")
        store = PauseStore(world.root / "state.db")
        assert _off_loop(store.get, pause.id).answer == {"minutes": 20}
        store.close()
        page.goto(f"{base}/elicitations")
        page.screenshot(path=str(SCREENS / "08-questions.png"), full_page=True)
        page.goto(f"{base}/runs")
        assert world.run_a in page.content() and world.run_b not in page.content()
        page.screenshot(path=str(SCREENS / "09-runs.png"), full_page=True)
        page.goto(f"{base}/rules")
        page.screenshot(path=str(SCREENS / "10-rules.png"), full_page=True)
        page.click("button.link")  # sign out

        # An admin reviews the MCP server: hidden characters are shown escaped and flagged.
        sign_in(page, base, "root")
        page.goto(f"{base}/servers")
        page.screenshot(path=str(SCREENS / "06-servers.png"), full_page=True)
        assert "s3cr3t-notes-token-value" not in page.content()
        page.click("form[action='/servers/notes/review'] button")  # a POST with the CSRF token
        card = page.locator("section.tool", has_text="add_note")
        assert "U+200B, U+202E, U+202C, U+E0049" in card.inner_text()
        escapes = card.locator("pre.definition .hidden-char").all_inner_texts()
        assert "\\u200b" in escapes and "\\u202e" in escapes and "\\U000e0049" in escapes
        assert "\u200b" not in card.inner_text() and "\u202e" not in card.inner_text()
        page.screenshot(path=str(SCREENS / "07-server-review.png"), full_page=True)
        page.goto(f"{base}/audit")
        assert "approve" in page.inner_text("body")
        page.screenshot(path=str(SCREENS / "11-audit.png"), full_page=True)
        browser.close()


HIDDEN_CHARS = "\u200b\u200c\u200d\u2060\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\ufeff\u00ad"


@pytest.mark.spec("T4")
def test_hostile_text_in_every_field_never_runs_and_every_hidden_character_is_shown_in_the_browser(
    served: tuple[World, str],
) -> None:
    """New hostile inputs in Chromium: markup and script in a tool name, argument keys and values,
    a run id, a trace (tenant, agent, objective, errors) and a question (its text, form labels and
    choices), with hidden characters everywhere. No dialog opens, no script runs, and the text a
    reviewer reads holds no invisible character: each is shown as a visible escape."""
    from tether.policy import Approvals
    from tether.policy._intake import Proposal
    from tether.policy._sqlite_store import SqliteApprovalStore
    from tether.trace._events import EventKind
    from tether.trace._tracer import JsonlSink, Tracer

    world, base = served
    attack = [
        "<script>window.__owned=1;alert(1)</script>",
        '"><img src=x onerror="window.__owned=2;alert(2)">',
        "'><svg/onload=alert(3)>",
        "javascript:alert(4)//\u202egpj.exe",
        "</pre><iframe src=javascript:alert(5)>",
    ]
    veiled = "tool\u200b\u202e_x" + HIDDEN_CHARS
    args = {a: a for a in attack} | {veiled: veiled, "to": "billing@p\u0430ypal.com"}
    approvals = Approvals(SqliteApprovalStore(world.db))
    try:
        stored = _off_loop(
            approvals.submit, Proposal.of(attack[1], args, TENANT_A.tenant, effect="write"),
            proposed_by=attack[0], run_id=attack[2], call_id=attack[3],
        )  # fmt: skip
    finally:
        approvals.store.close()
    tracer = Tracer("hostile-run", [JsonlSink(world.traces / "hostile-run.jsonl", flush="each_event")])
    tracer.emit(EventKind.RUN_STARTED, design=attack[0], objective=attack[1] + veiled, tools=[attack[2]],
                tenant="tenant-a", agent=attack[3])  # fmt: skip
    tracer.emit(EventKind.TOOL_PROPOSED, call_id="c1", tool=attack[4], arguments=json.dumps(args))
    tracer.emit(EventKind.POLICY_DENIED, call_id="c1", tool=attack[4], rule=attack[0], reason=veiled)
    tracer.emit(EventKind.STOP, reason="policy_denied", detail=attack[1])
    tracer.close()
    store = PauseStore(world.root / "state.db")
    schema = {"type": "object", "properties": {
        "choice": {"type": "string", "title": attack[0] + veiled, "description": attack[1],
                   "enum": ["a", "b"], "enumNames": [attack[2], "pay billing@p\u0430ypal.com"]},
        "note": {"type": "string", "title": attack[4], "default": attack[1]}}}  # fmt: skip
    question = _off_loop(store.create, run_id=world.run_a, server="notes", tool=attack[3], arguments=args,
                         message=attack[0] + veiled, schema=schema)  # fmt: skip
    store.close()

    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        page = browser.new_context(viewport={"width": 1200, "height": 900}).new_page()
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        sign_in(page, base, "ana")
        for path in ("/approvals", f"/approvals/{stored.id}", "/elicitations", f"/elicitations/{question.id}",
                     "/runs", "/runs/hostile-run", f"/api/approvals/{stored.id}"):  # fmt: skip
            page.goto(base + path)
            page.wait_for_load_state("load")
            assert page.evaluate("window.__owned") is None, path
            assert page.locator("iframe, svg, img[src=x], script").count() == 0, path
            text = page.inner_text("body")
            assert not [c for c in HIDDEN_CHARS if c in text], (
                path,
                [f"U+{ord(c):04X}" for c in text if c in HIDDEN_CHARS],
            )
        # What was written is what the reviewer reads, escaped: the markup as text, each hidden
        # character as a visible escape, the look-alike flagged.
        page.goto(f"{base}/approvals/{stored.id}")
        table = page.inner_text("#arguments")
        assert attack[0] in table and attack[1] in table and "\\u200b" in table and "\\u202e" in table
        assert "xn--pypal-4ve.com" in table and "look-alike" in page.inner_text("#flags")
        page.screenshot(path=str(SCREENS / "12-hostile-proposal.png"), full_page=True)
        # The reviewer can still decide it: deny, with a reason.
        page.fill("#deny-reason", "hostile proposal")
        page.click("#deny")
        page.wait_for_selector(".notice")
        assert status(world, stored.id) == "denied"
        page.goto(f"{base}/elicitations/{question.id}")
        assert "xn--pypal-4ve.com" in page.inner_text("#names")
        page.screenshot(path=str(SCREENS / "13-hostile-question.png"), full_page=True)
        assert dialogs == []
        browser.close()
