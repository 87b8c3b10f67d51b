"""``tether users`` and ``tether serve`` from the command line."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from tether.cli import main
from tether.console._users import UserStore


def run(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *argv: str, stdin: str = ""
) -> tuple[int, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_users_add_grant_and_token_store_only_hashes_and_the_token_signs_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "console.db")
    add = ["users", "--db", db, "add", "ana", "--tenant", "t1", "--tenant", "t2", "--role", "reviewer"]
    code, _ = run(capsys, monkeypatch, *add, "--password-stdin", "--json", stdin="a long enough password\n")
    assert code == 0
    code, out = run(
        capsys,
        monkeypatch,
        "users",
        "--db",
        db,
        "grant",
        "ana",
        "--tenant",
        "t3",
        "--role",
        "viewer",
        "--json",
    )
    assert code == 0 and json.loads(out.splitlines()[-1])["grants"] == {
        "t1": "reviewer",
        "t2": "reviewer",
        "t3": "viewer",
    }
    code, out = run(capsys, monkeypatch, "users", "--db", db, "token", "ana", "--label", "ci", "--json")
    token = json.loads(out.splitlines()[-1])["token"]
    assert code == 0 and token.startswith("tether_")
    code, out = run(capsys, monkeypatch, "users", "--db", db, "tokens", "--json")
    assert token not in out and json.loads(out.splitlines()[-1])["tokens"][0]["label"] == "ci"
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert token.encode() not in raw and b"a long enough password" not in raw
    store = UserStore(db)
    principal = store.principal_for_token(token)
    assert principal.name == "ana" and principal.may("t2", "reviewer") and not principal.may("t3", "reviewer")
    store.close()
    code, out = run(
        capsys, monkeypatch, "users", "--db", db, "add", "bo", "--password-stdin", "--json", stdin="short\n"
    )
    assert code == 1 and json.loads(out.splitlines()[-1])["error"] == "weak_password"
    # not a role: a usage error, exit 1, nothing granted
    assert main(["users", "--db", db, "grant", "ana", "--tenant", "t1", "--role", "owner"]) == 1
    code, _ = run(
        capsys, monkeypatch, "users", "--db", db, "grant", "nobody", "--tenant", "t1", "--role", "viewer"
    )
    assert code == 1


def test_serve_refuses_plain_http_cookies_on_a_public_address(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_OUT", str(tmp_path))
    code = main(["serve", "--host", "0.0.0.0", "--port", "1"])
    assert code == 1 and "refusing to serve" in capsys.readouterr().err
    assert not (tmp_path / "console.db").exists()
