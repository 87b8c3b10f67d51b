"""Wild servers, round eighteen.

Found:

* a tool the host leaves out of a listing (nested past what the transport reads, a definition
  the SDK refuses, one for its app only) was named by ``tether mcp review`` but not on the
  console's review page, which listed the server's other tools only: the person pinning there
  never learned the server listed it. Now the page (and its JSON) names each, with why.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tether.mcp._deep import PARSER_DEPTH

pytestmark = [pytest.mark.anyio, pytest.mark.spec("X1", "X2", "X3")]

HERE = Path(__file__).parent
WILD6 = HERE / "wild6_server.py"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# -- the console's review page names the tools left out ------------------------------------------


def _console(tmp_path: Path, servers: list[dict[str, Any]]) -> Any:
    """A console over a config of ``servers``, with ``root`` (admin everywhere) signed in."""
    pytest.importorskip("starlette", reason="the console extra is not installed")
    pytest.importorskip("jinja2", reason="the console extra is not installed")
    from starlette.testclient import TestClient

    from tether.console import create_app, sqlite_sources
    from tether.console._users import UserStore

    host = {"pins": "pins.db", "state": "state.db", "trace_dir": "traces", "tenant": "tenant-a"}
    config = tmp_path / "mcp.yaml"
    config.write_text(yaml.safe_dump({"host": host, "servers": servers}), encoding="utf-8")
    users = UserStore(tmp_path / "console.db", scrypt_n=2**10)
    sources = sqlite_sources(
        users_db=tmp_path / "console.db",
        approvals_db=tmp_path / "approvals.db",
        trace_dir=tmp_path / "traces",
        mcp_config=config,
        users=users,
    )
    sources.users.add_user("root", "correct horse battery")
    sources.users.grant("root", "*", "admin")
    app = create_app(
        sources, secret_key=b"wild18-console-key-0a1b2c3d4e5f6789", allowed_hosts=("testserver",)
    )
    client = TestClient(app, base_url="http://testserver")
    page = client.get("/login").text
    token = re.search(r'name="csrf_login" value="([^"]+)"', page)
    assert token is not None
    form = {
        "username": "root",
        "password": "correct horse battery",
        "csrf_login": token.group(1),
        "next": "/",
    }
    assert client.post("/login", data=form).status_code == 200
    return client, sources


def test_the_console_review_names_a_tool_left_out_for_nesting_too_deep(tmp_path: Path) -> None:
    """``deep`` nests 400 levels: left out of the listing (the server's ``lookup`` is offered).
    Before, the console's review page showed ``lookup`` alone, nothing saying ``deep`` was listed
    and left out; now the page and its JSON name it, with why, and ``lookup`` can still be pinned."""
    server = {
        "name": "x",
        "command": [sys.executable, str(WILD6)],
        "env": {"W6_MODE": "deep"},
        "sandbox": "none",
    }
    client, sources = _console(tmp_path, [server])
    try:
        html = client.get("/servers").text
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', html)
        assert csrf is not None
        review = client.post("/api/servers/x/review", headers={"X-CSRF-Token": csrf.group(1)}).json()
        assert [t["tool"] for t in review["tools"]] == ["lookup"]
        [left] = review["left_out"]
        assert left["tool"] == "deep" and f"nests more than {PARSER_DEPTH - 3} levels deep" in left["why"]
        page = client.post("/servers/x/review", data={"csrf_token": csrf.group(1)}).text
        assert "Listed but never offered (1)" in page and "<code>deep</code>" in page
        assert "levels deep" in page
        pinned = client.post(
            "/api/servers/x/pin",
            json={"digest": review["digest"], "tools": ["lookup"]},
            headers={"X-CSRF-Token": csrf.group(1)},
        )
        assert pinned.status_code == 200 and pinned.json()["pinned"] == ["lookup"]
    finally:
        client.close()
        sources.close()
