"""Every error a newcomer can cause ends the same way: one line on stderr, the exit code of the
rule (1 usage or configuration: nothing ran; 2 denied; 6 a dependency down; 7 a bug), and under
``--json`` one JSON object with the common keys as the last line of stdout. Real parts: ``tether``
through ``main``, files on disk, a SQLite file, the installed reference scenarios' demos.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tether.cli import main
from tether.clisupport.output import ENVELOPE


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any], str]:
    code = main([*argv, "--json"])
    out = capsys.readouterr()
    last = json.loads(out.out.strip().splitlines()[-1])
    assert set(ENVELOPE) <= set(last) and last["exit"] == code and last["ok"] is (code == 0), last
    assert "Traceback" not in out.err
    return code, last, out.err


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--model-factory", "nocolon"], "--model-factory must be MODULE:FUNCTION, got 'nocolon'"),
        (["--model-factory", "no_such_module_x:make"], "cannot import 'no_such_module_x'"),
        (["--judge-factory", "json:lodas"], "module 'json' has no 'lodas' (did you mean json:loads?)"),
        (["--judge-factory", "json:__doc__"], "json:__doc__: not a function"),
    ],
)
def test_a_bad_factory_import_path_is_a_configuration_error_before_any_run(
    argv: list[str], fragment: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_json(capsys, "compare", "--out", str(tmp_path / "report"), "--repeat", "1", *argv)
    assert code == 1 and fragment in out["message"] and fragment in err
    assert not (tmp_path / "report").exists()  # nothing ran


def test_a_mistyped_demo_flag_is_a_usage_error_exit_1_not_argparses_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A scenario run by name (tether's own parser) and a scenario's own demo (its parser).
    code, out, err = run_json(capsys, "demo", "maintenance", "Why?", "--modle", "m")
    assert code == 1 and out["error"] == "usage" and "--modle" in out["message"] and "usage:" in err
    code, out, err = run_json(capsys, "demo", "contract", "--nope")
    assert code == 1 and out["error"] == "usage" and "--nope" in err


def test_mcp_resume_refusals_are_exit_1_and_a_bad_store_url_is_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "mcp.yaml"
    config.write_text("servers:\n  - {name: a, transport: http, url: 'http://127.0.0.1:9/mcp'}\n")
    cases = {
        ("resume", "p1", "--config", str(tmp_path / "none.yaml"), "--answer", "{}"): "cannot read MCP config",
        ("resume", "p1", "--config", str(config), "--answer", "not json"): "--answer is not JSON",
        ("resume", "p1", "--config", str(config), "--answer", "{}"): "no elicitation pause 'p1'",
        ("pauses", "--config", str(config), "--db", "bogus://x"): "unsupported storage URL 'bogus://x'",
    }
    for argv, fragment in cases.items():
        code, out, _ = run_json(capsys, "mcp", *argv)
        assert code == 1 and fragment in out["message"], (argv, out)  # 2 is "denied": nothing was
    # The same store, well named and empty: no pause, exit 0.
    code, out, _ = run_json(capsys, "mcp", "pauses", "--config", str(config))
    assert code == 0 and out["pending"] == []


def test_a_file_that_is_not_an_approval_store_is_named_and_left_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n")
    code, out, err = run_json(capsys, "approvals", "list", "--db", str(notes))
    assert code == 1 and f"{notes} is not an approval store" in out["message"] and str(notes) in err
    assert notes.read_text() == "not a database\n"
    # A real store at the same kind of path lists (nothing pending).
    db = tmp_path / "approvals.db"
    sqlite3.connect(db).close()
    code, out, _ = run_json(capsys, "approvals", "list", "--db", str(db))
    assert code == 0 and out["proposals"] == []
    code, out, _ = run_json(capsys, "approvals", "list", "--db", str(db), "--status", "aproved")
    assert code == 1 and "one of pending, approved, denied, invalidated, all" in out["message"]


def test_a_trace_with_a_broken_line_names_the_file_and_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = '{"run_id": "r1", "seq": 1, "ts": "t", "kind": "stop", "reason": "accepted"}\n'
    trace = tmp_path / "r1.jsonl"
    trace.write_text(good + '{"run_id": "r1", "seq": 2, "kind"\n')
    code, out, _ = run_json(capsys, "trace", "stats", str(trace))
    assert code == 1 and f"{trace}: line 2 is not a trace event" in out["message"]
    trace.write_text(good + "[1, 2]\n")
    code, out, _ = run_json(capsys, "trace", "stats", str(trace))
    assert code == 1 and "line 2 is not a trace event: not a JSON object" in out["message"]
    trace.write_text(good)
    code, out, _ = run_json(capsys, "trace", "stats", str(trace))
    assert code == 0 and out["stop_reason"] == "accepted" and out["run_id"] == "r1"
    # By run id: looked up in --dir, and a miss says where else to look.
    code, out, _ = run_json(capsys, "trace", "stats", "r1", "--dir", str(tmp_path))
    assert code == 0 and out["trace"] == str(trace)
    code, out, _ = run_json(capsys, "trace", "stats", "r1", "--dir", str(tmp_path / "elsewhere"))
    assert code == 1 and "pass --dir: the agent file's trace.dir" in out["message"]


def test_revoking_an_unknown_token_is_an_error_and_users_list_takes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("tether.console._users")
    import io

    db = str(tmp_path / "console.db")
    monkeypatch.setattr("sys.stdin", io.StringIO("a long enough password\n"))
    code, _, _ = run_json(capsys, "users", "--db", db, "add", "ana", "--password-stdin")
    assert code == 0
    code, out, _ = run_json(capsys, "users", "--db", db, "list")
    assert code == 0 and [u["name"] for u in out["users"]] == ["ana"]
    code, out, _ = run_json(capsys, "users", "--db", db, "revoke-token", "tok_nope")
    assert code == 1 and "no token 'tok_nope'" in out["message"]
    code, out, _ = run_json(capsys, "users", "--db", db, "token", "ana")
    code, out, _ = run_json(capsys, "users", "--db", db, "revoke-token", out["token_id"])
    assert code == 0 and out["revoked"] is True


def test_a_failure_no_command_handles_is_one_line_exit_7_with_the_envelope_last(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import tether.trace._stats as stats

    def broken(run: str, directory: Any) -> dict[str, Any]:
        raise KeyError("boom")

    monkeypatch.setattr(stats, "stats_for", broken)
    monkeypatch.delenv("TETHER_DEBUG", raising=False)
    code, out, err = run_json(capsys, "trace", "stats", "r1")
    assert code == 7 and out["error"] == "internal_error" and "KeyError: 'boom'" in out["message"]
    assert "TETHER_DEBUG=1" in err
    monkeypatch.setenv("TETHER_DEBUG", "1")
    assert main(["trace", "stats", "r1"]) == 7
    assert "Traceback" in capsys.readouterr().err


def test_a_lab_mode_that_ends_denied_names_its_stop_reason_in_error_and_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_json(capsys, "lab", "injection", "--out", str(tmp_path))
    assert code == 2 and out["stop_reason"] == "policy_denied" and out["error"] == "policy_denied"
    assert out["message"] == f"policy_denied: {out['detail']}" and "export_secrets" in out["message"]
