"""One connection discipline for every SQLite store (tether.sql._database.Database).

- A store operation awaited on the event loop waits for a locked file in a worker thread:
  the loop keeps running (tested per store, with the write lock held by another connection).
- Every store is built on ``Database``, with the same connection settings, and its async
  face mirrors its sync face; no other module opens SQLite itself.
- Concurrent writers (threads, tasks, processes) on one file: no "database is locked", no
  lost write.
"""

from __future__ import annotations

import ast
import inspect
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

import tether
from tether.errors import ConfigError
from tether.mcp._pauses import Pauses, PauseStore
from tether.mcp._pinning import Pins, PinStore, ToolCheck
from tether.memory import MemoryPolicy, MemoryRecord, Source, SqliteMemory
from tether.policy import SqliteApprovalStore
from tether.policy._memory_store import MemoryApprovalStore
from tether.policy._store import (
    ApprovalStore,
    CheckpointStore,
    EffectLedger,
    LedgerEntry,
    NewProposal,
    ProposalStore,
)
from tether.sql._database import MIGRATIONS, Database, blocking
from tether.sql._earlier import EARLIER

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
SRC = Path(tether.__file__).parent
POLICY = MemoryPolicy(approved_sources=frozenset({"erp-assets"}))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def proposal(run_id: str | None = None, call_id: str | None = None) -> NewProposal:
    return NewProposal(
        "org-alpha",
        "add_note",
        '{"note":"n"}',
        "sha256:x",
        "write",
        "model",
        run_id,
        0 if run_id else None,
        call_id,
    )


def dead(entry: LedgerEntry, now: datetime) -> bool:
    return True


def memory_record(n: int = 0) -> MemoryRecord:
    return MemoryRecord(
        kind="semantic",
        subject=f"equipment:eq-{n}",
        claim="nominal voltage is 380 V",
        source=Source(system="erp-assets", record=f"asset-{n}", observed_at=T0),
        scope="tenant:a",
        confidence="authoritative",
        valid_until=T0 + timedelta(days=365),
        acl=frozenset({"maintenance-read"}),
        retention="while-asset-active",
        purpose="answer maintenance questions",
        sensitivity="internal",
    )


# -- every store, one write each: what the event-loop test drives ---------------------------------


@dataclass
class Case:
    store: Any
    write: Callable[[], Awaitable[Any]]  # one write through the store's async face
    written: Callable[[], Awaitable[bool]]  # the write is in the file


def approvals_case(path: Path) -> Case:
    store = SqliteApprovalStore(path)
    box: dict[str, Any] = {}

    async def write() -> None:
        box["p"] = await store.add_proposal(proposal(), now=T0)

    async def written() -> bool:
        return await store.get_proposal(box["p"].id) == box["p"]

    return Case(store, write, written)


def ledger_case(path: Path) -> Case:
    store = SqliteApprovalStore(path)

    async def write() -> None:
        lease = T0 + timedelta(minutes=1)
        kw: Any = {"tool": "t", "arguments_hash": "h", "owner": "o", "lease_until": lease, "owner_dead": dead}
        await store.claim("k1", now=T0, **kw)

    async def written() -> bool:
        return await store.ledger_entry("k1") is not None

    return Case(store, write, written)


def pins_case(path: Path) -> Case:
    store = PinStore(path)
    check = ToolCheck("lookup", "new", "sha", {"name": "lookup"})

    async def write() -> None:
        await store.approve("s", [check], endpoint="e", actor="ops")

    async def written() -> bool:
        return "lookup" in await store.pins("s")

    return Case(store, write, written)


def pauses_case(path: Path) -> Case:
    store = PauseStore(path)
    box: dict[str, Any] = {}

    async def write() -> None:
        box["p"] = await store.create(run_id="r", server="s", tool="t", arguments={}, message="?", schema={})

    async def written() -> bool:
        query = "SELECT status FROM elicitation_pauses WHERE id = ?"
        return bool(
            store.db.snapshot(lambda c: c.exec_driver_sql(query, (box["p"].id,)).scalar()) == "pending"
        )

    return Case(store, write, written)


def memory_case(path: Path) -> Case:
    store = SqliteMemory(path, policy=POLICY, clock=lambda: T0 + timedelta(hours=1))
    box: dict[str, Any] = {}

    async def write() -> None:
        box["w"] = await store.propose(memory_record())

    async def written() -> bool:
        rows = store.db.snapshot(lambda c: c.exec_driver_sql("SELECT id FROM memory_records").fetchall())
        return rows == [(box["w"].record.id,)]

    return Case(store, write, written)


CASES = {
    "approvals": approvals_case,
    "ledger": ledger_case,
    "pins": pins_case,
    "pauses": pauses_case,
    "memory": memory_case,
}


@pytest.mark.parametrize("name", sorted(CASES))
async def test_a_store_write_waiting_for_a_locked_file_leaves_the_event_loop_running(
    name: str, tmp_path: Path
) -> None:
    path = tmp_path / "store.db"
    case = CASES[name](path)
    other = sqlite3.connect(path, isolation_level=None)  # another process's writer, in effect
    other.execute("BEGIN IMMEDIATE")
    finished = anyio.Event()
    ticks = 0

    async def write() -> None:
        await case.write()
        finished.set()

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            # The write is now parked on SQLite's busy timeout. A store that waited for it on the
            # loop's own thread would stop these ticks until it timed out ("database is locked").
            while ticks < 40:
                await anyio.sleep(0.005)
                ticks += 1
            assert not finished.is_set()  # it really is waiting for the other writer
            other.execute("COMMIT")
            await finished.wait()
    other.close()
    assert ticks == 40 and await case.written()


async def test_reads_are_not_held_behind_another_writer(tmp_path: Path) -> None:
    store = SqliteApprovalStore(tmp_path / "a.db")
    first = await store.add_proposal(proposal(), now=T0)
    other = sqlite3.connect(store.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    other.execute(
        "INSERT INTO approval_events (proposal_id, op, actor, detail, at) VALUES ('x','y','z','','t')"
    )
    with anyio.fail_after(10):
        assert await store.get_proposal(first.id) == first  # WAL: a snapshot, no write lock needed
        assert [e.op for e in await store.events(first.id)] == ["proposed"]
    other.execute("ROLLBACK")
    other.close()


# -- the same discipline everywhere ---------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_store_is_built_on_the_shared_database_with_the_same_settings(
    name: str, tmp_path: Path
) -> None:
    store = CASES[name](tmp_path / "store.db").store
    db = store.db
    assert isinstance(db, Database) and db.dialect == "sqlite"

    def settings(conn: Any) -> tuple[Any, ...]:
        return tuple(
            conn.exec_driver_sql(f"PRAGMA {p}").scalar()
            for p in ("journal_mode", "foreign_keys", "busy_timeout", "synchronous")
        )

    assert db.snapshot(settings) == ("wal", 1, 30_000, 1)  # synchronous=NORMAL
    concern = {"ledger": "approvals"}.get(name, name)
    count = db.run(lambda c: c.exec_driver_sql("SELECT count(*) FROM _migrations").scalar())
    assert count == len(MIGRATIONS[concern]) + len(EARLIER.get(concern, {}).get("sqlite", ()))


def test_a_path_that_is_not_a_sqlite_file_is_a_configuration_error_naming_it(tmp_path: Path) -> None:
    folder, text = tmp_path / "stores", tmp_path / "notes.db"
    folder.mkdir()
    text.write_text("minutes of the meeting, not a database\n" * 20)
    for bad, why in ((folder, "is a folder"), (text, "is not a SQLite database")):
        with pytest.raises(ConfigError, match=why) as caught:
            SqliteApprovalStore(bad)
        assert str(bad) in str(caught.value)
    assert text.read_text().startswith("minutes of the meeting")  # left as it was
    good = SqliteApprovalStore(tmp_path / "approvals.db")  # a new path is still created
    good.close()
    assert (tmp_path / "approvals.db").exists()


async def test_a_new_store_file_is_readable_by_its_owner_alone_and_an_existing_one_keeps_its_mode(
    tmp_path: Path,
) -> None:
    # A store holds password and token hashes, proposals and checkpoints: a new file (and the
    # -wal and -shm files SQLite makes beside it) is 0600 whatever the umask; a file the
    # operator made keeps the mode they gave it. Both still work as stores.
    SqliteApprovalStore(tmp_path / "approvals.db").close()
    db = Database.sqlite(tmp_path / "approvals.db")
    await db.write(lambda conn: conn.exec_driver_sql("CREATE TABLE probe (x INTEGER)"))
    files = [p for p in tmp_path.iterdir() if p.name.startswith("approvals.db")]
    modes = {p.name: p.stat().st_mode & 0o777 for p in files}
    assert len(modes) == 3, modes  # the file, its -wal and its -shm, while it is open
    db.close()
    assert modes["approvals.db"] == 0o600 and set(modes.values()) == {0o600}, modes
    shared = tmp_path / "shared.db"
    shared.touch(mode=0o640)
    shared.chmod(0o640)
    pins = PinStore(shared)
    await pins.pins("s")
    pins.close()
    assert shared.stat().st_mode & 0o777 == 0o640


async def test_a_store_closes_only_the_database_it_opened(tmp_path: Path) -> None:
    shared = Database.sqlite(tmp_path / "shared.db")
    pins, pauses = PinStore(shared), PauseStore(shared)  # a deployment's stores on one database
    pins.close()
    await pauses.create(run_id="r", server="s", tool="t", arguments={}, message="?", schema={})
    assert [p.run_id for p in await pauses.pending()] == ["r"]  # still open for the other store
    own = PinStore(tmp_path / "own.db")
    own.close()
    with pytest.raises(sqlite3.ProgrammingError):
        await own.pins("s")
    shared.close()


async def test_a_store_in_memory_keeps_nothing_and_shares_nothing() -> None:
    first, second = MemoryApprovalStore(), MemoryApprovalStore()
    stored = await first.add_proposal(proposal(), now=T0)
    assert await first.get_proposal(stored.id) == stored
    assert await second.get_proposal(stored.id) is None  # each its own database
    assert first.path is None and first.db.path is None  # nothing on disk
    first.close()
    with pytest.raises(sqlite3.ProgrammingError):
        await first.get_proposal(stored.id)


def _public_methods(cls: type) -> dict[str, Any]:
    return {n: f for n, f in inspect.getmembers(cls, inspect.isfunction) if not n.startswith("_")}


@pytest.mark.parametrize(
    ("cls", "protocol"),
    [
        (SqliteApprovalStore, ApprovalStore),
        (MemoryApprovalStore, ApprovalStore),
        (PinStore, Pins),
        (PauseStore, Pauses),
    ],
)
def test_every_store_method_is_async_with_one_name_and_no_twin(cls: type, protocol: type) -> None:
    methods = _public_methods(cls)
    blocking_ones = {n for n, f in methods.items() if not inspect.iscoroutinefunction(f)}
    assert blocking_ones == {"close"}  # closing is for the owner's teardown, never a transaction
    assert {n for n in methods if n.startswith("a") and n[1:] in methods} == set()  # no a-twin
    wanted = {n for n, f in _public_methods(protocol).items() if inspect.iscoroutinefunction(f)}
    assert wanted and wanted <= set(methods)


def test_the_approval_store_protocol_is_the_union_of_its_concerns_all_async() -> None:
    seams = {
        seam: {n for n in vars(seam) if not n.startswith("_")}
        for seam in (ProposalStore, EffectLedger, CheckpointStore)
    }
    assert seams[CheckpointStore] == {
        "save_checkpoint",
        "load_checkpoint",
        "list_checkpoints",
        "claim_resume",
        "renew_resume",
        "release_resume",
    }
    assert "claim" in seams[EffectLedger] and "decide" in seams[ProposalStore]
    assert not (seams[ProposalStore] & seams[EffectLedger])  # each method has one concern
    union = set().union(*seams.values())
    assert {n for n in _public_methods(ApprovalStore)} == union
    assert all(inspect.iscoroutinefunction(getattr(ApprovalStore, n)) for n in union)


def test_no_module_but_tether_storage_opens_a_sqlite_connection() -> None:
    offenders = []
    for path in SRC.rglob("*.py"):
        if path.parent == SRC / "sql":  # tether's storage: _database, and _sqlite's driver-only connect
            continue
        text = path.read_text(encoding="utf-8")
        if "sqlite3" not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            opens = (
                isinstance(node, ast.Attribute)
                and node.attr == "connect"
                and isinstance(node.value, ast.Name)
                and node.value.id == "sqlite3"
            )
            if opens or (isinstance(node, ast.ImportFrom) and node.module == "sqlite3"):
                offenders.append(f"{path.relative_to(SRC)}:{getattr(node, 'lineno', 0)}")
    assert offenders == []


# -- transactions -----------------------------------------------------------------------------------


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    d = Database.sqlite(tmp_path / "t.db")
    d.run(lambda c: c.exec_driver_sql("CREATE TABLE t (n INTEGER PRIMARY KEY)"))
    yield d
    d.close()


def _numbers(conn: Any) -> list[tuple[int]]:
    return [tuple(r) for r in conn.exec_driver_sql("SELECT n FROM t ORDER BY n")]


async def test_an_operation_that_raises_leaves_nothing_behind(db: Database) -> None:
    def half(conn: Any) -> None:
        conn.exec_driver_sql("INSERT INTO t VALUES (1)")
        raise ValueError("refused after the first write")

    with pytest.raises(ValueError):
        db.run(half)
    with pytest.raises(ValueError):
        await db.write(half)
    db.run(lambda c: c.exec_driver_sql("INSERT INTO t VALUES (2)"))  # the connection is usable again
    assert db.snapshot(_numbers) == await db.read(_numbers) == [(2,)]


def test_a_driver_error_comes_out_as_the_drivers_own(db: Database) -> None:
    with pytest.raises(sqlite3.IntegrityError):
        db.run(lambda c: c.exec_driver_sql("INSERT INTO t VALUES (3), (3)"))
    assert db.snapshot(_numbers) == []


def test_a_nested_operation_is_refused_instead_of_deadlocking(db: Database) -> None:
    with pytest.raises(RuntimeError, match="nested transaction"):
        db.run(lambda c: db.run(lambda c2: None))
    assert db.run(lambda c: 1) == 1


def test_a_closed_database_refuses_operations(db: Database) -> None:
    db.close()
    with pytest.raises(sqlite3.ProgrammingError):
        db.run(lambda c: 1)


def _table(name: str) -> Any:
    return lambda conn: conn.exec_driver_sql(f"CREATE TABLE {name} (x)")


def test_migrations_are_applied_once_in_order_and_a_failing_one_applies_nothing(tmp_path: Path) -> None:
    steps = [("m1", _table("a")), ("m2", _table("b"))]
    first = Database.sqlite(tmp_path / "m.db")
    assert first.migrate("test", steps[:1]) == ["m1"]
    first.close()
    again = Database.sqlite(tmp_path / "m.db")
    assert again.migrate("test", steps) == ["m2"]

    def names(conn: Any) -> list[str]:
        return [r[0] for r in conn.exec_driver_sql("SELECT name FROM _migrations ORDER BY rowid")]

    assert again.snapshot(names) == ["m1", "m2"]

    def broken(conn: Any) -> None:
        conn.exec_driver_sql("CREATE TABLE c (x)")
        conn.exec_driver_sql("NOT SQL")

    third = Database.sqlite(tmp_path / "m.db")
    with pytest.raises(sqlite3.OperationalError):
        third.migrate("test", [*steps, ("m3", broken)])
    tables = third.snapshot(lambda c: c.exec_driver_sql("SELECT 1 FROM sqlite_master WHERE name = 'c'").all())
    assert tables == [] and third.snapshot(names) == ["m1", "m2"]


# -- concurrency ------------------------------------------------------------------------------------


async def test_threads_and_tasks_writing_one_file_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    per_writer, threads, tasks = 25, 4, 4
    errors: list[BaseException] = []
    lease = T0 + timedelta(minutes=1)

    async def write(store: SqliteApprovalStore, name: str) -> None:
        for i in range(per_writer):
            p = await store.add_proposal(proposal(name, f"c{i}"), now=T0)
            key = f"{name}-{i}"
            await store.claim(
                key,
                tool="t",
                arguments_hash="h",
                owner="o",
                lease_until=lease,
                now=T0,
                owner_dead=dead,
                proposal_id=p.id,
            )
            await store.finish(key, owner="o", result="{}", note="", now=T0)

    def thread_writer(w: int) -> None:
        store = SqliteApprovalStore(path)  # its own store object, as another component would have
        try:
            blocking(write, store, f"thread-{w}")  # a thread of our own: its own event loop
        except BaseException as err:  # collected: the assertion below names it
            errors.append(err)

    shared = SqliteApprovalStore(path)

    async def task_writer(w: int) -> None:
        await write(shared, f"task-{w}")

    workers = [threading.Thread(target=thread_writer, args=(w,)) for w in range(threads)]
    for t in workers:
        t.start()
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for w in range(tasks):
                tg.start_soon(task_writer, w)
    for t in workers:
        t.join()
    assert errors == []
    total = per_writer * (threads + tasks)
    assert len(await shared.list_proposals()) == total
    done = shared.db.snapshot(
        lambda c: c.exec_driver_sql("SELECT count(*) FROM effect_ledger WHERE status = 'done'").scalar()
    )
    assert done == total
    events = shared.db.snapshot(lambda c: c.exec_driver_sql("SELECT count(*) FROM approval_events").scalar())
    assert events == total


WRITER = """
import sys
from datetime import UTC, datetime, timedelta
import anyio
from tether.policy import SqliteApprovalStore
from tether.policy._store import NewProposal

path, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.stdin.readline()  # start together: the first operations race to create and migrate the file
t0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

async def main() -> None:
    store = SqliteApprovalStore(path)
    for i in range(n):
        new = NewProposal("o", "t", "{}", "h", "write", name, name, 0, f"c{i}")
        p = await store.add_proposal(new, now=t0)
        key = f"{name}-{i}"
        lease = t0 + timedelta(minutes=1)
        await store.claim(key, tool="t", arguments_hash="h", owner=name, lease_until=lease,
                          now=t0, owner_dead=lambda e, now: False, proposal_id=p.id)
        await store.finish(key, owner=name, result="{}", note="", now=t0)

anyio.run(main)
print("ok")
"""


@pytest.mark.slow
def test_processes_racing_on_a_fresh_file_lose_nothing(tmp_path: Path) -> None:
    path, n, procs = tmp_path / "fresh.db", 40, 3
    env_path = str(SRC.parent)
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), f"p{k}", str(n)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={"PYTHONPATH": env_path},
        )
        for k in range(procs)
    ]
    for w in workers:  # all released at once, whenever each has finished importing
        assert w.stdin is not None
        w.stdin.write("go\n")
        w.stdin.flush()
    outs = [w.communicate(timeout=120) for w in workers]
    assert [(w.returncode, out.strip(), err[-400:]) for w, (out, err) in zip(workers, outs, strict=True)] == [
        (0, "ok", "")
    ] * procs
    store = SqliteApprovalStore(path)
    assert len(blocking(store.list_proposals)) == n * procs
    done = store.db.snapshot(
        lambda c: c.exec_driver_sql("SELECT count(*) FROM effect_ledger WHERE status = 'done'").scalar()
    )
    assert done == n * procs
