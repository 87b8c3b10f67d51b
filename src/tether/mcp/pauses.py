"""Durable pauses: an elicitation nobody could answer, kept until a person does.

A pause stores what was asked (server, tool, the exact call arguments, message, schema)
and, once answered through ``tether mcp resume``, the validated answer. Re-running the
paused call then finds the answer by the question's key and hands it to the server. The
store lives in SQLite through ``tether.storage.SqliteDatabase``.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from tether.errors import ApprovalError
from tether.storage import Migration, SqliteDatabase, Synchronous

__all__ = ["Pause", "PauseStore", "question_key"]

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


def _get(conn: sqlite3.Connection, pause_id: str) -> Pause:
    row = conn.execute(f"SELECT {_COLUMNS} FROM elicitation_pauses WHERE id = ?", (pause_id,)).fetchone()
    if row is None:
        raise ApprovalError("unknown_pause", f"no elicitation pause {pause_id!r}")
    return Pause(
        row[0], row[1], row[2], row[3], row[4], json.loads(row[5]), row[6], json.loads(row[7]), row[8],
        row[9], row[10], json.loads(row[11]) if row[11] else None, row[12], row[13],
    )  # fmt: skip


def _create(
    conn: sqlite3.Connection,
    run_id: str,
    server: str,
    tool: str,
    arguments: dict[str, Any],
    message: str,
    schema: dict[str, Any],
) -> Pause:
    key = question_key(server, tool, arguments, message, schema)
    row = conn.execute(
        "SELECT id FROM elicitation_pauses WHERE question_key = ? AND run_id = ? AND status = 'pending'",
        (key, run_id),
    ).fetchone()
    if row is not None:
        return _get(conn, row[0])
    pid = "elic-" + uuid.uuid4().hex[:12]
    now = datetime.now(UTC).isoformat(timespec="seconds")
    conn.execute(
        "INSERT INTO elicitation_pauses (id, created_at, run_id, server, tool, arguments, message, "
        "schema, question_key, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending')",
        (pid, now, run_id, server, tool, json.dumps(arguments), message, json.dumps(schema), key),
    )
    return _get(conn, pid)


def _pending(conn: sqlite3.Connection) -> list[Pause]:
    rows = conn.execute(
        "SELECT id FROM elicitation_pauses WHERE status = 'pending' ORDER BY created_at, id"
    ).fetchall()
    return [_get(conn, r[0]) for r in rows]


def _for_run(conn: sqlite3.Connection, run_id: str) -> list[Pause]:
    rows = conn.execute(
        "SELECT id FROM elicitation_pauses WHERE run_id = ? ORDER BY created_at, id", (run_id,)
    ).fetchall()
    return [_get(conn, r[0]) for r in rows]


def _answer(
    conn: sqlite3.Connection, pause_id: str, action: str, content: dict[str, Any] | None, actor: str
) -> Pause:
    now = datetime.now(UTC).isoformat(timespec="seconds")
    cur = conn.execute(
        "UPDATE elicitation_pauses SET status = 'answered', action = ?, answer = ?, answered_by = ?, "
        "answered_at = ? WHERE id = ? AND status = 'pending'",
        (action, json.dumps(content) if content is not None else None, actor, now, pause_id),
    )
    if not cur.rowcount:
        raise ApprovalError("not_pending", f"pause {pause_id} is {_get(conn, pause_id).status}, not pending")
    return _get(conn, pause_id)


def _take_answer(conn: sqlite3.Connection, key: str) -> Pause | None:
    row = conn.execute(
        "SELECT id FROM elicitation_pauses WHERE question_key = ? AND status = 'answered' "
        "ORDER BY answered_at LIMIT 1",
        (key,),
    ).fetchone()
    if row is None:
        return None
    conn.execute("UPDATE elicitation_pauses SET status = 'used' WHERE id = ?", (row[0],))
    return _get(conn, row[0])


def _complete(conn: sqlite3.Connection, pause_id: str, outcome: str) -> None:
    conn.execute(
        "UPDATE elicitation_pauses SET status = 'completed', outcome = ? WHERE id = ?", (outcome, pause_id)
    )


class PauseStore:
    """Elicitation pauses in the SQLite file at ``path``.

    Each method is one transaction of ``self.db`` (tether.storage); the ``a``-prefixed twin
    runs it in a worker thread, for code on the event loop.
    """

    def __init__(
        self, path: str | Path, *, busy_timeout_s: float = 30.0, synchronous: Synchronous = "NORMAL"
    ) -> None:
        self.db = SqliteDatabase(path, MIGRATIONS, busy_timeout_s=busy_timeout_s, synchronous=synchronous)
        self.path = self.db.path

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
        return self.db.run(_create, run_id, server, tool, arguments, message, schema)

    def get(self, pause_id: str) -> Pause:
        """Raises ``ApprovalError`` (``unknown_pause``)."""
        return self.db.read(_get, pause_id)

    def pending(self) -> list[Pause]:
        return self.db.read(_pending)

    def for_run(self, run_id: str) -> list[Pause]:
        """Every pause of one run, whatever its status, oldest first."""
        return self.db.read(_for_run, run_id)

    def answer(self, pause_id: str, action: str, content: dict[str, Any] | None, *, actor: str) -> Pause:
        """Record a validated answer once. Raises ``ApprovalError`` if it is not pending."""
        return self.db.run(_answer, pause_id, action, content, actor)

    def take_answer(self, key: str) -> Pause | None:
        """The answered pause for this question, marked used (an answer is handed over once)."""
        return self.db.run(_take_answer, key)

    def complete(self, pause_id: str, outcome: str) -> None:
        self.db.run(_complete, pause_id, outcome)

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
        return await self.db.arun(_create, run_id, server, tool, arguments, message, schema)

    async def aget(self, pause_id: str) -> Pause:
        return await self.db.aread(_get, pause_id)

    async def apending(self) -> list[Pause]:
        return await self.db.aread(_pending)

    async def afor_run(self, run_id: str) -> list[Pause]:
        return await self.db.aread(_for_run, run_id)

    async def aanswer(
        self, pause_id: str, action: str, content: dict[str, Any] | None, *, actor: str
    ) -> Pause:
        return await self.db.arun(_answer, pause_id, action, content, actor)

    async def atake_answer(self, key: str) -> Pause | None:
        return await self.db.arun(_take_answer, key)

    async def acomplete(self, pause_id: str, outcome: str) -> None:
        await self.db.arun(_complete, pause_id, outcome)

    def close(self) -> None:
        self.db.close()
