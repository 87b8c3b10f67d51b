"""The MCP host's state on PostgreSQL: capability pins (``PgPinStore``) and elicitation pauses
(``PgPauseStore``), with the methods of ``PinStore`` and ``PauseStore`` (and ``a``-prefixed
twins for the event loop). Shared by every machine of a deployment: a tool approved, or a
question answered, on one machine is seen by all.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from tether.errors import ApprovalError
from tether.mcp.pauses import Pause, question_key
from tether.mcp.pinning import Pin, ToolCheck, canonical_json
from tether.pg import Op, PgDatabase, PgMigration, Sql

__all__ = ["PAUSE_MIGRATIONS", "PIN_MIGRATIONS", "PgPauseStore", "PgPinStore"]

PIN_MIGRATIONS: tuple[PgMigration, ...] = (
    (
        "pg_p001_pins",
        (
            """CREATE TABLE pins (
                server TEXT NOT NULL,
                tool TEXT NOT NULL,
                sha256 TEXT NOT NULL,
                definition TEXT NOT NULL,
                endpoint TEXT NOT NULL,
                approved_by TEXT NOT NULL,
                approved_at TEXT NOT NULL,
                PRIMARY KEY (server, tool)
            )""",
            """CREATE TABLE pin_history (
                id BIGSERIAL PRIMARY KEY,
                server TEXT NOT NULL,
                tool TEXT NOT NULL,
                sha256 TEXT NOT NULL,
                action TEXT NOT NULL,
                actor TEXT NOT NULL,
                at TEXT NOT NULL
            )""",
        ),
    ),
)

PAUSE_MIGRATIONS: tuple[PgMigration, ...] = (
    (
        "pg_e001_elicitation_pauses",
        (
            """CREATE TABLE elicitation_pauses (
                seq BIGSERIAL UNIQUE,
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
            "CREATE INDEX elicitation_pauses_run ON elicitation_pauses (run_id)",
        ),
    ),
)

_HISTORY = "INSERT INTO pin_history (server, tool, sha256, action, actor, at) VALUES (%s, %s, %s, %s, %s, %s)"


def _stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# -- pins ----------------------------------------------------------------------------------------


def _pins(server: str) -> Op[dict[str, Pin]]:
    rows = yield Sql(
        "SELECT server, tool, sha256, definition, endpoint, approved_by, approved_at FROM pins"
        " WHERE server = %s",
        (server,),
    )
    return {r[1]: Pin(r[0], r[1], r[2], json.loads(r[3]), r[4], r[5], r[6]) for r in rows}


def _approve(server: str, checks: tuple[ToolCheck, ...], endpoint: str, actor: str) -> Op[list[str]]:
    now = _stamp()
    names = []
    for c in checks:
        yield Sql(
            "INSERT INTO pins VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (server, tool) DO UPDATE SET"
            " sha256 = excluded.sha256, definition = excluded.definition, endpoint = excluded.endpoint,"
            " approved_by = excluded.approved_by, approved_at = excluded.approved_at",
            (server, c.tool, c.sha256, canonical_json(c.definition), endpoint, actor, now),
            fetch="none",
        )
        yield Sql(_HISTORY, (server, c.tool, c.sha256, "approve", actor, now), fetch="none")
        names.append(c.tool)
    return names


def _revoke(server: str, tool: str, actor: str) -> Op[bool]:
    count = yield Sql("DELETE FROM pins WHERE server = %s AND tool = %s", (server, tool), fetch="rowcount")
    if count:
        yield Sql(_HISTORY, (server, tool, "", "revoke", actor, _stamp()), fetch="none")
    return bool(count)


class PgPinStore:
    """Approved tool definitions per server id, on PostgreSQL (see ``tether.mcp.pinning``)."""

    def __init__(self, db: str | PgDatabase) -> None:
        self._owns = not isinstance(db, PgDatabase)
        self.db = db if isinstance(db, PgDatabase) else PgDatabase(db)
        self.db.migrate("pins", PIN_MIGRATIONS)

    def pins(self, server: str) -> dict[str, Pin]:
        return self.db.run(_pins, server)

    def approve(self, server: str, checks: Iterable[ToolCheck], *, endpoint: str, actor: str) -> list[str]:
        """Pin these definitions (all in one transaction). Returns the tool names pinned."""
        return self.db.run(_approve, server, tuple(checks), endpoint, actor)

    def revoke(self, server: str, tool: str, *, actor: str) -> bool:
        return self.db.run(_revoke, server, tool, actor)

    async def apins(self, server: str) -> dict[str, Pin]:
        return await self.db.arun(_pins, server)

    async def aapprove(
        self, server: str, checks: Iterable[ToolCheck], *, endpoint: str, actor: str
    ) -> list[str]:
        return await self.db.arun(_approve, server, tuple(checks), endpoint, actor)

    async def arevoke(self, server: str, tool: str, *, actor: str) -> bool:
        return await self.db.arun(_revoke, server, tool, actor)

    def close(self) -> None:
        if self._owns:
            self.db.close()


# -- pauses --------------------------------------------------------------------------------------

_PAUSE = (
    "id, created_at, run_id, server, tool, arguments, message, schema, question_key, status, action,"
    " answer, answered_by, outcome"
)


def _pause(row: tuple[Any, ...]) -> Pause:
    return Pause(
        row[0], row[1], row[2], row[3], row[4], json.loads(row[5]), row[6], json.loads(row[7]), row[8],
        row[9], row[10], json.loads(row[11]) if row[11] else None, row[12], row[13],
    )  # fmt: skip


def _get(pause_id: str) -> Op[Pause]:
    row = yield Sql(f"SELECT {_PAUSE} FROM elicitation_pauses WHERE id = %s", (pause_id,), fetch="one")
    if row is None:
        raise ApprovalError("unknown_pause", f"no elicitation pause {pause_id!r}")
    return _pause(row)


def _create(
    run_id: str, server: str, tool: str, arguments: dict[str, Any], message: str, schema: dict[str, Any]
) -> Op[Pause]:
    key = question_key(server, tool, arguments, message, schema)
    # One question, one pause: concurrent askers of the same question in one run are serialised.
    yield Sql("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"pause|{run_id}|{key}",), fetch="none")
    row = yield Sql(
        f"SELECT {_PAUSE} FROM elicitation_pauses WHERE question_key = %s AND run_id = %s"
        " AND status = 'pending'",
        (key, run_id),
        fetch="one",
    )
    if row is not None:
        return _pause(row)
    row = yield Sql(
        "INSERT INTO elicitation_pauses (id, created_at, run_id, server, tool, arguments, message, schema,"
        f" question_key, status) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, 'pending') RETURNING {_PAUSE}",
        (
            "elic-" + uuid.uuid4().hex[:12],
            _stamp(),
            run_id,
            server,
            tool,
            json.dumps(arguments),
            message,
            json.dumps(schema),
            key,
        ),
        fetch="one",
    )
    return _pause(row)


def _pending() -> Op[list[Pause]]:
    rows = yield Sql(f"SELECT {_PAUSE} FROM elicitation_pauses WHERE status = 'pending' ORDER BY seq")
    return [_pause(r) for r in rows]


def _for_run(run_id: str) -> Op[list[Pause]]:
    rows = yield Sql(f"SELECT {_PAUSE} FROM elicitation_pauses WHERE run_id = %s ORDER BY seq", (run_id,))
    return [_pause(r) for r in rows]


def _answer(pause_id: str, action: str, content: dict[str, Any] | None, actor: str) -> Op[Pause]:
    row = yield Sql(
        "UPDATE elicitation_pauses SET status = 'answered', action = %s, answer = %s, answered_by = %s,"
        f" answered_at = %s WHERE id = %s AND status = 'pending' RETURNING {_PAUSE}",
        (action, json.dumps(content) if content is not None else None, actor, _stamp(), pause_id),
        fetch="one",
    )
    if row is None:
        current = yield from _get(pause_id)
        raise ApprovalError("not_pending", f"pause {pause_id} is {current.status}, not pending")
    return _pause(row)


def _take_answer(key: str) -> Op[Pause | None]:
    row = yield Sql(
        f"UPDATE elicitation_pauses SET status = 'used' WHERE id = (SELECT id FROM elicitation_pauses"
        " WHERE question_key = %s AND status = 'answered' ORDER BY answered_at, seq LIMIT 1"
        f" FOR UPDATE SKIP LOCKED) RETURNING {_PAUSE}",
        (key,),
        fetch="one",
    )
    return _pause(row) if row is not None else None


def _complete(pause_id: str, outcome: str) -> Op[None]:
    yield Sql(
        "UPDATE elicitation_pauses SET status = 'completed', outcome = %s WHERE id = %s",
        (outcome, pause_id),
        fetch="none",
    )


class PgPauseStore:
    """Elicitation pauses on PostgreSQL (see ``tether.mcp.pauses``): an answer given on any
    machine is handed over once (``take_answer`` is atomic across processes)."""

    def __init__(self, db: str | PgDatabase) -> None:
        self._owns = not isinstance(db, PgDatabase)
        self.db = db if isinstance(db, PgDatabase) else PgDatabase(db)
        self.db.migrate("pauses", PAUSE_MIGRATIONS)

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
        """A new pending pause, or the run's one still pending for this very question."""
        return self.db.run(_create, run_id, server, tool, arguments, message, schema)

    def get(self, pause_id: str) -> Pause:
        """Raises ``ApprovalError`` (``unknown_pause``)."""
        return self.db.run(_get, pause_id)

    def pending(self) -> list[Pause]:
        return self.db.run(_pending)

    def for_run(self, run_id: str) -> list[Pause]:
        """Every pause of one run, oldest first."""
        return self.db.run(_for_run, run_id)

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
        return await self.db.arun(_get, pause_id)

    async def apending(self) -> list[Pause]:
        return await self.db.arun(_pending)

    async def afor_run(self, run_id: str) -> list[Pause]:
        return await self.db.arun(_for_run, run_id)

    async def aanswer(
        self, pause_id: str, action: str, content: dict[str, Any] | None, *, actor: str
    ) -> Pause:
        return await self.db.arun(_answer, pause_id, action, content, actor)

    async def atake_answer(self, key: str) -> Pause | None:
        return await self.db.arun(_take_answer, key)

    async def acomplete(self, pause_id: str, outcome: str) -> None:
        await self.db.arun(_complete, pause_id, outcome)

    def close(self) -> None:
        if self._owns:
            self.db.close()
