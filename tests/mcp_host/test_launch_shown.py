"""What a server's launch event says (traced, shown to whoever reads the run): a config expands
``${VAR}`` into commands and URLs, so credentials are hidden there, and the rest stays readable."""

from __future__ import annotations

import pytest

from tether.mcp import McpServerSource
from tether.mcp._shown import HIDDEN

TOKEN = "ghp_" + "x7" * 12
DSN = "postgresql://app:hunter22@db.internal:5432/orders?sslmode=require"


def test_a_launch_command_hides_credentials_and_keeps_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    source = McpServerSource(
        "gh",
        command=["npx", "-y", "@acme/server", "--api-key", "k-123456789", f"--auth={TOKEN}", DSN, "-v"],
        env={"SERVICE_PASSWORD": "pw-abcdefgh", "LOG_LEVEL": "debug"},
    )
    shown = source.describe()
    assert TOKEN not in str(shown) and "k-123456789" not in str(shown) and "hunter22" not in str(shown)
    assert shown["command"] == (
        f"npx -y @acme/server --api-key '{HIDDEN}' --auth={HIDDEN} postgresql://db.internal:5432/orders -v"
    )
    assert shown["env_keys"] == ["LOG_LEVEL", "SERVICE_PASSWORD"]


def test_a_servers_own_secret_value_is_hidden_where_it_is_passed_as_an_argument() -> None:
    source = McpServerSource(
        "db", command=["db-mcp", "--dsn", "pw-abcdefgh"], env={"SERVICE_PASSWORD": "pw-abcdefgh"}
    )
    assert source.describe()["command"] == f"db-mcp --dsn {HIDDEN}"
    plain = McpServerSource("files", command=["python", "-m", "files_server", "--root", "/srv/data"])
    assert plain.describe()["command"] == "python -m files_server --root /srv/data"


def test_a_server_url_loses_its_credentials_and_keeps_where_it_is() -> None:
    source = McpServerSource(
        "remote", url="https://user:pw@mcp.example/v1/mcp?key=k3y", headers={"Authorization": "Bearer t"}
    )
    shown = source.describe()
    assert shown["url"] == "https://mcp.example/v1/mcp"
    assert shown["header_keys"] == ["Authorization"]
    local = McpServerSource("local", url="http://127.0.0.1:8931/mcp")
    assert local.describe()["url"] == "http://127.0.0.1:8931/mcp"
