"""Durable pauses: a question nobody could answer (kept until ``tether mcp resume`` stores a
validated answer, found again by the question's key), and a task that outlived its call (status
``task``, found by ``task_key``: the call run again waits on it). Table: ``tether.sql._tables``.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Collection
from dataclasses import dataclass, fields
from typing import Any, Literal, Protocol, runtime_checkable

from sqlalchemy import Connection, Row, select, update

from tether.errors import ApprovalError
from tether.sql._database import SqlStore
from tether.sql._tables import elicitation_pauses as T
from tether.sql._tables import insertion_order, lock, seconds_now

__all__ = ["Pause", "PauseStore", "Pauses", "question_key", "task_key"]

PauseStatus = Literal["pending", "answered", "used", "completed", "task"]


def question_key(server: str, tool: str, arguments: Any, message: str, schema: Any) -> str:
    """The identity of one question asked during one call (same call, same question)."""
    blob = json.dumps([server, tool, arguments, message, schema], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def task_key(server: str, tool: str, arguments: Any) -> str:
    """The identity of one task-augmented call (same call, same task)."""
    return question_key(server, tool, arguments, "", {"task": True})


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

    @property
    def task_id(self) -> str | None:
        """The server's task a task pause waits on (None for a question)."""
        return str(self.answer["task_id"]) if self.answer and "task_id" in self.answer else None


# The table's columns are named as the value's fields: a row maps onto its value.
_COLUMNS = [T.c[f.name] for f in fields(Pause)]


def _pause(row: Row[Any]) -> Pause:
    answer = json.loads(row.answer) if row.answer else None
    parsed = {"arguments": json.loads(row.arguments), "schema": json.loads(row.schema), "answer": answer}
    return Pause(**{**row._mapping, **parsed})


def _get(conn: Connection, pause_id: str) -> Pause:
    row = conn.execute(select(*_COLUMNS).where(T.c.id == pause_id)).first()
    if row is None:
        raise ApprovalError("unknown_pause", f"no elicitation pause {pause_id!r}")
    return _pause(row)


def _insert(
    conn: Connection,
    prefix: str,
    run_id: str,
    server: str,
    tool: str,
    arguments: dict[str, Any],
    message: str,
    schema: dict[str, Any],
    key: str,
    status: PauseStatus,
    answer: Any = None,
) -> Pause:
    pid = prefix + uuid.uuid4().hex[:12]
    conn.execute(
        T.insert().values(
            id=pid,
            created_at=seconds_now(),
            run_id=run_id,
            server=server,
            tool=tool,
            arguments=json.dumps(arguments),
            message=message,
            schema=json.dumps(schema),
            question_key=key,
            status=status,
            answer=json.dumps(answer) if answer is not None else None,
        )
    )
    return _get(conn, pid)


def _where(conn: Connection, *where: Any) -> list[Pause]:
    query = select(*_COLUMNS).where(*where).order_by(insertion_order(conn, T))
    return [_pause(r) for r in conn.execute(query)]


def _answer(
    conn: Connection, pause_id: str, action: str, content: dict[str, Any] | None, actor: str
) -> Pause:
    answer = json.dumps(content) if content is not None else None
    count = conn.execute(
        update(T)
        .where(T.c.id == pause_id, T.c.status == "pending")
        .values(status="answered", action=action, answer=answer, answered_by=actor, answered_at=seconds_now())
    ).rowcount
    current = _get(conn, pause_id)
    if not count:
        raise ApprovalError("not_pending", f"pause {pause_id} is {current.status}, not pending")
    return current


def _take_answer(conn: Connection, key: str, run_id: str) -> Pause | None:
    # Handed over once: a concurrent taker (PostgreSQL) passes over the row this one holds. Only
    # to the run it was given for: another run asking the same question (another tenant's too)
    # was answered by nobody.
    row = conn.execute(
        select(T.c.id)
        .where(T.c.question_key == key, T.c.run_id == run_id, T.c.status == "answered")
        .order_by(T.c.answered_at, insertion_order(conn, T))
        .limit(1)
        .with_for_update(skip_locked=True)
    ).first()
    if row is None:
        return None
    conn.execute(update(T).where(T.c.id == row.id).values(status="used"))
    return _get(conn, row.id)


def _first(conn: Connection, run_id: str, key: str, status: PauseStatus) -> Pause | None:
    """The run's oldest pause for question (or task) ``key`` in ``status``."""
    row = conn.execute(
        select(*_COLUMNS)
        .where(T.c.question_key == key, T.c.run_id == run_id, T.c.status == status)
        .order_by(insertion_order(conn, T))
        .limit(1)
    ).first()
    return _pause(row) if row is not None else None


def _complete(conn: Connection, pause_id: str, outcome: str) -> None:
    conn.execute(update(T).where(T.c.id == pause_id).values(status="completed", outcome=outcome))


@runtime_checkable
class Pauses(Protocol):
    """The pauses concern, async only: what a host, the console and the CLI do with pauses."""

    async def create(
        self,
        *,
        run_id: str,
        server: str,
        tool: str,
        arguments: dict[str, Any],
        message: str,
        schema: dict[str, Any],
    ) -> Pause: ...

    async def get(self, pause_id: str) -> Pause: ...

    async def pending(self, ids: Collection[str] | None = None) -> list[Pause]: ...

    async def pending_runs(self) -> list[tuple[str, str]]: ...

    async def for_run(self, run_id: str) -> list[Pause]: ...

    async def answer(
        self, pause_id: str, action: str, content: dict[str, Any] | None, *, actor: str
    ) -> Pause: ...

    async def take_answer(self, key: str, run_id: str) -> Pause | None: ...

    async def complete(self, pause_id: str, outcome: str) -> None: ...

    async def park(
        self,
        *,
        run_id: str,
        server: str,
        tool: str,
        arguments: dict[str, Any],
        task_id: str,
        check_after: str,
    ) -> Pause: ...

    async def parked(
        self, run_id: str, server: str, tool: str, arguments: dict[str, Any]
    ) -> Pause | None: ...


class PauseStore(SqlStore):
    """Pauses (``Pauses``) in an ``SqlStore``; one transaction a method; an answer is handed
    over once (``take_answer``) whichever machine gave it."""

    concern = "pauses"

    async def create(
        self,
        *,
        run_id: str,
        server: str,
        tool: str,
        arguments: dict[str, Any],
        message: str,
        schema: dict[str, Any],
    ) -> Pause:
        """A new pending pause, or the run's one still pending for this question."""
        key = question_key(server, tool, arguments, message, schema)

        def create(conn: Connection) -> Pause:
            lock(conn, f"pause|{run_id}|{key}")
            if (found := _first(conn, run_id, key, "pending")) is not None:
                return found
            return _insert(conn, "elic-", run_id, server, tool, arguments, message, schema, key, "pending")

        return await self.db.write(create)

    async def get(self, pause_id: str) -> Pause:
        """Raises ``ApprovalError`` (``unknown_pause``)."""
        return await self.db.read(_get, pause_id)

    async def pending(self, ids: Collection[str] | None = None) -> list[Pause]:
        """The pending pauses (of ``ids`` if given), oldest first."""
        if ids is None:
            return await self.db.read(_where, T.c.status == "pending")
        return await self.db.read(_where, T.c.status == "pending", T.c.id.in_(sorted(ids)))

    async def pending_runs(self) -> list[tuple[str, str]]:
        """Each pending pause's id and run, oldest first: all that choosing among them reads (no
        question, arguments or schema is parsed for a pause not chosen)."""

        def read(conn: Connection) -> list[tuple[str, str]]:
            query = select(T.c.id, T.c.run_id).where(T.c.status == "pending")
            return [(r.id, r.run_id) for r in conn.execute(query.order_by(insertion_order(conn, T)))]

        return await self.db.read(read)

    async def for_run(self, run_id: str) -> list[Pause]:
        """Every pause of one run, whatever its status, oldest first."""
        return await self.db.read(_where, T.c.run_id == run_id)

    async def answer(
        self, pause_id: str, action: str, content: dict[str, Any] | None, *, actor: str
    ) -> Pause:
        """Record a validated answer once. Raises ``ApprovalError`` if it is not pending."""
        return await self.db.write(_answer, pause_id, action, content, actor)

    async def take_answer(self, key: str, run_id: str) -> Pause | None:
        """The answered pause for this question of ``run_id``, marked used (an answer is handed
        over once, and only to the run whose question it answered)."""
        return await self.db.write(_take_answer, key, run_id)

    async def complete(self, pause_id: str, outcome: str) -> None:
        await self.db.write(_complete, pause_id, outcome)

    async def park(
        self,
        *,
        run_id: str,
        server: str,
        tool: str,
        arguments: dict[str, Any],
        task_id: str,
        check_after: str,
    ) -> Pause:
        """The run's pause for this call's task, new or updated (``check_after``: when to look
        again), or as closed meanwhile (its status tells)."""
        key = task_key(server, tool, arguments)
        waiting = {"task_id": task_id, "check_after": check_after}

        def park(conn: Connection) -> Pause:
            lock(conn, f"pause|{run_id}|{key}")
            found = _first(conn, run_id, key, "task")
            if found is not None and found.task_id == task_id:
                conn.execute(update(T).where(T.c.id == found.id).values(answer=json.dumps(waiting)))
                return _get(conn, found.id)
            if found is None:
                # Closed while a call waited on it (the run cancelled, its task cancelled): never reopened.
                for row in conn.execute(
                    select(*_COLUMNS).where(T.c.question_key == key, T.c.run_id == run_id)
                ):
                    if (closed := _pause(row)).task_id == task_id:
                        return closed
            message = f"task {task_id} of server {server} still running"
            return _insert(conn, "task-", run_id, server, tool, arguments, message, {}, key, "task", waiting)

        return await self.db.write(park)

    async def parked(self, run_id: str, server: str, tool: str, arguments: dict[str, Any]) -> Pause | None:
        """The run's task pause for this very call, if its task has not ended yet."""
        return await self.db.read(_first, run_id, task_key(server, tool, arguments), "task")
