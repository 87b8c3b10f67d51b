"""Safe URLs: client commands create nothing and a wrong URL fails in seconds, in one line naming
the host, the database and the cause; ``tether db init`` creates a deployment, once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.cli import main

pytestmark = pytest.mark.slow  # DBOS migrations: a few seconds


def _databases(dsn: str) -> set[str]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        return {r[0] for r in conn.execute("SELECT datname FROM pg_database").fetchall()}


def _schemas(dsn: str) -> set[str]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        return {r[0] for r in conn.execute("SELECT nspname FROM pg_namespace").fetchall()}


def _with_db(dsn: str, name: str) -> str:
    return dsn.rsplit("/", 1)[0] + "/" + name


@pytest.fixture
def fresh_db(pg_dsn: str) -> Iterator[str]:
    """A database name no one has created; dropped afterwards if a test created it."""
    import psycopg

    name = f"tether_t_{uuid.uuid4().hex[:10]}"
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


# A deadline against a hang (a connect with no timeout waits on TCP for minutes), not a timing:
# generous, as a loaded machine may take seconds for what takes milliseconds on an idle one.
HANG_S = 60.0


def _cli(capsys: Any, *argv: str) -> tuple[int, dict[str, Any], str, float]:
    capsys.readouterr()
    started = time.monotonic()
    code = main(list(argv))
    elapsed = time.monotonic() - started
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    return code, (json.loads(lines[-1]) if lines else {}), err, elapsed


def test_a_mistyped_database_fails_at_once_and_is_not_created(
    pg_dsn: str, fresh_db: str, capsys: Any
) -> None:
    url = _with_db(pg_dsn, fresh_db)
    for argv in (
        ("submit", "--db", url, "--agent", "durable_app:build", "t: read a1", "--json"),
        ("runs", "--db", url, "list", "--json"),
        ("runs", "--db", url, "show", "r1", "--json"),
    ):
        code, out, err, elapsed = _cli(capsys, *argv)
        assert code == 1 and out["error"] == "no_database", out
        assert elapsed < HANG_S
        [line] = err.strip().splitlines()  # one line: where, which database, why, what to do
        assert "127.0.0.1:5432" in line and fresh_db in line and "does not exist" in line
        assert "tether db init" in line and "connection to server" not in line  # said once
    assert fresh_db not in _databases(pg_dsn)


def test_a_wrong_port_or_user_fails_in_one_line(pg_dsn: str, capsys: Any) -> None:
    port = pg_dsn.replace("127.0.0.1:5432", "127.0.0.1:1")
    code, out, err, elapsed = _cli(capsys, "runs", "--db", port, "list", "--json")
    assert (code, out["error"]) == (6, "unreachable") and elapsed < HANG_S
    [line] = err.strip().splitlines()
    assert "127.0.0.1:1" in line and "refused" in line.lower()
    user = pg_dsn.replace("postgres@", f"nobody_{uuid.uuid4().hex[:6]}@")
    code, out, err, _ = _cli(capsys, "runs", "--db", user, "list", "--json")
    assert (code, out["error"]) == (1, "auth") and "role" in err


def test_a_mistyped_schema_is_refused_and_not_created(pg_dsn: str, capsys: Any) -> None:
    schema = f"typo_{uuid.uuid4().hex[:8]}"
    code, out, err, _ = _cli(capsys, "runs", "--db", f"{pg_dsn}?schema={schema}", "list", "--json")
    assert (code, out["error"]) == (1, "not_initialized")
    assert f"{schema}_dbos" in err and "tether db init" in err
    assert not {schema, f"{schema}_dbos"} & _schemas(pg_dsn)


def test_db_init_creates_the_deployment_once_and_clients_then_use_it(
    pg_dsn: str, fresh_db: str, capsys: Any
) -> None:
    url = _with_db(pg_dsn, fresh_db)
    code, out, _, _ = _cli(capsys, "db", "check", url, "--json")
    assert code == 1 and fresh_db not in _databases(pg_dsn)
    code, out, _, _ = _cli(capsys, "db", "init", url, "--json")
    assert code == 0 and out["database_created"] is True
    assert fresh_db in _databases(pg_dsn)
    code, out, _, _ = _cli(capsys, "db", "init", url, "--json")  # again: nothing to create
    assert code == 0 and out["database_created"] is False
    assert _cli(capsys, "db", "check", url, "--json")[0] == 0
    submit = ("submit", "--db", url, "--agent", "durable_app:build", "t: read a1", "--json")
    code, out, _, _ = _cli(capsys, *submit)
    assert code == 0 and out["status"] == "queued"
    code, listed, _, _ = _cli(capsys, "runs", "--db", url, "list", "--json")
    assert code == 0 and [r["status"] for r in listed["runs"]] == ["queued"]


def test_a_worker_without_init_refuses_a_missing_database(pg_dsn: str, fresh_db: str) -> None:
    from tether.durable import Worker, WorkerConfig
    from tether.durable._deploy import DeploymentUnavailable

    with pytest.raises(DeploymentUnavailable) as info:
        Worker(WorkerConfig(_with_db(pg_dsn, fresh_db), apps=("durable_app:build",))).start()
    assert info.value.reason == "no_database" and "--init" not in str(info.value)
    assert fresh_db not in _databases(pg_dsn)


def test_a_worker_without_init_refuses_a_mistyped_schema_and_creates_nothing(
    pg_dsn: str, pg_url: str, capsys: Any
) -> None:
    from tether.durable import Worker, WorkerConfig
    from tether.durable._deploy import DeploymentUnavailable, init_deployment

    schema = f"typo_{uuid.uuid4().hex[:8]}"
    with pytest.raises(DeploymentUnavailable) as info:
        Worker(WorkerConfig(f"{pg_dsn}?schema={schema}", apps=("durable_app:build",))).start()
    assert info.value.reason == "not_initialized" and f"{schema}_dbos" in str(info.value)
    assert not {schema, f"{schema}_dbos"} & _schemas(pg_dsn)
    # Legitimate: once created (tether db init), a worker starts there and registers itself (a
    # process of its own, as an operator runs it: DBOS is one instance per process).
    init_deployment(pg_url)
    here = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here.parents[1] / "src"), str(here)])}
    cmd = [sys.executable, "-m", "tether.cli", "worker", "--db", pg_url, "--app", "durable_app:build",
           "--executor-id", "init-ok", "--poll", "0.1"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None and json.loads(proc.stdout.readline())["ready"]
        code, out, _, _ = _cli(capsys, "runs", "workers", "--db", pg_url, "--json")
    finally:
        proc.terminate()
        proc.wait(120)  # a drain under load: a generous deadline
    assert code == 0 and [w["executor_id"] for w in out["workers"]] == ["init-ok"]


def test_store_commands_refuse_a_mistyped_url_in_one_line_and_create_nothing(
    pg_dsn: str, pg_url: str, fresh_db: str, tmp_path: Any, capsys: Any
) -> None:
    """``tether approvals --db URL`` and the console on a deployment read and decide on tether's
    stores: a typo fails like a client's, never creating the schema or the database."""
    from tether.console import deployment_sources
    from tether.durable._deploy import DeploymentUnavailable, init_deployment

    schema = f"typo_{uuid.uuid4().hex[:8]}"
    for url, where in ((f"{pg_dsn}?schema={schema}", schema), (_with_db(pg_dsn, fresh_db), fresh_db)):
        for argv in (("approvals", "list", "--db", url), ("approvals", "approve", "p1", "--db", url)):
            code, out, err, elapsed = _cli(capsys, *argv, "--json")
            assert code == 1 and out["error"] in ("not_initialized", "no_database"), out
            [line] = err.strip().splitlines()
            assert "127.0.0.1:5432" in line and where in line and "tether db init" in line
            assert elapsed < HANG_S
        with pytest.raises(DeploymentUnavailable):
            deployment_sources(url=url, users_db=tmp_path / "console.db")
    assert not {schema, f"{schema}_dbos"} & _schemas(pg_dsn)
    assert fresh_db not in _databases(pg_dsn)
    # Legitimate: on a deployment that exists, the same commands and the console work.
    init_deployment(pg_url)
    code, out, _, _ = _cli(capsys, "approvals", "list", "--db", pg_url, "--json")
    assert code == 0 and out["proposals"] == []
    deployment_sources(url=pg_url, users_db=tmp_path / "console.db").close()


def test_runs_takes_db_before_or_after_its_action(pg_url: str, capsys: Any) -> None:
    from tether.durable._deploy import init_deployment

    init_deployment(pg_url)
    submit = ("submit", "--db", pg_url, "--agent", "durable_app:build", "t: read a1", "--json")
    assert _cli(capsys, *submit)[0] == 0
    before = _cli(capsys, "runs", "--db", pg_url, "list", "--json")
    after = _cli(capsys, "runs", "list", "--db", pg_url, "--json")
    assert before[0] == after[0] == 0 and before[1]["count"] == after[1]["count"] == 1
    # Attack: a wrong URL after the action is not shadowed by the URL before it.
    code, out, _, _ = _cli(capsys, "runs", "--db", pg_url, "list", "--db", pg_url + "x", "--json")
    assert code == 1 and out["error"] == "not_initialized"


def test_db_takes_its_url_as_db_like_every_command_and_the_positional_still_works(
    pg_url: str, capsys: Any
) -> None:
    code, out, err, _ = _cli(capsys, "db", "check", "--db", pg_url, "--json")
    assert code == 1 and out["error"] == "not_initialized" and "tether db init --db URL" in err
    code, out, _, _ = _cli(capsys, "db", "init", "--db", pg_url, "--json")
    assert code == 0 and out["dbos_schema"].endswith("_dbos")
    for argv in (("db", "--db", pg_url, "check"), ("db", "check", "--db", pg_url), ("db", "check", pg_url)):
        assert _cli(capsys, *argv, "--json")[0] == 0, argv
    # Two different URLs: refused, neither is used.
    code, out, _, _ = _cli(capsys, "db", "check", pg_url, "--db", pg_url + "x", "--json")
    assert code == 1 and out["error"] == "usage" and "give one" in out["message"]


def test_runs_show_and_resume_of_an_unknown_run_are_unknown_run_with_the_envelope(
    pg_url: str, capsys: Any
) -> None:
    from tether.durable._deploy import init_deployment

    init_deployment(pg_url)
    for argv in (("runs", "show", "nope"), ("runs", "resume", "nope"), ("resume", "nope")):
        code, out, err, _ = _cli(capsys, *argv, "--db", pg_url, "--json")
        assert code == 1 and out["error"] == "unknown_run" and "nope" in out["message"], (argv, out)
        assert "Traceback" not in err


def _worker_json(*argv: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any], str]:
    here = Path(__file__).resolve().parent
    path = os.pathsep.join([str(here.parents[1] / "src"), str(here)])
    done = subprocess.run(
        [sys.executable, "-m", "tether.cli", "worker", *argv, "--json"],
        env={**os.environ, **(env or {}), "PYTHONPATH": path}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr  # under --json the envelope is always the last line
    return done.returncode, json.loads(lines[-1]), done.stderr


def test_worker_start_up_failures_are_the_json_envelope_under_json(
    pg_dsn: str, fresh_db: str, tmp_path: Path
) -> None:
    from tether.clisupport.output import ENVELOPE

    missing = tmp_path / "missing.yaml"
    cases = [
        ((), {"TETHER_DB": ""}, 1, "no_db", "--db"),
        (("--db", "notaurl", "--app", "durable_app:build"), {}, 1, "ConfigError", "notaurl"),
        (("--db", _with_db(pg_dsn, fresh_db), "--app", "durable_app:build"), {}, 1, "no_database", fresh_db),
        (("--db", pg_dsn, "--app", "durable_app:biuld"), {}, 1, "bad_app", "durable_app:build?"),
        (("--db", pg_dsn, "--app", "no_such_module_x:build"), {}, 1, "bad_app", "no_such_module_x"),
        (("--db", pg_dsn, "--app", str(missing)), {}, 1, "bad_app", str(missing)),
    ]
    for argv, env, code, kind, fragment in cases:
        rc, out, err = _worker_json(*argv, env=env)
        assert set(ENVELOPE) <= set(out) and rc == out["exit"] == code and out["ok"] is False, (argv, out)
        assert out["error"] == kind and fragment in out["message"] and "Traceback" not in err, (argv, out)
    assert fresh_db not in _databases(pg_dsn)


def test_a_bad_agent_file_is_a_configuration_error_and_nothing_is_stored(
    pg_url: str, tmp_path: Any, capsys: Any
) -> None:
    from tether.durable._deploy import init_deployment

    init_deployment(pg_url)
    bad = tmp_path / "agent.yaml"
    bad.write_text("name: a\ninstructions: x\nmodel: {name: m, api_key: sk-in-the-file}\n")
    code, out, _, _ = _cli(capsys, "submit", "--db", pg_url, "--agent", str(bad), "hello", "--json")
    assert code == 1 and "api_key is not read from files" in out["message"]
    assert _cli(capsys, "runs", "--db", pg_url, "list", "--json")[1]["count"] == 0
    # Legitimate: the same file, fixed, is queued, bound to its digest.
    bad.write_text("name: a\ninstructions: x\nmodel: {name: m, api_key_env: K}\npolicy: {tenant: acme}\n")
    code, out, _, _ = _cli(capsys, "submit", "--db", pg_url, "--agent", str(bad), "hello", "--json")
    assert code == 0 and out["status"] == "queued"
    _, listed, _, _ = _cli(capsys, "runs", "--db", pg_url, "list", "--json")
    assert [r["tenant"] for r in listed["runs"]] == ["acme"]


def test_a_batch_submits_every_line_or_nothing(pg_url: str, tmp_path: Any, capsys: Any) -> None:
    from tether.durable._deploy import init_deployment

    init_deployment(pg_url)

    def count() -> int:
        code, out, _, _ = _cli(capsys, "runs", "--db", pg_url, "list", "--limit", "1000", "--json")
        assert code == 0
        return int(out["count"])

    lines = [{"objective": f"b{i}: read a{i}", "tenant": "acme" if i % 2 else "globex"} for i in range(5)]
    # Attack: one bad line (an oversized objective) among good ones: nothing is stored.
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(json.dumps(x) for x in [*lines[:2], {"objective": "x" * 100_001}]) + "\n")
    base = ("submit", "--db", pg_url, "--agent", "durable_app:build")
    code, out, _, _ = _cli(capsys, *base, "--batch", str(bad), "--json")
    assert code == 1 and "line 3" in out["message"] and "limit" in out["message"]
    assert count() == 0
    code, out, _, _ = _cli(capsys, *base, "x" * 100_001, "--json")
    assert code == 1 and count() == 0
    # Legitimate: every line queued, each with its own tenant; one run id a line.
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    capsys.readouterr()
    assert main([*base, "--batch", str(good), "--json"]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    ids = [json.loads(line)["run_id"] for line in printed[:-1]]
    assert len(set(ids)) == 5 and json.loads(printed[-1])["submitted"] == 5
    _, listed, _, _ = _cli(capsys, "runs", "--db", pg_url, "list", "--tenant", "acme", "--json")
    assert sorted(r["run_id"] for r in listed["runs"]) == sorted(ids[1::2])


def _typo(dsn: str, kind: str, fresh_db: str) -> tuple[str, str, str, str]:
    """(URL, host:port, database, cause) of a URL mistyped in one place."""
    if kind == "host":  # .invalid never resolves (RFC 2606): no lookup leaves this machine
        host = "no-such-host.invalid"
        return dsn.replace("127.0.0.1", host), f"{host}:5432", "test", "resolve"
    if kind == "port":
        return dsn.replace("127.0.0.1:5432", "127.0.0.1:1"), "127.0.0.1:1", "test", "refused"
    return _with_db(dsn, fresh_db), "127.0.0.1:5432", fresh_db, "does not exist"


@pytest.mark.parametrize("kind", ["host", "database", "port"])
def test_every_client_command_fails_on_a_mistyped_url_in_seconds_with_one_line(
    pg_dsn: str, fresh_db: str, kind: str, capsys: Any
) -> None:
    """An operator's typo in the host, the database name or the port: each client command exits
    non-zero within seconds, with one line naming the host, the database and the cause, and
    nothing is created (the worker as well, started without --init, in a process of its own)."""
    import dbos  # noqa: F401 - imported once here: the timings below are the commands' own

    url, where, database, cause = _typo(pg_dsn, kind, fresh_db)
    here = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(here.parents[1] / "src"), str(here)])}
    worker = subprocess.Popen(
        [sys.executable, "-m", "tether.cli", "worker", "--db", url, "--app", "durable_app:build"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    commands = [
        ("runs", "--db", url, "list"),
        ("runs", "--db", url, "show", "r1"),
        ("runs", "--db", url, "cancel", "r1"),
        ("runs", "--db", url, "resume", "r1"),
        ("runs", "--db", url, "approve", "p1"),
        ("runs", "--db", url, "workers"),
        ("runs", "--db", url, "escalations"),
        ("submit", "--db", url, "--agent", "durable_app:build", "t: read a1"),
        ("resume", "r1", "--db", url),
        ("approvals", "list", "--db", url),
        ("approvals", "approve", "p1", "--db", url),
    ]
    for argv in commands:
        code, out, err, elapsed = _cli(capsys, *argv, "--json")
        assert code == (1 if kind == "database" else 6), (argv, out)
        assert elapsed < HANG_S, (argv, elapsed)
        [line] = err.strip().splitlines()
        assert where in line and f"'{database}'" in line and cause in line.lower(), (argv, line)
    try:  # its imports and the check: a generous deadline against a hang, on a loaded machine
        _, stderr = worker.communicate(timeout=120)
    finally:
        worker.kill()
    assert worker.returncode == (1 if kind == "database" else 6), stderr
    [line] = [x for x in stderr.strip().splitlines() if not x.startswith("{")]
    assert where in line and f"'{database}'" in line and cause in line.lower(), line
    assert fresh_db not in _databases(pg_dsn)


def test_an_approval_says_when_no_worker_is_live_to_resume_its_run(pg_url: str, capsys: Any) -> None:
    """A decided proposal's run goes on by a worker only while one lives: with none, the desk
    says so (and how to continue by hand) instead of promising a resume."""
    from tether.cli._commands.approvals import _live_workers, _print_decision
    from tether.stores._url import open_stores

    assert _cli(capsys, "db", "init", pg_url, "--json")[0] == 0
    stores = open_stores(pg_url)
    try:
        assert _live_workers(stores) == 0  # no worker ever started here
    finally:
        stores.close()
    decided = {"id": "p1", "status": "approved", "run": "r1"}
    _print_decision(dict(decided), pg_url, as_json=False, deployment=True, workers=0)
    out = capsys.readouterr().out
    assert "no worker is live now" in out and "tether resume r1" in out and "by itself" not in out
    _print_decision(dict(decided), pg_url, as_json=False, deployment=True, workers=2)
    assert "a worker resumes the run by itself" in capsys.readouterr().out
