"""The operator's commands on a newcomer's mistakes (``tether runs``, ``tether resume``): exit 1,
one line on stderr that says what to do, and under ``--json`` the envelope as the last line.
Real parts: ``tether`` through ``main``, files and folders on disk, a real SQLite approval store.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tether.cli import main
from tether.clisupport.output import ENVELOPE


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any], str]:
    capsys.readouterr()
    code = main([*argv, "--json"])
    out = capsys.readouterr()
    lines = out.out.strip().splitlines()
    assert lines, (argv, out.err)  # under --json something is always printed: the envelope
    last = json.loads(lines[-1])
    assert set(ENVELOPE) <= set(last) and last["exit"] == code and last["ok"] is (code == 0), last
    assert "Traceback" not in out.err
    return code, last, out.err


@pytest.mark.parametrize(
    "argv",
    [
        ("list",),
        ("show", "r1"),
        ("cancel", "r1"),
        ("resume", "r1"),
        ("approve", "p1"),
        ("pauses",),
        ("answer", "q1", "--decline"),
        ("resolve", "k1", "--happened", "no"),
        ("move", "r1"),
        ("workers",),
        ("escalations",),
    ],
)
def test_runs_without_a_database_is_exit_1_with_a_hint_naming_db_and_tether_db(
    argv: tuple[str, ...], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TETHER_DB", raising=False)
    code, out, err = run_json(capsys, "runs", *argv)
    assert code == 1 and out["error"] == "no_db"
    [line] = err.strip().splitlines()
    assert "--db" in line and "TETHER_DB" in line and line.startswith(f"tether runs {argv[0]}:")
    # Without --json: the same one line, on stderr, and nothing on stdout.
    assert main(["runs", *argv]) == 1
    out2 = capsys.readouterr()
    assert out2.out == "" and out2.err.strip() == line


@pytest.mark.parametrize("kind", ["not_sqlite", "folder"])
def test_resume_on_a_path_that_is_not_an_approval_store_names_it_and_exits_1(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "notadb.db"
    if kind == "folder":
        path.mkdir()
    else:
        path.write_text("not a database\n")
    code, out, err = run_json(capsys, "resume", "r1", "--db", str(path))
    assert code == 1 and out["error"] == "not_an_approval_store" and out["db"] == str(path)
    assert str(path) in out["message"] and str(path) in err and "unexpected" not in err
    if kind == "not_sqlite":
        assert path.read_text() == "not a database\n"  # left as it was


def test_resume_of_an_unknown_run_is_unknown_run_exit_1_and_a_known_store_is_not_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tether.policy import SqliteApprovalStore

    db = tmp_path / "approvals.db"
    SqliteApprovalStore(db).close()
    code, out, err = run_json(capsys, "resume", "no-such-run", "--db", str(db))
    assert code == 1 and out["error"] == "unknown_run" and out["run_id"] == "no-such-run"
    assert "no-such-run" in out["message"] and str(db) in err


def test_resume_with_a_sqlite_deployment_url_goes_to_the_deployment_not_to_a_file_of_that_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/deployment"
    code, out, _ = run_json(capsys, "resume", "r1", "--db", url)  # nothing there yet: nothing created
    assert code == 1 and out["error"] == "not_initialized" and "tether db init" in out["message"]
    assert not (tmp_path / "deployment").exists() and not list(tmp_path.iterdir())
    assert main(["db", "--db", url, "init"]) == 0
    code, out, _ = run_json(capsys, "resume", "r1", "--db", url)
    assert code == 1 and out["error"] == "unknown_run" and out["run_id"] == "r1"
    assert "approval store" not in out["message"]
