"""Durable pauses: an elicitation nobody could answer, kept until a person does.

A pause stores what was asked (server, tool, the exact call arguments, message, schema)
and, once answered through ``tether mcp resume``, the validated answer. Re-running the
paused call then finds the answer by the question's key and hands it to the server.
``SqlPauseStore`` holds the store's operations once, for SQLite (``PauseStore``, a file
through ``tether.storage.SqliteDatabase``) and PostgreSQL (``tether.mcp.pg_state``).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from tether.errors import ApprovalError
from tether.sqlops import Dialect, Op, OpDatabase, Sql
from tether.storage import Migration, SqliteDatabase, SqliteOps, Synchronous

__all__ = ["Pause", "PauseStore", "SqlPauseStore", "question_key"]

PauseStatus = Literal["pending", "answered", "used", "completed"]

MIGRATIONS: tuple[Migration, ...] = (
    (
        "001_elicitation_pauses",
        (
            """CREATE TABLE elicitation_pauses (
                id TEXT PRIMARY KEY,
                created_at TEXT NOT NULL,
                run_id TEXT NOT NULL,
                server TEXT NOT NULL,
                tool TEXT NOT NULL,
                arguments TEXT NOT NULL,
                message TEXT NOT NULL,
                schema TEXT NOT NULL,
                question_key TEXT NOT NULL,
                status TEXT NOT NULL,
                action TEXT,
                answer TEXT,
                answered_by TEXT,
                answered_at TEXT,
                outcome TEXT
            )""",
            "CREATE INDEX elicitation_pauses_key ON elicitation_pauses (question_key, status)",
        ),
    ),
)


def question_key(server: str, tool: str, arguments: Any, message: str, schema: Any) -> str:
    """The identity of one question asked during one call (same call, same question)."""
    blob = json.dumps([server, tool, arguments, message, schema], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class Pause:
    id: str
    created_at: str
    run_id: str
    server: str
    tool: str
    arguments: dict[str, Any]
    message: str
    schema: dict[str, Any]
    question_key: str
    status: PauseStatus
    action: str | None = None
    answer: dict[str, Any] | None = None
    answered_by: str | None = None
    outcome: str | None = None


_COLUMNS = (
    "id, created_at, run_id, server, tool, arguments, message, schema, question_key, status, action, answer,"
    " answered_by, outcome"
)


def _stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _pause(row: tuple[Any, ...]) -> Pause:
    return Pause(
        row[0], row[1], row[2], row[3], row[4], json.loads(row[5]), row[6], json.loads(row[7]), row[8],
        row[9], row[10], json.loads(row[11]) if row[11] else None, row[12], row[13],
    )  # fmt: skip


# -- operations (one transaction each, see tether.sqlops) ------------------------------------------


def _get(pause_id: str) -> Op[Pause]:
    row = yield Sql(f"SELECT {_COLUMNS} FROM elicitation_pauses WHERE id = %s", (pause_id,), fetch="one")
    if row is None:
        raise ApprovalError("unknown_pause", f"no elicitation pause {pause_id!r}")
    return _pause(row)


def _create(
    d: Dialect,
    run_id: str,
    server: str,
    tool: str,
    arguments: dict[str, Any],
    message: str,
    schema: dict[str, Any],
) -> Op[Pause]:
    key = question_key(server, tool, arguments, message, schema)
    # One question, one pause: concurrent askers of the same question in one run are serialised.
    yield from d.lock(f"pause|{run_id}|{key}")
    row = yield Sql(
        f"SELECT {_COLUMNS} FROM elicitation_pauses WHERE question_key = %s AND run_id = %s"
        " AND status = 'pending'",
        (key, run_id),
        fetch="one",
    )
    if row is not None:
        return _pause(row)
    pid = "elic-" + uuid.uuid4().hex[:12]
    yield Sql(
        "INSERT INTO elicitation_pauses (id, created_at, run_id, server, tool, arguments, message, schema,"
        " question_key, status) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, 'pending')",
        (pid, _stamp(), run_id, server, tool, json.dumps(arguments), message, json.dumps(schema), key),
        fetch="none",
    )
    return (yield from _get(pid))


def _pending(d: Dialect) -> Op[list[Pause]]:
    rows = yield Sql(f"SELECT {_COLUMNS} FROM elicitation_pauses WHERE status = 'pending' ORDER BY {d.order}")
    return [_pause(r) for r in rows]


def _for_run(d: Dialect, run_id: str) -> Op[list[Pause]]:
    rows = yield Sql(
        f"SELECT {_COLUMNS} FROM elicitation_pauses WHERE run_id = %s ORDER BY {d.order}", (run_id,)
    )
    return [_pause(r) for r in rows]


def _answer(pause_id: str, action: str, content: dict[str, Any] | None, actor: str) -> Op[Pause]:
    count = yield Sql(
        "UPDATE elicitation_pauses SET status = 'answered', action = %s, answer = %s, answered_by = %s,"
        " answered_at = %s WHERE id = %s AND status = 'pending'",
        (action, json.dumps(content) if content is not None else None, actor, _stamp(), pause_id),
        fetch="rowcount",
    )
    current = yield from _get(pause_id)
    if not count:
        raise ApprovalError("not_pending", f"pause {pause_id} is {current.status}, not pending")
    return current


def _take_answer(d: Dialect, key: str) -> Op[Pause | None]:
    # Handed over once: a concurrent taker (PostgreSQL) passes over the row this one holds.
    row = yield Sql(
        "SELECT id FROM elicitation_pauses WHERE question_key = %s AND status = 'answered'"
        f" ORDER BY answered_at, {d.order} LIMIT 1{d.skip_locked}",
        (key,),
        fetch="one",
    )
    if row is None:
        return None
    yield Sql("UPDATE elicitation_pauses SET status = 'used' WHERE id = %s", (row[0],), fetch="none")
    return (yield from _get(row[0]))


def _complete(pause_id: str, outcome: str) -> Op[None]:
    yield Sql(
        "UPDATE elicitation_pauses SET status = 'completed', outcome = %s WHERE id = %s",
        (outcome, pause_id),
        fetch="none",
    )


class SqlPauseStore:
    """Elicitation pauses on an ``OpDatabase``: each method is one transaction; the
    ``a``-prefixed twin runs it without blocking the event loop. An answer given on any
    machine sharing the database is handed over once (``take_answer``)."""

    def __init__(self, ops: OpDatabase) -> None:
        self._ops = ops

    def create(
        self,
        *,
        run_id: str,
        server: str,
        tool: str,
        arguments: dict[str, Any],
        message: str,
        schema: dict[str, Any],
    ) -> Pause:
        """A new pending pause, or the run's one still pending for this very question (a resumed
        run asked again before anyone answered: one question, one pause)."""
        return self._ops.run(_create, self._ops.dialect, run_id, server, tool, arguments, message, schema)

    def get(self, pause_id: str) -> Pause:
        """Raises ``ApprovalError`` (``unknown_pause``)."""
        return self._ops.read(_get, pause_id)

    def pending(self) -> list[Pause]:
        """The pending pauses, oldest first."""
        return self._ops.read(_pending, self._ops.dialect)

    def for_run(self, run_id: str) -> list[Pause]:
        """Every pause of one run, whatever its status, oldest first."""
        return self._ops.read(_for_run, self._ops.dialect, run_id)

    def answer(self, pause_id: str, action: str, content: dict[str, Any] | None, *, actor: str) -> Pause:
        """Record a validated answer once. Raises ``ApprovalError`` if it is not pending."""
        return self._ops.run(_answer, pause_id, action, content, actor)

    def take_answer(self, key: str) -> Pause | None:
        """The answered pause for this question, marked used (an answer is handed over once)."""
        return self._ops.run(_take_answer, self._ops.dialect, key)

    def complete(self, pause_id: str, outcome: str) -> None:
        self._ops.run(_complete, pause_id, outcome)

    async def acreate(
        self,
        *,
        run_id: str,
        server: str,
        tool: str,
        arguments: dict[str, Any],
        message: str,
        schema: dict[str, Any],
    ) -> Pause:
        return await self._ops.arun(
            _create, self._ops.dialect, run_id, server, tool, arguments, message, schema
        )

    async def aget(self, pause_id: str) -> Pause:
        return await self._ops.aread(_get, pause_id)

    async def apending(self) -> list[Pause]:
        return await self._ops.aread(_pending, self._ops.dialect)

    async def afor_run(self, run_id: str) -> list[Pause]:
        return await self._ops.aread(_for_run, self._ops.dialect, run_id)

    async def aanswer(
        self, pause_id: str, action: str, content: dict[str, Any] | None, *, actor: str
    ) -> Pause:
        return await self._ops.arun(_answer, pause_id, action, content, actor)

    async def atake_answer(self, key: str) -> Pause | None:
        return await self._ops.arun(_take_answer, self._ops.dialect, key)

    async def acomplete(self, pause_id: str, outcome: str) -> None:
        await self._ops.arun(_complete, pause_id, outcome)


class PauseStore(SqlPauseStore):
    """Elicitation pauses in the SQLite file at ``path`` (created and migrated when built)."""

    def __init__(
        self, path: str | Path, *, busy_timeout_s: float = 30.0, synchronous: Synchronous = "NORMAL"
    ) -> None:
        self.db = SqliteDatabase(path, MIGRATIONS, busy_timeout_s=busy_timeout_s, synchronous=synchronous)
        self.path = self.db.path
        super().__init__(SqliteOps(self.db))

    def close(self) -> None:
        self.db.close()
