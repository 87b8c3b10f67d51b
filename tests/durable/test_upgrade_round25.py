"""An operator's upgrade, round 25: the embedded (non-durable) path and the files a user keeps
(approval store with its checkpoints, pins, pauses, memory, the console's users database, trace
folders), played with the code of older commits in subprocesses (``UPGRADE25_FROM``, default
``12e445ab``: the last release before the tables were declared once; ``0ea4f9e8``: 2026-12-04).

What did not hold, fixed here and pinned below:

- a store this release created (a first ``tether run --db``, a console's first pin, a memory
  store opened after the upgrade) crashed a release of the earlier layout that opened it after a
  rollback: it applies each of its own migration names it does not find in ``_migrations`` with
  a bare ``CREATE TABLE`` ("table proposals already exists": a traceback, no JSON line), where a
  store this release upgraded from it opens and works beside. The shared migration mechanism now
  records those earlier names too (``tether.sql._earlier``; a named migration of each concern,
  applied once), so such a release reads and writes a store this release created as one it
  upgraded.
- ``tether db check`` (and ``db status``) on a store upgraded from the earlier layout listed that
  layout's own names (``a001_proposals``...) as a later release's migrations (``later``). They are
  known now (``tether.sql._earlier.EARLIER_LAYOUT``).

Held (pinned): a run the older release paused, approved under it, is resumed by this release's
``tether resume``: the approval honoured, not asked again, the effect once; every store opens and
migrates once; this release refuses a store a later release migrated breakingly (every store,
``SchemaTooNew``, the file's bytes unchanged); two processes of this release migrating one new
SQLite file at once both succeed, each migration recorded once.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
from test_rolling_upgrade import _write_version
from test_rolling_upgrade_round6 import NEW_SRC, old_tree

from tether.console._users import UserStore
from tether.sql._database import MIGRATIONS
from tether.sql._earlier import EARLIER
from tether.sql._journal import SchemaTooNew

OLD_COMMITS = [c for c in os.environ.get("UPGRADE25_FROM", "12e445ab").split(",") if c.strip()]
STORES = ("approvals", "memory", "pins", "pauses")


@pytest.fixture(scope="module", params=OLD_COMMITS)
def old_src(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``src`` tree of an older commit (skipped where it is not in this checkout)."""
    return old_tree(str(request.param), tmp_path_factory)


def _env(src: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def _python(src: Path, script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], env=_env(src), cwd=cwd,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _cli(src: Path, cwd: Path, *argv: str, code: int = 0) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "tether.cli", *argv, "--json"],
        env=_env(src), capture_output=True, cwd=cwd, timeout=120,
    )  # fmt: skip
    lines = done.stdout.decode().strip().splitlines()
    assert lines, (argv, done.stderr.decode()[-2000:])
    out = json.loads(lines[-1])
    assert done.returncode == code, (argv, done.returncode, out, done.stderr.decode()[-2000:])
    return dict(out)


def _journal(file: Path) -> list[str]:
    with sqlite3.connect(file) as db:
        names = [str(r[0]) for r in db.execute("SELECT name FROM _migrations")]
    db.close()
    return names


# The earlier layout's own stores (module paths of that tree), each opened and written.
EARLIER_WRITES = """
    from datetime import UTC, datetime, timedelta
    from tether.policy.sqlite_store import SqliteApprovalStore
    from tether.policy.store import NewProposal
    from tether.mcp.pinning import PinStore, ToolCheck
    from tether.mcp.pauses import PauseStore
    from tether.memory.sqlite import SqliteMemory
    from tether.memory.store import MemoryPolicy
    now = datetime.now(UTC)
    s = SqliteApprovalStore("approvals.db")
    p = s.add_proposal(NewProposal(tenant="t", tool="send", arguments="{}", content_hash="h",
        effect="write", proposed_by="m", run_id="r1", step=1, call_id="c1"), now=now)
    s.decide(p.id, "approved", allowed_from=frozenset({"pending"}), actor="rita", reason="ok", now=now)
    s.save_checkpoint("r1", app=None, state="{}", status="paused", stop_reason="approval", now=now)
    PinStore("pins.db").approve("srv", [ToolCheck("x", "new", "ab", {"name": "x"})], endpoint="e", actor="a")
    PauseStore("pauses.db").create(run_id="r1", server="s", tool="t", arguments={}, message="m",
        schema={"type": "object"})
    SqliteMemory("memory.db", policy=MemoryPolicy(approved_sources=["user"]))
    print("earlier release wrote")
"""


def test_stores_this_release_created_are_read_and_written_by_the_earlier_layout_release(
    tmp_path: Path, old_src: Path
) -> None:
    """A rollback: files this release created (never an earlier release's) opened by a release of
    the earlier layout: each store opens, takes its writes, and this release reads them back;
    every migration name recorded once, and this release's next open applies nothing."""
    from tether.mcp._pauses import PauseStore
    from tether.mcp._pinning import PinStore
    from tether.memory import MemoryPolicy
    from tether.memory._sqlstore import SqliteMemory
    from tether.policy._sqlstore import SqlApprovalStore

    policy = MemoryPolicy(approved_sources=frozenset({"user"}))
    opened = [
        SqlApprovalStore(tmp_path / "approvals.db"),
        PinStore(tmp_path / "pins.db"),
        PauseStore(tmp_path / "pauses.db"),
        SqliteMemory(tmp_path / "memory.db", policy=policy),
    ]
    for store in opened:
        store.close()
    done = _python(old_src, EARLIER_WRITES, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "already exists" not in done.stderr

    approvals = SqlApprovalStore(tmp_path / "approvals.db")
    pins, pauses = PinStore(tmp_path / "pins.db"), PauseStore(tmp_path / "pauses.db")
    memory = SqliteMemory(tmp_path / "memory.db", policy=policy)
    try:
        for store in (approvals, pins, pauses, memory):
            assert store.db.migrate(store.concern) == []  # the second open: nothing to apply
        [proposal] = anyio.run(lambda: approvals.list_proposals())
        assert proposal.status == "approved"
        assert anyio.run(approvals.load_checkpoint, "r1") is not None
        assert set(anyio.run(pins.pins, "srv")) == {"x"}
        assert [p.run_id for p in anyio.run(lambda: pauses.pending())] == ["r1"]
    finally:
        for store in (approvals, pins, pauses, memory):
            store.close()
    for concern in STORES:
        names = _journal(tmp_path / f"{concern}.db")
        assert len(names) == len(set(names)), names
        assert {n for n, _ in MIGRATIONS[concern]} <= set(names)


def test_a_run_the_earlier_release_paused_and_approved_finishes_once_on_this_release(
    tmp_path: Path, old_src: Path
) -> None:
    """The older release's ``tether run`` pauses for approval, its CLI approves; this release's
    ``tether resume`` migrates the store once and finishes the run: the approval honoured (not
    asked again), the effect once. The older release still opens the upgraded store after."""
    (tmp_path / "agent").mkdir()
    _write_version(tmp_path / "agent", "A")
    agent, db = tmp_path / "agent" / "agent.yaml", str(tmp_path / "approvals.db")
    paused = _cli(old_src, tmp_path, "run", "--agent", str(agent), "--db", db, "note it", code=5)
    assert paused["stop_reason"] == "approval_required", paused
    run_id = paused["run_id"]
    [proposal] = _cli(old_src, tmp_path, "approvals", "list", "--db", db)["proposals"]
    _cli(old_src, tmp_path, "approvals", "approve", proposal["id"], "--db", db, "--reviewer", "rita")
    done = _cli(NEW_SRC, tmp_path, "resume", run_id, "--db", db)
    assert (done["stop_reason"], done["problems"]) == ("accepted", []), done
    effects = (tmp_path / "agent" / "effects.log").read_text().splitlines()
    assert [e.split("\t")[0] for e in effects] == [run_id]
    names = _journal(Path(db))
    assert len(names) == len(set(names)) and {n for n, _ in MIGRATIONS["approvals"]} <= set(names)
    assert _cli(NEW_SRC, tmp_path, "approvals", "list", "--db", db)["proposals"] == []
    listed = _cli(old_src, tmp_path, "approvals", "list", "--db", db)  # a rollback opens it
    assert listed["proposals"] == []


def _digest(file: Path) -> str:
    return hashlib.sha256(file.read_bytes()).hexdigest()


def test_every_store_a_later_release_migrated_breakingly_is_refused_and_left_untouched(
    tmp_path: Path,
) -> None:
    """This release, as the older one of a later upgrade: each store (approvals, pins, pauses,
    memory, the console's users) a later release marked breaking is refused with
    ``SchemaTooNew`` naming the migration, and its file's bytes stay as they were."""
    from tether.mcp._pauses import PauseStore
    from tether.mcp._pinning import PinStore
    from tether.memory import MemoryPolicy
    from tether.memory._sqlstore import SqliteMemory
    from tether.policy._sqlstore import SqlApprovalStore

    policy = MemoryPolicy(approved_sources=frozenset({"user"}))
    makers: dict[str, Any] = {
        "approvals": SqlApprovalStore,
        "pins": PinStore,
        "pauses": PauseStore,
        "memory": lambda path: SqliteMemory(path, policy=policy),
        "users": lambda path: UserStore(path, scrypt_n=2**10),
    }
    for concern, make in makers.items():
        file = tmp_path / f"{concern}.db"
        make(file).close()
        with sqlite3.connect(file) as db:
            later = (f"{concern}.099_x!", "2027-01-01T00:00:00+00:00")
            db.execute("INSERT INTO _migrations VALUES (?, ?)", later)
        db.close()
        before = _digest(file)
        with pytest.raises(SchemaTooNew, match=rf"{concern}\.099_x!.*nothing was read or written"):
            make(file)
        assert _digest(file) == before, concern


RACE = """
    import sys
    from tether.mcp._pauses import PauseStore
    from tether.mcp._pinning import PinStore
    from tether.policy._sqlstore import SqlApprovalStore
    for make in (SqlApprovalStore, PinStore, PauseStore):
        make(sys.argv[1]).close()
    print("ok")
"""


def test_two_processes_of_this_release_migrate_one_new_sqlite_file_at_once(tmp_path: Path) -> None:
    """Two processes create and migrate the same new file at once (three concerns in one file):
    both succeed, every migration recorded once."""
    file = tmp_path / "shared.db"
    cmd = [sys.executable, "-c", textwrap.dedent(RACE), str(file)]
    procs = [
        subprocess.Popen(cmd, env=_env(NEW_SRC), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()[-2000:]
    concerns = ("approvals", "pins", "pauses")
    ours = {n for c in concerns for n, _ in MIGRATIONS[c]}
    expected = ours | {n for c in concerns for n in EARLIER[c]["sqlite"]}
    assert set(_journal(file)) == expected


EARLIER_CONSOLE = """
    from tether.console.users import UserStore
    users = UserStore("console.db", scrypt_n=1024)
    users.add_user("ada", "correct horse battery")
    session = users.create_session("ada")
    token = users.create_token("ada", label="ci")[0]
    print(session if isinstance(session, str) else session[0])
    print(token)
"""


def test_a_console_db_of_the_earlier_release_keeps_its_people_sessions_and_tokens(
    tmp_path: Path, old_src: Path
) -> None:
    """A console's ``console.db`` written by the older release, opened by this release: the
    person signs in, the signed-in session and the API token still stand; migrated once."""
    done = _python(old_src, EARLIER_CONSOLE, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    session, token = done.stdout.split()[-2:]
    users = UserStore(tmp_path / "console.db", scrypt_n=2**10)
    try:
        assert users.authenticate("ada", "correct horse battery")
        by_session, by_token = users.principal_for_session(session), users.principal_for_token(token)
        assert by_session is not None and by_session.name == "ada"
        assert by_token is not None and by_token.name == "ada"
    finally:
        users.close()
    names = _journal(tmp_path / "console.db")
    assert len(names) == len(set(names)) and {n for n, _ in MIGRATIONS["users"]} <= set(names)
    UserStore(tmp_path / "console.db", scrypt_n=2**10).close()
    assert sorted(_journal(tmp_path / "console.db")) == sorted(names)  # the second open: nothing


def test_db_check_does_not_take_the_earlier_layouts_names_for_a_later_release(tmp_path: Path) -> None:
    """A deployment whose stores carry the earlier layout's migration names (upgraded from it, or
    created by this release, which records them): ``tether db check`` lists none of them as a
    later release's migration (``later``), nothing pending after ``db init``."""
    url = f"sqlite:///{tmp_path / 'deployment'}"
    _cli(NEW_SRC, tmp_path, "db", "init", "--db", url)
    for file in (tmp_path / "deployment").glob("*.db"):
        with sqlite3.connect(file) as db:
            if db.execute("SELECT 1 FROM sqlite_master WHERE name = '_migrations'").fetchone():
                stamp = "2026-12-01T00:00:00+00:00"
                db.execute("INSERT OR IGNORE INTO _migrations VALUES ('a001_proposals', ?)", (stamp,))
        db.close()
    checked = _cli(NEW_SRC, tmp_path, "db", "check", "--db", url)
    assert (checked["pending"], checked["later"]) == ([], []), checked
